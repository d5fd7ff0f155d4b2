"""Map-style ``torch.utils.data.Dataset``s, read in DataLoader worker processes.

A dataset that decodes one file per ``__getitem__`` (JPEG, audio, JSON...) is slow; converting
it once runs that decode in ``num_workers`` processes in parallel. Each worker returns whole
batches: fields whose samples share a shape are stacked into one tensor (it crosses the
process boundary through shared memory), others go as lists and become ragged fields.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from ..errors import SourceError
from .base import Batch, FieldsArg, Source
from .iterable import Samples, columns


class _Indexed(Dataset):
    """Yields ``(index, sample)``, so errors can name the sample."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> tuple[int, Any]:
        return index, self.dataset[index]


def _plain(value: Any) -> Any:
    """PIL images -> uint8 arrays; numbers -> 0-d arrays; arrays and tensors unchanged."""
    pil = sys.modules.get("PIL.Image")  # only loaded if the dataset uses PIL
    if pil is not None and isinstance(value, pil.Image):
        return np.asarray(value)
    if isinstance(value, (int, float, bool, np.generic)):
        return np.asarray(value)
    return value


def _stack(values: list[Any]) -> Any:
    """One tensor for samples of one shape and dtype, else the list itself."""
    first = values[0]
    if not isinstance(first, (np.ndarray, torch.Tensor)):
        return values
    kind = type(first)
    if any(type(v) is not kind or v.shape != first.shape or v.dtype != first.dtype for v in values):
        return values
    if kind is torch.Tensor:
        return torch.stack(values)
    return torch.from_numpy(np.stack(values))


class _Collate:
    """The DataLoader's ``collate_fn``, run in the worker: samples -> one batch dict."""

    def __init__(self, samples: Samples):
        self.samples = samples

    def __call__(self, items: list[tuple[int, Any]]) -> Batch:
        dicts = [{k: _plain(v) for k, v in self.samples(s, i).items()} for i, s in items]
        return {k: _stack(vs) for k, vs in columns(dicts).items()}


class TorchSource(Source):
    """A map-style dataset, ``batch_size`` samples per worker task, in index order."""

    def __init__(
        self,
        dataset: Dataset,
        *,
        num_workers: int = 2,
        batch_size: int = 64,
        names: Sequence[str] | None = None,
        fields: FieldsArg = None,
        multiprocessing_context: Any = None,
    ):
        self.name = f"<{type(dataset).__name__}>"
        if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__len__"):
            iterable = isinstance(dataset, IterableDataset)
            what = "is an IterableDataset" if iterable else "has no len()"
            raise SourceError(
                f"{self.name} {what}: from_torch reads a map-style dataset by index, 0 to "
                "len() - 1; convert samples you can only iterate with chute.from_iterable"
            )
        self.dataset, self.num_samples = dataset, len(dataset)  # type: ignore[arg-type]
        self.num_workers, self.batch_size = num_workers, batch_size
        self.collate = _Collate(Samples(names, fields))
        self.context = multiprocessing_context

    def batches(self) -> Iterator[Batch]:
        loader = DataLoader(
            _Indexed(self.dataset),
            batch_size=self.batch_size,
            shuffle=False,
            num_workers=self.num_workers,
            collate_fn=self.collate,
            multiprocessing_context=self.context if self.num_workers else None,
        )
        it = iter(loader)
        try:
            yield from it
        finally:
            # Stop the workers now, also on error: left to the garbage collector (the error's
            # traceback keeps the iterator alive), the shutdown runs later on whatever thread
            # collects it and blocks that thread for seconds.
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
