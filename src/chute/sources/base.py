"""The contract for "a source to convert from", and the shared machinery for array sources.

A :class:`Source` yields batches (dict field -> array with a leading batch axis, or a list of
samples) that go straight into :meth:`chute.Writer.extend`; ``convert`` drives it.

Most sources (npy, npz, HDF5, Zarr, a dict of arrays) are columns of equal length that can be
sliced by rows: they subclass :class:`ArraySource`, which picks and renames fields, checks the
lengths, plans row ranges aligned to each column's own chunking, and reads a few ranges ahead
in threads so reading overlaps with writing. Memory stays bounded by about
``(workers + 2) * batch_bytes`` however large the source is.
"""

from __future__ import annotations

import json
import math
import warnings
from abc import ABC, abstractmethod
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from types import MappingProxyType
from typing import Any

import numpy as np

from .. import format as fmt
from .. import kinds
from ..errors import SchemaError, SourceError

Batch = dict[str, Any]
FieldsArg = Sequence[str] | Mapping[str, str] | None
BATCH_BYTES = 32 << 20  # a batch per read: big enough to amortise per-call costs, small for RAM
_STRING_ROW_BYTES = 64  # a guess for planning: strings have no fixed row size
MAX_ATTR_JSON = 64 << 10  # bigger attributes (embedded files, lookup tables) stay behind


class Source(ABC):
    """Something ``chute.convert`` can read: batches of samples, in order.

    ``schema`` is None when the writer should infer it from the first sample; ``num_samples``
    is None when unknown (a generator), and is only used for the progress bar. ``metadata``
    (JSON values, e.g. HDF5 attributes) becomes the dataset's metadata; ``noun`` names the
    kind of source in messages ("an HDF5 file").
    """

    name: str
    schema: dict[str, kinds.Field] | None = None
    num_samples: int | None = None
    metadata: Mapping[str, Any] = MappingProxyType({})
    noun: str = "a source"

    @abstractmethod
    def batches(self) -> Iterator[Batch]:
        """Yield batches for :meth:`chute.Writer.extend`, in sample order."""

    def close(self) -> None:  # noqa: B027 - optional hook: most sources hold no files
        """Release files held open by the source."""

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def field_map(
    fields: Sequence[str] | Mapping[str, str], available: Sequence[str], where: str
) -> dict[str, str]:
    """``fields=`` (a list to pick, a dict to pick and rename) as old name -> new name."""
    if isinstance(fields, str):
        fields = [fields]
    mapping = dict(fields) if isinstance(fields, Mapping) else {f: f for f in fields}
    missing = [k for k in mapping if k not in available]
    if missing or not mapping:
        what = f"no field {missing[0]!r}" if missing else "fields= selects nothing"
        raise SourceError(f"{where}: {what}; available: {sorted(available)}")
    if len(set(mapping.values())) != len(mapping):
        raise SourceError(f"{where}: fields={fields!r} gives two fields the same name")
    return mapping


def one_field_each(names: Iterable[tuple[str, str]], where: str, fix: str) -> None:
    """Refuse two things of a source (``(what it is, the field name it becomes)``: columns,
    struct or compound members, members' extensions) that become one field name: one would
    silently hide the other. Every source whose names are made, not given, checks here;
    ``fix`` says how to tell them apart."""
    seen: dict[str, str] = {}
    for what, name in names:
        if name in seen:
            raise SourceError(
                f"{where}: {seen[name]} and {what} both become field {name!r}, and one would "
                f"hide the other; {fix}"
            )
        seen[name] = what


def check_name(name: str, old: str, where: str) -> str:
    """A valid chute field name, or an error that says how to rename ``old``."""
    try:
        return fmt.check_field_name(name)
    except SchemaError as exc:
        raise SchemaError(f"{where}: {exc}; rename it with fields={{{old!r}: 'name'}}") from None


def array_field(dtype: np.dtype, shape: tuple[int, ...], source: str, key: str) -> kinds.Field:
    """The field kind for array ``key`` of ``source``: ``dtype`` and ``shape`` (samples first)."""
    where = f"{source}: {key!r}"
    if dtype.names is not None:
        raise SourceError(
            f"{where} has a compound dtype with members {list(dtype.names)}; pass "
            f"split_compound=True to store them as fields "
            f"{[f'{key}/{m}' for m in dtype.names]}, or leave it out with fields="
        )
    if dtype.kind in "UTO":
        if len(shape) != 1:
            raise SourceError(f"{where}: only 1-D string arrays can be fields, got {dtype} {shape}")
        return kinds.String()
    if dtype.kind == "S" and len(shape) == 1:
        return kinds.Bytes()
    try:
        return kinds.Tensor(shape[1:], fmt.dtype_name(dtype))
    except SchemaError as exc:
        raise SourceError(f"{where}: {exc}") from None


