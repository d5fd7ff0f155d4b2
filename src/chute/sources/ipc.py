"""Arrow IPC files: Feather v2 and ``.arrow`` files, in the file or the stream format (as
``datasets`` writes them), memory-mapped, each record batch validated in full before use.
Fields come from the Arrow schema (:mod:`chute.sources.arrow`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import SourceError
from ..sniff import ARROW_SUFFIXES, NOUNS
from .arrow import ArrowSource, rows_from, same_schema, slices
from .arrow_fields import pyarrow
from .base import FieldsArg
from .paths import expand_paths


class ArrowFileSource(ArrowSource):
    """Arrow IPC files (Feather v2, ``.arrow``; file or stream format, as ``datasets`` writes
    them), memory-mapped, one slice of about ``batch_bytes`` at a time."""

    noun = NOUNS["arrow"]

    def __init__(
        self, src: str | Path | Sequence[str | Path], fields: FieldsArg = None, **options: Any
    ):
        self.files = expand_paths(src, ARROW_SUFFIXES)
        schemas = [self._open(f)[1] for f in self.files]
        for f, s in zip(self.files[1:], schemas[1:], strict=True):
            same_schema(schemas[0], s, str(f), str(self.files[0]))
        name = str(src) if isinstance(src, (str, Path)) else str(self.files[0])
        options.setdefault("image_root", self.files[0].parent)
        super().__init__(name, schemas[0], fields, **options)
        self.num_samples = sum(self._count(f) for f in self.files)

    def _open(self, path: Path) -> tuple[Iterator[Any], Any]:
        """(record batches, schema) of an IPC file or stream, memory-mapped."""
        pa = pyarrow()
        try:
            source = pa.memory_map(str(path))
            try:
                reader = pa.ipc.open_file(source)
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
                return batches, reader.schema
            except pa.ArrowInvalid:
                source.seek(0)
                stream = pa.ipc.open_stream(source)
                return iter(stream), stream.schema
        except (OSError, ValueError) as exc:
            raise SourceError(f"{path}: cannot be read as Arrow IPC / Feather ({exc})") from None

    def _count(self, path: Path) -> int:
        batches, _ = self._open(path)
        return sum(b.num_rows for b in self._checked(path, batches))

    def _checked(self, path: Path, batches: Iterator[Any]) -> Iterator[Any]:
        """The record batches, each validated in full: a memory-mapped file is trusted for
        nothing (offsets out of bounds, bad UTF-8 are errors here, never a crash later)."""
        try:
            for rb in batches:
                rb.validate(full=True)
                yield rb
        except (OSError, ValueError) as exc:
            raise SourceError(f"{path}: a record batch cannot be read ({exc})") from None

    def record_batches(self) -> Iterator[tuple[Any, Callable[[int], str]]]:
        for path in self.files:
            batches, _ = self._open(path)
            start = 0
            for rb in self._checked(path, batches):
                for piece, offset in slices(rb.select(self.top_columns), self.batch_bytes):
                    yield piece, rows_from(path, start + offset)
                start += rb.num_rows
