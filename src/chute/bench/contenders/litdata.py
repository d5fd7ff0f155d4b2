"""LitData: chunk files written with litdata's ``BinaryWriter``, read by its ``StreamingDataset``
and ``StreamingDataLoader``.

LitData streams whole chunks: with ``shuffle=False`` each DataLoader worker reads its share of
the chunks front to back, and its shuffle permutes chunks, then samples within a chunk. It
cannot read the bench's order, so this row reads one epoch in its natural order and is checked
as a set of samples, as WebDataset is (``own_order``: see
:class:`chute.bench.measure.SampleSetHash`). Outside a distributed run litdata neither drops nor
repeats samples to even out the workers, so every sample comes once. The store is a local
folder, read in place: nothing is downloaded, copied to a cache or left outside the work folder.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .contender import Batch, Contender, Setup

_STORE = "litdata"


def write_chunks(setup: Setup) -> Path:
    """``BinaryWriter`` with ``setup.shard_samples`` samples per chunk, one array per field."""
    from litdata.streaming.writer import BinaryWriter  # optional: skipped without litdata

    folder = setup.root / _STORE
    writer = BinaryWriter(str(folder), chunk_size=setup.shard_samples)
    keys = {n: setup.key(n) for n in setup.fields}
    for start, rows in setup.chunks(1):
        for i in range(len(rows[next(iter(keys))])):
            # rows[n][i, ...] is an array even for a scalar field (rows[n][i] would be a numpy
            # scalar), so every field goes through litdata's numpy serializer
            writer.add_item(start + i, {k: rows[n][i, ...] for n, k in keys.items()})
    writer.done()
    writer.merge()  # writes index.json, which makes the folder a dataset
    return folder


def _loader(setup: Setup) -> Iterable[Batch]:
    import litdata

    ds = litdata.StreamingDataset(str(setup.root / _STORE), shuffle=False)
    loader = litdata.StreamingDataLoader(ds, batch_size=setup.batch_size, num_workers=setup.workers)
    return ({n: b[setup.key(n)] for n in setup.fields} for b in loader)


CONTENDERS = [
    Contender(
        "LitData",
        "BinaryWriter chunks, StreamingDataset(shuffle=False) + StreamingDataLoader: own "
        "order, order-free checksum",
        write_chunks,
        _loader,
        ("litdata",),
        "pip install litdata",
        own_order=True,
    ),
]
