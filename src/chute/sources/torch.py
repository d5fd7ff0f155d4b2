"""Map-style ``torch.utils.data.Dataset``s, read in DataLoader worker processes.

A dataset that decodes one file per ``__getitem__`` (JPEG, audio, JSON...) is slow; converting
it once runs that decode in ``num_workers`` processes in parallel. Each worker returns whole
batches: fields whose samples share a shape are stacked into one tensor (it crosses the
process boundary through shared memory), others go as lists and become ragged fields.

Images: a field declared :class:`chute.fields.Image` (``images=``) is encoded in the workers
(:func:`chute.image.encode_image`: encoded JPEG bytes kept as they are, PIL images and arrays
encoded once at the field's ``quality``). PIL images in a field not declared so are stored as
their uint8 pixels (lossless, about 10x a JPEG's bytes), with a warning saying how to keep
JPEGs. :meth:`TorchSource.infer_schema` completes a schema that names only some fields from
the first batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from .. import kinds
from ..columns.source_images import is_pil, warn_pixels
from ..errors import ArgumentError, FormatError, SourceError
from ..image.codec import EncodedImage, encode_image
from ..writer.schema_inference import infer_field
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
    if is_pil(value):
        return np.asarray(value)
    if isinstance(value, (int, float, bool, np.generic)):
        return np.asarray(value)
    return value


def _encoded(value: Any, f: kinds.Image, name: str, index: int) -> EncodedImage:
    try:
        return encode_image(value, f.max_side, f.quality)
    except (ArgumentError, FormatError) as exc:
        raise SourceError(f"sample {index}, field {name!r}: {exc}") from None


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
    """The DataLoader's ``collate_fn``, run in the worker: samples -> (one batch dict, the
    fields that held PIL images stored as pixels)."""

    def __init__(self, samples: Samples, images: Mapping[str, kinds.Image]):
        self.samples, self.images = samples, dict(images)

    def __call__(self, items: list[tuple[int, Any]]) -> tuple[Batch, list[str]]:
        dicts, pil = [], set()
        for i, s in items:
            sample = self.samples(s, i)
            for k, v in sample.items():
                f = self.images.get(k)
                if f is not None:
                    sample[k] = _encoded(v, f, k, i)
                else:
                    pil.update([k] if is_pil(v) else [])
                    sample[k] = _plain(v)
            dicts.append(sample)
        return {k: _stack(vs) for k, vs in columns(dicts).items()}, sorted(pil)


def batch_field(name: str, values: Any) -> kinds.Field:
    """The field kind of a batch column: a stacked tensor, or a list (a field whose samples
    change shape becomes Ragged, the varying dimensions None)."""
    if not isinstance(values, list):
        return infer_field(name, values, batch=True)
    first = infer_field(name, values[0])
    if not first.fixed:
        return first
    shapes = {tuple(np.shape(v)) for v in values}
    if len(shapes) == 1:
        return first
    if len({len(s) for s in shapes}) != 1 or not first.sample_shape:
        raise SourceError(f"field {name!r}: samples of different ranks {sorted(shapes)}")
    inner = tuple(
        d if len({s[k] for s in shapes}) == 1 else None for k, d in enumerate(first.sample_shape)
    )
    return kinds.Ragged(first.dtype, inner[1:])


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
        images: Mapping[str, kinds.Image] | None = None,
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
        self.collate = _Collate(Samples(names, fields), images or {})
        self.context = multiprocessing_context
        self._started: tuple[Iterator[tuple[Batch, list[str]]], Batch] | None = None
        self._warned: set[str] = set()

    def infer_schema(self, declared: Mapping[str, kinds.Field]) -> dict[str, kinds.Field]:
        """``declared`` completed with the kinds of the fields it does not name, from the
        first batch (read now, and yielded first by :meth:`batches`)."""
        it = self._iterate()
        first = next(it, None)
        if first is None:
            raise SourceError(f"{self.name}: no samples to infer the other fields from")
        batch = self._checked(first)
        self._started = (it, batch)
        unknown = sorted(set(declared) - set(batch))
        if unknown:
            raise SourceError(f"{self.name}: schema= names {unknown}; samples have {sorted(batch)}")
        return {k: declared[k] if k in declared else batch_field(k, v) for k, v in batch.items()}

    def _checked(self, item: tuple[Batch, list[str]]) -> Batch:
        batch, pil = item
        for name in pil:
            if name not in self._warned:
                self._warned.add(name)
                warn_pixels(self.name, name)
        return batch

    def close(self) -> None:
        """Stop the workers of a pass that :meth:`infer_schema` started and nothing read."""
        if self._started is not None:
            self._started[0].close()  # type: ignore[attr-defined]  # a generator
            self._started = None

    def batches(self) -> Iterator[Batch]:
        if self._started is not None:
            it, first = self._started
            self._started = None
            yield first
        else:
            it = self._iterate()
        yield from (self._checked(item) for item in it)

    def _iterate(self) -> Iterator[tuple[Batch, list[str]]]:
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
