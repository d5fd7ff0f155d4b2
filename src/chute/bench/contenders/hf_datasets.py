"""Hugging Face ``datasets`` (Arrow): what a user who picked HF instead of chute would write.

The store is ``Dataset.from_generator`` with a fixed-shape feature per field (``Value`` for
scalars, ``List(length=n)`` for vectors, ``Array2D``..``Array5D`` above) and ``save_to_disk``.
The reader is the user-typical fast path: ``load_from_disk(...).with_format("numpy")`` handed to
a torch DataLoader whose batch sampler yields the bench's order; the DataLoader calls HF's
``__getitems__``, one batched random access (``ds[indices]``) per batch, which HF then splits
into per-sample dicts for the default collate. HF's numpy format widens integers to int64 and
floats to float32; each batch is cast back to the stored dtype so the checksum compares the
same bytes (a user would pay the widening and, often, the cast too).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...errors import SchemaError
from .contender import Batch, Contender, Setup, storage

_STORE = "hf-arrow"


def _feature(datasets: Any, name: str, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    value = "bool" if dtype == np.bool_ else dtype.name
    if not shape:
        return datasets.Value(value)
    if len(shape) == 1:
        return datasets.List(datasets.Value(value), length=shape[0])
    if len(shape) > 5:
        raise SchemaError(
            f"field {name!r} has {len(shape)} dimensions; Hugging Face Array features stop at 5"
        )
    return getattr(datasets, f"Array{len(shape)}D")(shape, value)


def write_arrow(setup: Setup) -> Path:
    """``Dataset.from_generator`` (Arrow cache under the work folder), then ``save_to_disk``."""
    import datasets  # optional: the contender is skipped without it

    features = datasets.Features(
        {setup.key(n): _feature(datasets, n, f.shape, storage(f)) for n, f in setup.fields.items()}
    )

    def samples() -> Iterator[dict[str, Any]]:
        for _, rows in setup.chunks(1):
            cols = [(setup.key(n), rows[n]) for n in setup.fields]
            for i in range(len(cols[0][1])):
                yield {k: a[i] for k, a in cols}

    datasets.disable_progress_bars()  # the bench log says what it writes
    ds = datasets.Dataset.from_generator(
        samples, features=features, cache_dir=str(setup.root / "hf-cache")
    )
    path = setup.root / _STORE
    ds.save_to_disk(str(path))
    return path


def _dataloader(setup: Setup) -> Iterable[Batch]:
    import datasets  # optional: the contender is skipped without it

    ds = datasets.load_from_disk(str(setup.root / _STORE)).with_format("numpy")
    loader = torch.utils.data.DataLoader(
        ds, batch_sampler=[b.tolist() for b in setup.batches], num_workers=setup.workers
    )
    dtypes = {n: torch.from_numpy(np.empty(0, storage(f))).dtype for n, f in setup.fields.items()}
    return ({n: b[setup.key(n)].to(dt) for n, dt in dtypes.items()} for b in loader)


CONTENDERS = [
    Contender(
        "HF datasets (Arrow), DataLoader",
        "save_to_disk, with_format('numpy'), DataLoader batch sampler -> ds.__getitems__",
        write_arrow,
        _dataloader,
        ("datasets",),
        "pip install datasets",
    ),
]
