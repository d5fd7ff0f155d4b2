"""CSV / TSV files (gzip or zstd compressed too), and CSV manifests of images.

Read by pyarrow's streaming CSV reader, a block of about ``batch_bytes`` at a time (bounded
memory; quoted newlines are handled). The header names the columns; their types are inferred
by pyarrow from the first block and then fixed: ``types={"id": "string"}`` gives a column's
type (an Arrow type or its name) when the first block would mislead. Fields follow
:mod:`chute.sources.arrow`: numbers -> Tensor, text -> String. An empty cell of a number
column is a null (see ``nulls=``); in a text column it is ``""``. Every file must have the
first file's header. ``delimiter`` defaults to a tab for ``.tsv``, else a comma.

**Image manifests**: ``images=["path"]`` reads each path in that column (relative to
``image_root``, default the CSV's folder) and stores the image as a :class:`chute.fields.Image`
field, the JPEG bytes as they are (``max_side``, ``quality`` and ``on_error`` as for image
folders). A path leading out of ``image_root`` (``..``, absolute, a symlink) is refused.

A cell that does not fit its column's type is a :class:`chute.SourceError` naming the file,
the rows of the block and pyarrow's reason (which names the column and the value).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import SourceError, require
from ..sniff import CSV_SUFFIXES, NOUNS
from .arrow import ArrowSource, rows_from
from .arrow_fields import integral_beyond_int64, pyarrow, too_big
from .base import BATCH_BYTES, FieldsArg
from .jsonl import arrow_types
from .paths import expand_paths


class CsvSource(ArrowSource):
    """CSV / TSV files (a file, a folder of them, or a list), a block at a time."""

    noun = NOUNS["csv"]

    def __init__(
        self,
        src: str | Path | Sequence[str | Path],
        fields: FieldsArg = None,
        *,
        types: Mapping[str, Any] | None = None,
        delimiter: str | None = None,
        batch_bytes: int = BATCH_BYTES,
        **options: Any,
    ):
        self._pc = require("pyarrow.csv", "arrow")
        self.files = expand_paths(src, CSV_SUFFIXES)
        name = str(src) if isinstance(src, (str, Path)) else str(self.files[0])
        tsv = self.files[0].name.lower().split(".")[1:2] == ["tsv"]
        self.delimiter = delimiter or ("\t" if tsv else ",")
        self.block = max(1 << 16, min(batch_bytes, (1 << 31) - 1))
        self.types = arrow_types(types, name)
        self.given = set(self.types)  # columns whose type the caller gave: numbers as asked
        with self._open(self.files[0]) as reader:
            schema = reader.schema
        self.types = {f.name: f.type for f in schema}  # later blocks and files: these types
        options.setdefault("image_root", self.files[0].parent)
        super().__init__(name, schema, fields, batch_bytes=batch_bytes, **options)

    def _open(self, path: Path, text: str | None = None) -> Any:
        """A streaming reader of ``path`` with the column types; ``text``: that column alone,
        as the strings the file holds."""
        pa, pc = pyarrow(), self._pc
        convert = pc.ConvertOptions(column_types=self.types)
        if text is not None:
            convert = pc.ConvertOptions(column_types={text: pa.string()}, include_columns=[text])
        try:
            return pc.open_csv(
                pa.input_stream(str(path), compression="detect"),
                read_options=pc.ReadOptions(block_size=self.block, use_threads=False),
                parse_options=pc.ParseOptions(delimiter=self.delimiter),
                convert_options=convert,
            )
        except (OSError, ValueError) as exc:  # ArrowInvalid is a ValueError
            raise SourceError(f"{path}: cannot be read as CSV ({exc})") from None

    def record_batches(self) -> Iterator[tuple[Any, Callable[[int], str]]]:
        header = list(self.types)
        for path in self.files:
            row = 0
            with self._open(path) as reader:
                if reader.schema.names != header:
                    raise SourceError(
                        f"{path}: its header {reader.schema.names} differs from "
                        f"{self.files[0]}'s {header}; convert files of one header together"
                    )
                try:
                    for rb in reader:
                        rb = rb.select(self.top_columns)
                        self._whole_numbers(path, rb, row)
                        yield rb, rows_from(path, row)
                        row += rb.num_rows
                except SourceError:  # already names the row
                    raise
                except (OSError, ValueError) as exc:
                    raise SourceError(
                        f"{path}: rows {row}+ (counted from 0 after the header): {exc}; the "
                        f"types (from the first rows) are "
                        f"{ {k: str(t) for k, t in self.types.items()} }: give a column's "
                        "type with types="
                    ) from None

    def _whole_numbers(self, path: Path, rb: Any, first: int) -> None:
        """Refuse an integer beyond int64 that pyarrow read as a float (rounded): in a column
        of inferred type, the cell's text is read again to tell ``12345678901234567891`` from
        ``1.2e19``."""
        for key in rb.schema.names:
            if key in self.given:
                continue
            for row in integral_beyond_int64(rb.column(key)):
                text = self._cell(path, key, first + int(row))
                if re.fullmatch(r"\s*[+-]?\d+\s*", text):
                    where = f"{path}: row {first + int(row)} (counted from 0 after the header)"
                    raise SourceError(
                        f"{where}: column {too_big(key, int(text), rb.schema.field(key).type)}"
                    )

    def _cell(self, path: Path, key: str, row: int) -> str:
        """The text of column ``key`` in ``row`` of ``path`` (the file read again up to it)."""
        seen = 0
        with self._open(path, text=key) as reader:
            for rb in reader:
                if row < seen + rb.num_rows:
                    return str(rb.column(0)[row - seen].as_py())
                seen += rb.num_rows
        return ""
