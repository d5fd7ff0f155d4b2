"""Indices -> batch: the vectorized gathers on the hot path.

``np.take(src, idx, axis=0, out=buf, mode="clip")`` writes straight into ``buf``; fancy
indexing and the default ``mode="raise"`` write into a temporary that is then copied. Indices
are bounds-checked once per batch by the caller, so ``clip`` never clips. A batch over several
parts gathers from each part and puts the rows at their positions in the batch.

Variable-size fields (ragged, bytes, strings) compute the batch's offsets first, allocate one
output of exactly the batch's values and copy each sample's slice into it
(:mod:`chute.columns.segments`: one compiled loop without the GIL when numba is installed):
memcpy speed and O(batch) memory, for one part or several (no second gather). Nothing is
allocated for samples that the values file cannot back (:func:`check_backed`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch

from .._torch import TORCH_DTYPES, as_numpy, to_torch
from ..batch import RaggedBatch
from ..errors import FormatError, SchemaError
from ..format import storage_dtype
from . import segments

Split = list[tuple[int, np.ndarray | None, np.ndarray]]
"""Where a batch's samples are: (part, positions in the batch or None for all of them, indices
in the part) for each part the batch hits."""


class FieldPart(Mapping[str, Path]):
    """Field ``name``'s files in one part, by role (``data``, ``values``...): each path is
    built when it is looked up, i.e. for an error message, never per read. Made once when the
    part's files are mapped, with what reads check against: the bytes on disk of the values
    file (:func:`check_backed`), and the dataset and first sample, which errors name."""

    __slots__ = ("allocated", "dataset", "folder", "name", "names", "start")

    def __init__(
        self,
        folder: Path,
        names: Mapping[str, str],
        allocated: int | None = None,
        dataset: object = None,
        name: str = "",
        start: int = 0,
    ) -> None:
        self.folder, self.names, self.allocated = folder, names, allocated
        self.dataset, self.name, self.start = dataset, name, start

    def __getitem__(self, role: str) -> Path:
        return self.folder / self.names[role]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


class Piece(NamedTuple):
    """One part's share of a batch, for one field: what the gathers read."""

    arrays: Mapping[str, np.ndarray]  # the field's arrays in the part: data | values, offsets..
    files: Mapping[str, Path]  # their files, named in errors (a FieldPart: built on error)
    pos: np.ndarray | None  # positions in the batch (None: all of them, in order)
    local: np.ndarray  # sample indices in the part
    allocated: int | None = None  # bytes on disk of the values file (see check_backed)


class FixedField(Protocol):
    """What the fixed-shape gathers ask of a field (a :class:`chute.kinds.Tensor`)."""

    @property
    def dtype(self) -> str: ...

    @property
    def shape(self) -> tuple[int, ...]: ...


UNBACKED_SLACK = 256 << 20
"""Bytes a batch of one variable-size field may take beyond what its values file holds on
disk before :func:`check_backed` refuses it (repeated indices legitimately read a sample
twice; a filesystem that compresses holds less than it serves)."""


