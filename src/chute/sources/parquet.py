"""Parquet files (pyarrow): a file, a folder of ``.parquet`` files, or a list / pattern of them.

Fields come from the Arrow schema (:mod:`chute.sources.arrow`); every file must have the first
file's columns. Read by row group in batches of about ``batch_bytes`` (sized from the row
groups' uncompressed sizes), only the columns picked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import SourceError, require
from ..sniff import NOUNS, PARQUET_SUFFIXES
from .arrow import ArrowSource, rows_from, rows_per_batch, same_schema
from .base import FieldsArg
from .paths import expand_paths


class ParquetSource(ArrowSource):
    """Parquet files (a file, a folder of ``.parquet`` files, or a list), read by row group in
    batches of about ``batch_bytes``; every file must have the first file's columns."""

    noun = NOUNS["parquet"]

    def __init__(
        self, src: str | Path | Sequence[str | Path], fields: FieldsArg = None, **options: Any
    ):
        pq = require("pyarrow.parquet", "arrow")
        self.files = expand_paths(src, PARQUET_SUFFIXES)
        self._pq = pq
        metas = []
        for f in self.files:
            try:
                metas.append(pq.ParquetFile(f))
            except (OSError, ValueError) as exc:  # ArrowInvalid is a ValueError
                raise SourceError(f"{f}: cannot be read as Parquet ({exc})") from None
        first = metas[0].schema_arrow
        for f, m in zip(self.files[1:], metas[1:], strict=True):
            same_schema(first, m.schema_arrow, str(f), str(self.files[0]))
        name = str(src) if isinstance(src, (str, Path)) else str(self.files[0])
        options.setdefault("image_root", self.files[0].parent)
        super().__init__(name, first, fields, **options)
        self.num_samples = sum(m.metadata.num_rows for m in metas)
        self._row_bytes = [_parquet_row_bytes(m.metadata) for m in metas]
        for m in metas:
            m.close()

    def record_batches(self) -> Iterator[tuple[Any, Callable[[int], str]]]:
        for path, row_bytes in zip(self.files, self._row_bytes, strict=True):
            rows = rows_per_batch(row_bytes, self.batch_bytes)
            start = 0
            with self._pq.ParquetFile(path) as pf:
                try:
                    for rb in pf.iter_batches(rows, columns=self.top_columns, use_threads=False):
                        yield rb, rows_from(path, start)
                        start += rb.num_rows
                except (OSError, ValueError) as exc:
                    raise SourceError(
                        f"{path}: rows from {start}: cannot be read ({exc})"
                    ) from None


def _parquet_row_bytes(meta: Any) -> float:
    """Uncompressed bytes per row, from the row groups' statistics."""
    total = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    return total / max(meta.num_rows, 1)
