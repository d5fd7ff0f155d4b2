"""WebDataset: tar shards of one ``.npy`` member per field and sample, read sequentially.

WebDataset cannot read in the bench's order: it streams whole shards, and its own shuffle is a
shard shuffle plus a buffer shuffle. So this row reads one epoch in its natural order (shard
shuffle off, shards split between the DataLoader workers as WebDataset does), and the bench
checks that every sample was read exactly once with an order-independent checksum instead
(``own_order``: see :class:`chute.bench.measure.SampleSetHash`). Sequential reads are what
make WebDataset fast; they are also why it is not a random-access loader.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .contender import Batch, Contender, Setup

_STORE = "wds"


def _shards(setup: Setup) -> list[str]:
    return sorted(str(p) for p in (setup.root / _STORE).glob("shard-*.tar"))


def write_tars(setup: Setup) -> Path:
    """``ShardWriter`` with ``setup.shard_samples`` samples per shard."""
    import webdataset as wds  # optional: the contender is skipped without it

    folder = setup.root / _STORE
    folder.mkdir()
    keys = {n: f"{setup.key(n)}.npy" for n in setup.fields}
    pattern = str(folder / "shard-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=setup.shard_samples, verbose=0) as w:
        for start, rows in setup.chunks(1):
            for i in range(len(rows[next(iter(keys))])):
                w.write({"__key__": f"{start + i:09d}", **{k: rows[n][i] for n, k in keys.items()}})
    return folder


def _loader(setup: Setup) -> Iterable[Batch]:
    import webdataset as wds

    keys = [f"{setup.key(n)}.npy" for n in setup.fields]
    ds = (
        wds.WebDataset(_shards(setup), shardshuffle=False, empty_check=False)
        .decode()
        .to_tuple(*keys)
        .batched(setup.batch_size)
    )
    loader = wds.WebLoader(ds, batch_size=None, num_workers=setup.workers)
    return (dict(zip(setup.fields, b, strict=True)) for b in loader)


CONTENDERS = [
    Contender(
        "WebDataset",
        "tar shards of .npy, own sequential order (shardshuffle=False), order-free checksum",
        write_tars,
        _loader,
        ("webdataset",),
        "pip install webdataset",
        own_order=True,
    ),
]
