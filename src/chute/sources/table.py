"""An in-memory ``pyarrow.Table`` or ``pyarrow.RecordBatch`` as a source:
``chute.convert(table, dst)``.

Read through the same Arrow code as a Parquet or Arrow IPC file (:mod:`chute.sources.arrow`):
fields from the Arrow types (a struct's members as ``name/member``, lists as ragged fields,
strings, the same refusals and ``nulls=`` / ``fields=`` / ``schema=`` options), one slice of
about ``batch_bytes`` at a time, zero-copy. Each record batch is validated in full before it
is read, as a memory-mapped file is: a table built from raw buffers
(``pyarrow.Array.from_buffers``) is trusted for nothing, so bad offsets or UTF-8 are a
:class:`chute.SourceError` naming the rows, never a crash. Rows are named ``<pyarrow.Table>:
row N`` in messages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..errors import SourceError
from .arrow import ArrowSource, rows_from, slices
from .arrow_fields import pyarrow
from .base import FieldsArg

__all__ = ["ArrowTableSource", "is_arrow_table"]


def is_arrow_table(obj: Any) -> bool:
    """True for a ``pyarrow.Table`` or ``pyarrow.RecordBatch``, without importing pyarrow
    for any other object."""
    if type(obj).__module__.split(".", 1)[0] != "pyarrow":
        return False
    pa = pyarrow()
    return isinstance(obj, (pa.Table, pa.RecordBatch))


class ArrowTableSource(ArrowSource):
    """A ``pyarrow.Table`` or ``RecordBatch`` in memory, read chunk by chunk."""

    noun = "a pyarrow Table"

    def __init__(self, src: Any, fields: FieldsArg = None, **options: Any):
        pa = pyarrow()
        name = f"<pyarrow.{type(src).__name__}>"
        table = pa.Table.from_batches([src]) if isinstance(src, pa.RecordBatch) else src
        self._table = table
        super().__init__(name, table.schema, fields, **options)
        self.num_samples = table.num_rows

    def record_batches(self) -> Iterator[tuple[Any, Callable[[int], str]]]:
        start = 0
        for rb in self._table.select(self.top_columns).to_batches():
            try:
                rb.validate(full=True)
            except (OSError, ValueError) as exc:  # ArrowInvalid is a ValueError
                raise SourceError(
                    f"{self.name}: rows {start} to {start + rb.num_rows - 1} are not valid "
                    f"Arrow data ({exc})"
                ) from None
            for piece, offset in slices(rb, self.batch_bytes):
                yield piece, rows_from(self.name, start + offset)
            start += rb.num_rows
