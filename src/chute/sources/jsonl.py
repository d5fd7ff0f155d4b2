"""JSON Lines files (``.jsonl``, ``.ndjson``, gzip or zstd compressed): one object per line.

Parsed by pyarrow's JSON reader, a block of about ``batch_bytes`` of whole lines at a time
(bounded memory, any file size; a line longer than :data:`MAX_LINE`, or nesting lists and
objects deeper than :data:`chute.sources.jsondepth.MAX_DEPTH`, is refused before it is
parsed). The column
types are inferred by pyarrow from the first block and then fixed, so a later line cannot
change them: ``types={"url": "string"}`` gives a key's type (an Arrow type or its name) when
the first block does not show it. Fields then follow :mod:`chute.sources.arrow` (nested
objects -> ``name/member``, lists of numbers -> Ragged, strings -> String).

A key missing from a line is a null there (see ``nulls=``: an error naming the line and the
key, or a fill). A line that is not a JSON object, a value of the wrong type and a key the
first block did not have are :class:`chute.SourceError`s naming the file, the line number
and the key (blank lines are skipped but counted). With ``fields=``, keys not picked are
ignored wherever they appear.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import SourceError, require
from ..sniff import JSONL_SUFFIXES, NOUNS
from .arrow import ArrowSource
from .arrow_fields import integral_beyond_int64, pyarrow, too_big
from .base import BATCH_BYTES, FieldsArg
from .jsondepth import check_depth
from .paths import expand_paths

MAX_LINE = 256 << 20  # bytes: a longer line is refused (a file without newlines, a bomb)


def arrow_types(types: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    """``types=`` as Arrow types: each value an Arrow ``DataType`` or its name (``"int32"``)."""
    pa = pyarrow()
    out = {}
    for key, t in (types or {}).items():
        try:
            out[key] = t if isinstance(t, pa.DataType) else pa.type_for_alias(str(t))
        except ValueError:
            raise SourceError(f"{where}: types={{{key!r}: {t!r}}} is not an Arrow type") from None
    return out


def chunks(path: Path, size: int) -> Iterator[tuple[bytes, int]]:
    """``(whole lines, number of the first line)`` of a (compressed) text file, about
    ``size`` bytes each; decompression streams (``pyarrow.input_stream``)."""
    pa = pyarrow()
    line, carry = 1, b""
    try:
        with pa.input_stream(str(path), compression="detect") as f:
            while block := f.read(size):
                data = carry + block
                end = data.rfind(b"\n") + 1
                if end == 0:
                    if len(data) > MAX_LINE:
                        raise SourceError(
                            f"{path}: line {line} is longer than {MAX_LINE >> 20} MiB"
                        )
                    carry = data
                    continue
                check_depth(data[:end], path, line)
                yield data[:end], line
                line += data.count(b"\n", 0, end)
                carry = data[end:]
    except OSError as exc:  # unreadable, or a corrupt gzip / zstd stream
        raise SourceError(f"{path}: cannot be read ({exc})") from None
    if carry.strip():
        check_depth(carry + b"\n", path, line)
        yield carry + b"\n", line


def line_numbers(chunk: bytes, first: int) -> list[int]:
    """The line number of each row (each non-blank line) of ``chunk``."""
    return [first + k for k, text in enumerate(chunk.split(b"\n")[:-1]) if text.strip()]


class JsonlSource(ArrowSource):
    """JSON Lines files (a file, a folder of them, or a list), a block at a time."""

    noun = NOUNS["jsonl"]

    def __init__(
        self,
        src: str | Path | Sequence[str | Path],
        fields: FieldsArg = None,
        *,
        types: Mapping[str, Any] | None = None,
        batch_bytes: int = BATCH_BYTES,
        **options: Any,
    ):
        self._pj = require("pyarrow.json", "arrow")
        self.files = expand_paths(src, JSONL_SUFFIXES)
        name = str(src) if isinstance(src, (str, Path)) else str(self.files[0])
        first = next(chunks(self.files[0], batch_bytes), None)
        if first is None:
            raise SourceError(f"{self.files[0]}: no lines")
        inferred = self._parse(self.files[0], *first, schema=None, strict=False).schema
        given = arrow_types(types, name)
        self.given = set(given)  # keys whose type the caller gave: their numbers are as asked
        pa = pyarrow()
        cols = {f.name: given.pop(f.name, f.type) for f in inferred}
        self.full_schema = pa.schema([*cols.items(), *given.items()])
        self.strict = fields is None  # every key must be known unless fields= picks some
        options.setdefault("image_root", self.files[0].parent)
        super().__init__(name, self.full_schema, fields, batch_bytes=batch_bytes, **options)

    def _parse(self, path: Path, chunk: bytes, line: int, schema: Any, strict: bool) -> Any:
        """A pyarrow Table of the lines in ``chunk``, or an error naming the bad line."""
        pa, pj = pyarrow(), self._pj
        if schema is None:  # the first block: pyarrow infers the types
            options = pj.ParseOptions()
        else:
            unexpected = "error" if strict else "ignore"
            options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior=unexpected)
        read = pj.ReadOptions(use_threads=False, block_size=max(len(chunk), 1 << 20))
        try:
            return pj.read_json(io.BytesIO(chunk), read_options=read, parse_options=options)
        except pa.ArrowInvalid as exc:
            raise SourceError(self._locate(path, chunk, line, options, read, exc)) from None

    def _locate(
        self, path: Path, chunk: bytes, first: int, options: Any, read: Any, exc: Exception
    ) -> str:
        """Which line of ``chunk`` pyarrow refused, and why (each line parsed alone)."""
        pa, pj = pyarrow(), self._pj
        known = set(options.explicit_schema.names) if options.explicit_schema else None
        for k, text in enumerate(chunk.split(b"\n")):
            where = f"{path}: line {first + k}"
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except ValueError as e:
                return f"{where}: not JSON ({e})"
            if not isinstance(obj, dict):
                return f"{where}: a JSON {type(obj).__name__}, not an object"
            extra = sorted(set(obj) - known) if known is not None and self.strict else []
            shown = sorted(known or ())
            if extra:
                return (
                    f"{where}: key {extra[0]!r} is not among the keys of the first lines "
                    f"{shown}; give its type with types={{{extra[0]!r}: ...}}, or pick "
                    "the keys to keep with fields="
                )
            try:
                pj.read_json(io.BytesIO(text), read_options=read, parse_options=options)
            except pa.ArrowInvalid as e:
                types = {f.name: str(f.type) for f in options.explicit_schema or []}
                return (
                    f"{where}: {e}; the types (from the first lines) are {types}: give a "
                    "key's type with types="
                )
        return f"{path}: lines {first}+: {exc}"

    def record_batches(self) -> Iterator[tuple[Any, Callable[[int], str]]]:
        for path in self.files:
            for chunk, line in chunks(path, self.batch_bytes):
                table = self._parse(path, chunk, line, self.full_schema, self.strict)
                lines: list[int] = []
                offset = 0
                for rb in table.select(self.top_columns).to_batches():
                    where = _where(path, chunk, line, lines, offset)
                    self._whole_numbers(rb, chunk, offset, where)
                    yield rb, where
                    offset += rb.num_rows

    def _whole_numbers(
        self, rb: Any, chunk: bytes, offset: int, where: Callable[[int], str]
    ) -> None:
        """Refuse an integer beyond int64 that pyarrow read as a float (rounded): in a key of
        inferred type, the line holding it is parsed again to tell ``12345678901234567891``
        from ``1.2e19``."""
        texts: list[bytes] = []
        for key in rb.schema.names:
            if key in self.given:
                continue
            for row in integral_beyond_int64(rb.column(key)):
                if not texts:
                    texts.extend(t for t in chunk.split(b"\n") if t.strip())
                big = _big_int(json.loads(texts[offset + int(row)]).get(key))
                if big is not None:
                    raise SourceError(
                        f"{where(int(row))}: key {too_big(key, big, rb.schema.field(key).type)}"
                    )


def _big_int(value: Any) -> int | None:
    """The first integer beyond int64 in a JSON value (lists and objects searched), or None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if not -(1 << 63) <= value < 1 << 63 else None
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((b for v in items if (b := _big_int(v)) is not None), None)


def _where(path: Path, chunk: bytes, line: int, lines: list[int], offset: int) -> Callable:
    """``where(i)``: the line of row ``offset + i`` of a chunk; the line table is computed
    once, on the first call (only errors call it)."""

    def where(i: int) -> str:
        if not lines:
            lines.extend(line_numbers(chunk, line))
        return f"{path}: line {lines[offset + i]}"

    return where
