"""Iterables of samples: generators, lists, ``IterableDataset``s.

A sample is a dict ``field -> value`` (nested dicts give ``group/name`` fields), a tuple /
list (fields ``"0"``, ``"1"``, ... unless ``names`` are given), or a single value (field
``"0"``). Values are anything :meth:`chute.Writer.append` takes: arrays, tensors, PIL images,
numbers, ``str``, ``bytes``. Samples are grouped into batches, so the writer does its work
per batch, not per sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any

from .. import kinds
from ..columns.source_images import is_pil, warn_pixels
from ..errors import SourceError
from ..writer.schema_inference import flatten
from .base import Batch, FieldsArg, Source, field_map


class Samples:
    """Turns user samples into dicts ``field -> value`` (picklable, for worker processes).

    ``fields`` picks / renames the fields of dict samples; ``names`` names tuple elements.
    """

    def __init__(self, names: Sequence[str] | None = None, fields: FieldsArg = None):
        self.names = None if names is None else list(names)
        self.fields = fields
        self._map: dict[str, str] | None = None

    def __call__(self, sample: Any, index: int) -> dict[str, Any]:
        if not isinstance(sample, Mapping):
            values = list(sample) if isinstance(sample, (tuple, list)) else [sample]
            names = self.names or [str(i) for i in range(len(values))]
            if len(names) != len(values):
                raise SourceError(f"sample {index}: {len(values)} values but names={names}")
            sample = dict(zip(names, values, strict=True))
        flat = flatten(sample)
        if self.fields is None:
            return flat
        if self._map is None:
            self._map = field_map(self.fields, list(flat), f"sample {index}")
        try:
            return {new: flat[old] for old, new in self._map.items()}
        except KeyError as exc:
            missing = exc.args[0]
            raise SourceError(f"sample {index}: no field {missing!r}; has {sorted(flat)}") from None


def columns(samples: Sequence[dict[str, Any]]) -> Batch:
    """A list of sample dicts as one batch: field -> list of values."""
    return {k: [s[k] for s in samples] for k in samples[0]} if samples else {}


class IterableSource(Source):
    """Samples from any iterable, ``batch_size`` at a time; ``schema=None`` infers it."""

    def __init__(
        self,
        iterable: Iterable[Any],
        schema: Mapping[str, kinds.Field] | None = None,
        *,
        names: Sequence[str] | None = None,
        fields: FieldsArg = None,
        batch_size: int = 256,
    ):
        self.name = f"<{type(iterable).__name__}>"
        self.iterable, self.samples, self.batch_size = iterable, Samples(names, fields), batch_size
        self.schema = None if schema is None else dict(schema)
        self.num_samples = len(iterable) if hasattr(iterable, "__len__") else None  # type: ignore[arg-type]

    def batches(self) -> Iterator[Batch]:
        it, start = iter(self.iterable), 0
        while chunk := list(islice(it, self.batch_size)):
            batch = columns([self.samples(s, start + i) for i, s in enumerate(chunk)])
            if start == 0:
                self._check_images(batch)
            yield batch
            start += len(chunk)

    def _check_images(self, batch: Batch) -> None:
        """Warn of PIL images in a field not declared :class:`chute.fields.Image` (the writer stores
        them as pixels)."""
        for name, values in batch.items():
            declared = self.schema is not None and kinds.image_field(self.schema.get(name))
            if not declared and values and is_pil(values[0]):
                warn_pixels(self.name, name)


class ColumnsSource(Source):
    """A dict of Python lists (one per field, of equal length), ``batch_size`` rows at a time:
    the values are checked and typed by the writer as :func:`chute.write` does (lists of
    lists of different lengths become Ragged fields, strings String)."""

    def __init__(
        self, columns: Mapping[str, Any], fields: FieldsArg = None, *, batch_size: int = 4096
    ):
        self.name = "<dict of lists>"
        chosen = field_map(fields, list(columns), self.name) if fields is not None else None
        self.columns = {
            new: columns[old] for old, new in (chosen or {k: k for k in columns}).items()
        }
        lengths = {k: len(v) for k, v in self.columns.items()}
        if len(set(lengths.values())) > 1:
            raise SourceError(f"{self.name}: fields must have the same length; got {lengths}")
        self.num_samples = self._n = next(iter(lengths.values()), 0)
        self.batch_size = batch_size

    def batches(self) -> Iterator[Batch]:
        for a in range(0, self._n, self.batch_size):
            yield {k: v[a : a + self.batch_size] for k, v in self.columns.items()}