def plan_ranges(n: int, row_bytes: int, chunk_rows: Sequence[int], batch_bytes: int) -> list[range]:
    """Split ``n`` rows into ranges of about ``batch_bytes``, aligned to the columns' chunks.

    A range that starts and ends on chunk boundaries makes HDF5/Zarr read (and decompress) each
    chunk exactly once, straight into the output: no chunk cache is needed.
    """
    rows = max(1, batch_bytes // max(row_bytes, 1))
    if chunk_rows:
        unit = math.lcm(*chunk_rows)
        if unit <= rows:
            rows -= rows % unit
        elif max(chunk_rows) * row_bytes <= 4 * batch_bytes:
            rows = max(chunk_rows)
    return [range(a, min(n, a + rows)) for a in range(0, n, rows)]


class _Member:
    """One member of a compound (structured) array, sliceable like the array itself."""

    def __init__(self, array: Any, member: str):
        self.array, self.member = array, member
        self.chunks = getattr(array, "chunks", None)
        self.shards = getattr(array, "shards", None)
        base, sub = array.dtype.fields[member][0], ()
        if base.subdtype is not None:
            base, sub = base.subdtype
        self.dtype, self.shape = base, (*array.shape, *sub)

    def __getitem__(self, rows: slice) -> np.ndarray:
        if hasattr(self.array, "fields"):  # h5py reads just this member
            return self.array.fields(self.member)[rows]
        return np.ascontiguousarray(self.array[rows][self.member])


def expand_compound(arrays: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Replace each compound array ``x`` by its members ``x/a``, ``x/b``, ..."""
    out: dict[str, Any] = {}
    made: list[tuple[str, str]] = []
    for name, arr in arrays.items():
        if arr.dtype.names is None:
            out[name] = arr
            made.append((f"array {name!r}", name))
        else:
            for m in arr.dtype.names:
                out[f"{name}/{m}"] = _Member(arr, m)
                made.append((f"member {m!r} of compound {name!r}", f"{name}/{m}"))
    one_field_each(made, where, "rename one in the source, or leave one out with fields=")
    return out


class ArraySource(Source):
    """Columns of equal length read by row ranges (memmaps, h5py datasets, zarr arrays).

    Subclasses list the arrays and may override :meth:`field` (an array's field kind),
    :meth:`reader` (how to read rows of one array) and :meth:`chunk_rows` (the array's own
    chunk length along axis 0).

    Without ``fields`` every array whose first axis has the most common length becomes a field;
    others (e.g. per-file constants) are left out, listed in ``skipped`` and named in a
    ``UserWarning`` each, so that no array goes missing unnoticed.
    """

    schema: dict[str, kinds.Field]
    num_samples: int

    def __init__(
        self,
        name: str,
        arrays: Mapping[str, Any],
        fields: FieldsArg = None,
        *,
        split_compound: bool = False,
        batch_bytes: int = BATCH_BYTES,
        workers: int = 1,
    ):
        self.name = name
        if split_compound:
            arrays = expand_compound(arrays, name)
        self.skipped: dict[str, tuple[int, ...] | None] = {}  # None: no dataspace
        if fields is None:
            chosen = {k: k for k in self._common_length(arrays)}
        else:
            chosen = field_map(fields, list(arrays), name)
        lengths = {k: _length(arrays[k]) for k in chosen}
        n = next(iter(lengths.values()))
        if n is None or any(v != n for v in lengths.values()):
            raise SourceError(
                f"{name}: fields must have the same length (first axis; None: a scalar); got "
                f"{lengths}; pick fields of one length with fields="
            )
        self._arrays = {check_name(new, old, name): arrays[old] for old, new in chosen.items()}
        self.schema = {new: self.field(old, arrays[old]) for old, new in chosen.items()}
        self.num_samples = n
        self.batch_bytes, self.workers = batch_bytes, workers

    def _common_length(self, arrays: Mapping[str, Any]) -> list[str]:
        """The arrays whose first axis has the most common length; the others are warned of.

        0-row arrays never vote while another length exists: an empty array next to the data
        (an empty index, a placeholder) is not the sample axis.
        """
        lengths = {k: _length(a) for k, a in arrays.items()}
        counts = Counter(v for v in lengths.values() if v is not None).most_common()
        if len(counts) > 1:
            counts = [c for c in counts if c[0] != 0]
        if not counts:
            raise SourceError(f"{self.name}: no arrays with a first axis to convert")
        if len(counts) > 1 and counts[0][1] == counts[1][1]:
            tied = {n: sorted(k for k, v in lengths.items() if v == n) for n, _ in counts[:2]}
            raise SourceError(
                f"{self.name}: arrays have different lengths and none is the most common "
                f"({tied}); choose the fields to convert with fields="
            )
        common = counts[0][0]
        self.skipped = {k: shape_of(arrays[k]) for k, v in lengths.items() if v != common}
        for key, shape in self.skipped.items():
            if shape is None:
                why = "it has no dataspace (an empty/null HDF5 dataset)"
            elif not shape:
                why = "a scalar"
            else:
                why = f"its first axis is not the common length {common}"
            warnings.warn(f"{self.name}: left out {key} {shape or ()}: {why}", stacklevel=2)
        return [k for k, v in lengths.items() if v == common]

    def field(self, key: str, array: Any) -> kinds.Field:
        """The field kind of ``array``, found at ``key`` in the source."""
        return array_field(array.dtype, shape_of(array) or (), self.name, key)

    def reader(self, array: Any, field: kinds.Field) -> Callable[[int, int], Any]:
        """A function reading rows ``[start, stop)`` of ``array`` as a batch value.

        Strings stored as UTF-8 bytes (HDF5, a compound's string member) are decoded here,
        so every array kind gives ``str`` objects for a String field.
        """
        if field.kind == "string":
            return lambda a, b: as_strings(array[a:b], f"{self.name}: rows {a}:{b}")
        if field.kind == "bytes":
            return lambda a, b: array[a:b].tolist()  # bytes objects; the writer checks them
        return lambda a, b: array[a:b]

    def chunk_rows(self, array: Any) -> int | None:
        """The array's storage chunk length along axis 0 (None: not chunked).

        Zarr's ``shards`` (the unit stored as one object) come before its ``chunks``; h5py's
        ``chunks`` is None for contiguous datasets.
        """
        chunks = getattr(array, "shards", None) or getattr(array, "chunks", None)
        if isinstance(chunks, tuple) and chunks and isinstance(chunks[0], (int, np.integer)):
            return int(chunks[0])
        return None

    def ranges(self) -> list[range]:
        """The row ranges :meth:`batches` reads, in order."""
        row_bytes = sum(
            f.row_nbytes() if f.fixed else _STRING_ROW_BYTES for f in self.schema.values()
        )
        chunks = [c for a in self._arrays.values() if (c := self.chunk_rows(a))]
        return plan_ranges(self.num_samples, row_bytes, chunks, self.batch_bytes)

    def batches(self) -> Iterator[Batch]:
        readers = {k: self.reader(a, self.schema[k]) for k, a in self._arrays.items()}

        def read(rows: range) -> Batch:
            return {k: r(rows.start, rows.stop) for k, r in readers.items()}

        return read_ahead(read, self.ranges(), self.workers)


def shape_of(array: Any) -> tuple[int, ...] | None:
    """The shape of an array-like as a tuple; None where it has none (an HDF5 null dataspace,
    ``h5py.Empty``, has ``shape`` None)."""
    shape = getattr(array, "shape", None)
    return None if shape is None else tuple(int(d) for d in shape)


def _length(array: Any) -> int | None:
    shape = shape_of(array)
    return shape[0] if shape else None


def as_strings(values: Any, where: str) -> list[str]:
    """Rows of a string array as ``str`` objects, UTF-8 bytes decoded."""
    items = values.tolist() if hasattr(values, "tolist") else list(values)
    try:
        return [v.decode("utf-8") if isinstance(v, bytes) else v for v in items]
    except UnicodeDecodeError as exc:
        raise SourceError(f"{where}: a string is not valid UTF-8 ({exc})") from None


def json_attrs(attrs: Any) -> dict[str, Any]:
    """The attributes (HDF5 or Zarr) whose values are JSON once numpy types are made plain, up
    to :data:`MAX_ATTR_JSON` bytes each; others (references, compound, NaN...) are dropped."""
    out = {}
    for name in attrs:
        try:
            value = _plain(attrs[name])
            size = len(json.dumps(value, allow_nan=False))
        except (OSError, TypeError, ValueError):  # unreadable, not JSON, not UTF-8, NaN
            continue
        if size <= MAX_ATTR_JSON:
            out[str(name)] = value
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, (np.ndarray, np.generic)):
        value = value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def read_ahead(read: Callable[[Any], Batch], items: Iterable[Any], workers: int) -> Iterator[Batch]:
    """``read(item)`` for each item, in order, with up to ``workers`` reads running ahead.

    At most ``workers`` batches are in flight while the caller handles the current one, which
    bounds memory. ``workers=0`` reads inline. Threads live only while the iterator does.
    """
    if workers <= 0:
        yield from map(read, items)
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="chute-read") as pool:
        todo = iter(items)
        pending = deque(pool.submit(read, item) for item in islice(todo, workers))
        try:
            while pending:
                batch = pending.popleft().result()
                for item in todo:
                    pending.append(pool.submit(read, item))
                    break
                yield batch
        finally:
            for fut in pending:
                fut.cancel()