def take_rows(src: np.ndarray, idx: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``src[idx]`` along axis 0, written into ``out`` when given. ``idx`` must be in range."""
    return np.take(src, idx, axis=0, out=out, mode="clip")


def out_rows(t: Any, name: str, f: FixedField, b: int) -> np.ndarray:
    """The first ``b`` rows of ``t``, the caller's ``out[name]`` for fixed-shape field ``f``, as
    an array to gather into: a contiguous CPU tensor of the field's dtype and shape, ``b`` rows
    or more. Else a SchemaError."""
    want = (TORCH_DTYPES[f.dtype], f.shape)
    if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
        got = f"a tensor on {t.device}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise SchemaError(
            f"out[{name!r}] must be a CPU tensor (pinned is fine), got {got}; see empty_batch()"
        )
    if (t.dtype, tuple(t.shape[1:])) != want or len(t) < b or not t.is_contiguous():
        raise SchemaError(
            f"out[{name!r}] is {t.dtype} {tuple(t.shape)}; need {want[0]} "
            f"({b}+, {', '.join(map(str, f.shape))}) contiguous"
        )
    rows = as_numpy(t)
    return rows if len(rows) == b else rows[:b]


def gather_fixed(
    pieces: Sequence[Piece], f: FixedField, b: int, out: np.ndarray | None = None
) -> np.ndarray:
    """The ``b`` rows of fixed-shape field ``f`` that ``pieces`` locate; written into ``out``
    when given."""
    if len(pieces) == 1 and pieces[0].pos is None:
        return take_rows(pieces[0].arrays["data"], pieces[0].local, out)
    res = out if out is not None else np.empty((b, *f.shape), storage_dtype(f.dtype))
    for piece in pieces:
        res[piece.pos] = take_rows(piece.arrays["data"], piece.local)
    return res


def gather_var(
    parts: Sequence[Piece],
    dtype: str,
    inner_shape: tuple[int | None, ...],
    b: int,
    alloc: Callable[[int], np.ndarray] | None = None,
) -> RaggedBatch:
    """The ``b`` samples of a variable-size field of ``dtype`` and ``inner_shape`` (the shape
    after the first axis, None where a dimension varies) that ``parts`` locate, in batch order.

    The batch's offsets come first (each part's sample lengths, put at their positions), then
    one output of exactly the batch's values is allocated and each sample's slice copied into
    it: O(batch) memory, no second gather for a batch over several parts. Before allocating,
    each part's share is checked against what its values file holds on disk
    (:func:`check_backed`). ``alloc(n)``, for a bytes field: where the ``n`` values go (the
    image gather reuses a buffer), else :func:`chute.columns.segments.new_output`'s."""
    bounds = [
        sample_bounds(p.arrays["values"], p.arrays["offsets"], p.local, p.files) for p in parts
    ]
    if len(parts) == 1 and parts[0].pos is None:
        lengths = bounds[0][1]
    else:
        lengths = np.zeros(b, np.int64)
        for piece, (_, n) in zip(parts, bounds, strict=True):
            lengths[piece.pos] = n
    offsets = np.zeros(b + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    n_values = int(offsets[-1])
    for piece, (_, n) in zip(parts, bounds, strict=True):  # before allocating
        total = n_values if len(parts) == 1 else int(n.sum())
        src = piece.arrays["values"]
        rows = src.itemsize * math.prod(src.shape[1:])
        check_backed(total * rows, piece.allocated, piece.files, piece.local)
    variable_dims = None in inner_shape
    inner: tuple[int, ...] = () if variable_dims else inner_shape  # type: ignore[assignment]
    if alloc is not None:
        values = alloc(n_values)
    else:
        values = segments.new_output((n_values, *inner), storage_dtype(dtype))
    for piece, (starts, n) in zip(parts, bounds, strict=True):
        at = offsets[:-1] if piece.pos is None else offsets[piece.pos]
        segments.copy_segments(piece.arrays["values"], starts, n, at, values)
    shapes = None
    if variable_dims:  # (0, ndim) for an empty batch
        shapes = np.zeros((b, 1 + len(inner_shape)), np.int64)
        for piece in parts:
            got = piece.arrays["shapes"][piece.local]
            check_shapes(
                got,
                lengths if piece.pos is None else lengths[piece.pos],
                inner_shape,
                piece.files,
            )
            shapes[slice(None) if piece.pos is None else piece.pos] = got
    return RaggedBatch(
        to_torch(values, dtype),
        torch.from_numpy(offsets),
        None if shapes is None else torch.from_numpy(shapes),
    )


def batch_pieces(parts: Sequence[tuple[np.ndarray, RaggedBatch]], name: str) -> list[Piece]:
    """Sub-batches of variable-size field ``name`` (a mix's sources: ``(positions, batch)``,
    a :class:`RaggedBatch` or an ``EncodedImages``) as pieces for the gathers."""
    where = Path(f"mix field {name!r}")
    pieces = []
    for pos, rb in parts:
        arrays = {"values": as_numpy(rb.values), "offsets": rb.offsets.numpy()}
        for role in ("shapes", "sizes"):
            if getattr(rb, role, None) is not None:
                arrays[role] = getattr(rb, role).numpy()
        files = dict.fromkeys(("values", "offsets", "shapes", "sizes"), where)
        pieces.append(Piece(arrays, files, pos, np.arange(len(rb), dtype=np.int64)))
    return pieces


def sample_bounds(
    values: np.ndarray, offsets: np.ndarray, idx: np.ndarray, files: Mapping[str, Path]
) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) of samples ``idx`` of a values+offsets column, checked to lie in
    order inside the values (a corrupt offsets file is a FormatError, never a wrong slice).
    One compiled loop when numba is installed (:mod:`chute.columns.segments`)."""
    loops = segments.kernels()
    if loops is not None and offsets.dtype == idx.dtype == np.int64:
        starts, n = np.empty(len(idx), np.int64), np.empty(len(idx), np.int64)
        bad = loops.bounds(offsets, idx, len(values), starts, n)
        if bad < 0:
            return starts, n
        sample = int(idx[bad])
    else:
        starts = offsets[idx]
        ends = offsets[idx + 1]
        n = ends - starts
        if not len(idx) or (n.min() >= 0 and starts.min() >= 0 and ends.max() <= len(values)):
            return starts, n
        sample = int(idx[(n < 0) | (starts < 0) | (ends > len(values))][0])
    raise FormatError(
        f"{files['offsets']}: offsets of sample {sample} are invalid "
        f"({int(offsets[sample])}..{int(offsets[sample + 1])} of {len(values)} values); the "
        "dataset is corrupt"
    )


def check_backed(
    nbytes: int, allocated: int | None, files: Mapping[str, Path], samples: Any
) -> None:
    """Refuse to allocate ``nbytes`` for samples read from ``files["values"]`` when the file
    cannot back them: more than :data:`UNBACKED_SLACK` and more than the file's blocks on disk
    (``allocated``; None or 0 when the filesystem does not say). A sparse file, or offsets
    that claim gigabytes a few KB hold, would otherwise allocate memory unbounded by the data.
    ``samples``: their indices in the part, for the message."""
    if nbytes <= UNBACKED_SLACK or not allocated or nbytes <= allocated:
        return
    raise FormatError(
        f"{files['values']}: samples {head(samples)} would take {nbytes:,} bytes, but the "
        f"file has only {allocated:,} bytes on disk: a sparse file or offsets that do not "
        "describe its data (corrupt or crafted); refusing to allocate. Run `chute verify` on "
        "the dataset"
    )


def head(indices: Any) -> str:
    """The first sample indices of a batch, for error messages: "[459, 206, 3, 81]..."."""
    idx = np.asarray(indices)
    return f"{idx[:4].tolist()}{'...' if len(idx) > 4 else ''}"


def part_values(
    col: Mapping[str, np.ndarray], a: int, b: int, files: FieldPart
) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values) of samples ``a..b-1`` of a part's column of a values+offsets field:
    the offsets checked (:func:`checked_offsets`), the values a view of the map once checked
    that the values file can back them (:func:`check_backed`)."""
    offsets = checked_offsets(col, a, b, files)
    values = col["values"][offsets[0] : offsets[-1]]
    check_backed(values.nbytes, files.allocated, files, range(a, b))
    return offsets, values


def sample_values(col: Mapping[str, np.ndarray], j: int, files: FieldPart) -> np.ndarray:
    """The values of sample ``j`` of a part's column of a values+offsets field (``ds[i]``):
    :func:`part_values` for one sample, its two offsets read as Python ints."""
    a, b = col["offsets"][j : j + 2].tolist()
    values = col["values"]
    if not 0 <= a <= b <= len(values):
        checked_offsets(col, j, j + 1, files)  # raises, naming the sample
    got = values[a:b]
    check_backed(got.nbytes, files.allocated, files, range(j, j + 1))
    return got


def checked_offsets(
    col: Mapping[str, np.ndarray], a: int, b: int, files: Mapping[str, Path]
) -> np.ndarray:
    """Offsets of samples ``a..b`` of a part's column, checked to lie in order inside its
    values: a corrupt offsets file must not turn into a negative or out-of-range slice."""
    offsets = col["offsets"][a : b + 1]
    if offsets[0] < 0 or offsets[-1] > len(col["values"]) or (np.diff(offsets) < 0).any():
        raise FormatError(
            f"{files['offsets']}: offsets of samples {a}..{b - 1} of this part are invalid "
            f"({offsets[:4].tolist()}... of {len(col['values'])} values); the dataset is corrupt"
        )
    return offsets


def check_shapes(
    shapes: np.ndarray, lengths: np.ndarray, inner: tuple, files: Mapping[str, Path]
) -> None:
    """Per-sample shapes of samples of ``lengths`` values: no negative dim, the fixed dims,
    exactly the sample's number of values (an int64 overflow is caught by the float check)."""
    with np.errstate(over="ignore"):
        bad = (shapes < 0).any(axis=1) | (shapes.prod(axis=1) != lengths)
    bad |= shapes.astype(np.float64).prod(axis=1) >= 2**62
    for k, d in enumerate(inner, 1):
        if d is not None:
            bad |= shapes[:, k] != d
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise FormatError(
            f"{files['shapes']}: a sample's shape {shapes[i].tolist()} does not fit its "
            f"{int(lengths[i])} values and the inner shape {inner}; the dataset is corrupt"
        )


def strings(values: np.ndarray, offsets: np.ndarray, where: str) -> list[str]:
    """The UTF-8 strings ``values[offsets[i]:offsets[i+1]]`` of a String field's batch.
    Bytes that are not valid UTF-8 (chute writes only valid UTF-8: the file is corrupt or
    crafted) are a :class:`FormatError` naming ``where`` (dataset and field) and the sample
    in the batch, never replaced silently."""
    raw = values.tobytes()
    bounds = list(itertools.pairwise(offsets.tolist()))
    try:
        return [raw[i:j].decode("utf-8") for i, j in bounds]
    except UnicodeDecodeError:
        for k, (i, j) in enumerate(bounds):
            try:
                raw[i:j].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise FormatError(
                    f"{where}, sample {k} of the batch: not valid UTF-8 ({exc.reason} at byte "
                    f"{exc.start}); chute writes UTF-8 only, so the file is corrupt or crafted"
                ) from None
        raise
