"""Indices -> batch: the vectorized gathers on the hot path.

Measured on a 2-vCPU box (see DESIGN.md): ``np.take(src, idx, axis=0, out=buf, mode="clip")``
beats fancy indexing and, unlike the default ``mode="raise"``, writes straight into ``buf``
instead of into a temporary that is then copied. Indices are bounds-checked once per batch by
the caller, so ``clip`` never clips. Ragged fields turn the batch's offsets into one flat index
and do a single ``take``: no loop over samples. A batch over several parts gathers from each
part and puts the rows back in the batch's order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from .. import format as fmt
from .._torch import TORCH_DTYPES, as_numpy, to_torch
from ..batch import RaggedBatch
from ..errors import FormatError, SampleIndexError, SchemaError

Split = list[tuple[int, np.ndarray | None, np.ndarray]]
"""Where a batch's samples are: (part, positions in the batch or None for all of them, indices
in the part) for each part the batch hits."""


class Piece(NamedTuple):
    """One part's share of a batch, for one field: what the gathers read."""

    arrays: Mapping[str, np.ndarray]  # the field's arrays in the part: data | values, offsets..
    files: Mapping[str, Path]  # their files, named in errors
    pos: np.ndarray | None  # positions in the batch (None: all of them, in order)
    local: np.ndarray  # sample indices in the part


def out_of_range(value: Any, n: int, owner: object, at: int | None = None) -> SampleIndexError:
    """The error for index ``value`` (at position ``at`` of a batch, if given) into the ``n``
    samples of ``owner`` (formatted only here, never per batch)."""
    where = "" if at is None else f" (at position {at})"
    return SampleIndexError(
        f"index {value}{where} is out of range for {owner} ({n} samples): indices must be in "
        f"[-{n}, {n})"
    )


def check_indices(indices: Any, n: int, owner: object, positions: bool = False) -> np.ndarray:
    """``indices`` as 1-D int64 indices into the ``n`` samples of ``owner``, negatives counted
    from the end; else a :class:`SampleIndexError` naming the first one out of range (and its
    position in ``indices`` when ``positions``)."""
    try:
        if isinstance(indices, torch.Tensor):
            idx = indices.detach().cpu().numpy()
        else:
            idx = np.asarray(indices)
    except (TypeError, ValueError) as exc:  # e.g. a ragged list of lists
        raise SampleIndexError(f"indices must be a 1-D array of ints ({exc})") from None
    if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
        raise SampleIndexError(
            f"indices into {owner} must be a 1-D array of ints, got {idx.dtype} {idx.shape}"
        )
    unsigned = idx.dtype.kind == "u"
    if unsigned:  # never negative; checked before int64 could wrap one
        bad = idx >= n
    else:
        idx = idx.astype(np.int64, copy=False)
        # Fast path, one reduction: viewed as unsigned, a negative index is huge.
        if not idx.size or idx.view(np.uint64).max() < n:
            return idx
        bad = (idx < -n) | (idx >= n)
    if bad.any():
        at = int(np.flatnonzero(bad)[0])
        raise out_of_range(idx[at], n, owner, at if positions and idx.size > 1 else None)
    idx = idx.astype(np.int64, copy=False)
    return idx if unsigned else np.where(idx < 0, idx + n, idx)


def take_rows(src: np.ndarray, idx: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``src[idx]`` along axis 0, written into ``out`` when given. ``idx`` must be in range."""
    return np.take(src, idx, axis=0, out=out, mode="clip")


def var_take(
    values: np.ndarray, offsets: np.ndarray, idx: np.ndarray, path: str
) -> tuple[np.ndarray, np.ndarray]:
    """Gather samples ``idx`` of a values+offsets column: returns (values, batch offsets)."""
    starts = offsets[idx]
    ends = offsets[idx + 1]
    lengths = ends - starts
    if len(idx) and (lengths.min() < 0 or starts.min() < 0 or ends.max() > len(values)):
        bad = idx[(lengths < 0) | (starts < 0) | (ends > len(values))][0]
        raise FormatError(
            f"{path}: offsets of sample {int(bad)} are invalid ({int(offsets[bad])}.."
            f"{int(offsets[bad + 1])} of {len(values)} values); the dataset is corrupt"
        )
    batch_offsets = np.zeros(len(idx) + 1, np.int64)
    np.cumsum(lengths, out=batch_offsets[1:])
    total = int(batch_offsets[-1])
    # flat[k] = starts[i] + (k - batch_offsets[i]) for k in sample i's range
    flat = np.arange(total, dtype=np.int64)
    flat += np.repeat(starts - batch_offsets[:-1], lengths)
    return take_rows(values, flat), batch_offsets


def out_rows(t: Any, name: str, f: fmt.Tensor, b: int) -> np.ndarray:
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
    pieces: Sequence[Piece], f: fmt.Tensor, b: int, out: np.ndarray | None = None
) -> np.ndarray:
    """The ``b`` rows of fixed-shape field ``f`` that ``pieces`` locate; written into ``out``
    when given."""
    if len(pieces) == 1 and pieces[0].pos is None:
        return take_rows(pieces[0].arrays["data"], pieces[0].local, out)
    res = out if out is not None else np.empty((b, *f.shape), fmt.storage_dtype(f.dtype))
    for piece in pieces:
        res[piece.pos] = take_rows(piece.arrays["data"], piece.local)
    return res


def gather_var(
    parts: Sequence[Piece], f: fmt.Ragged | fmt.Bytes | fmt.String, b: int, where: str
) -> RaggedBatch:
    """The ``b`` samples of variable-size field ``f`` that ``parts`` locate. Several parts are
    concatenated in part order, then one more gather restores the batch's order (``where``
    names the field in its errors)."""
    pieces = []
    for piece in parts:
        col, local = piece.arrays, piece.local
        values, offsets = var_take(
            col["values"], col["offsets"], local, str(piece.files["offsets"])
        )
        shapes = col["shapes"][local] if "shapes" in col else None
        if shapes is not None and isinstance(f, fmt.Ragged):  # only Ragged has shapes
            check_shapes(shapes, offsets, f.inner_shape, piece.files["shapes"])
        pieces.append((piece.pos, values, offsets, shapes))
    if len(pieces) == 1 and pieces[0][0] is None:
        _, values, offsets, shapes = pieces[0]
    else:  # several parts: concatenate in part order, then one more gather restores order
        order = np.concatenate([pos for pos, *_ in pieces]) if pieces else np.zeros(0, np.int64)
        cat_off = np.concatenate(
            [[0]] + [o[1:] + s for (_, _, o, _), s in zip(pieces, _running(pieces), strict=True)]
        ).astype(np.int64)
        cat_val = np.concatenate([v for _, v, _, _ in pieces]) if pieces else None
        inverse = np.empty(b, np.int64)
        inverse[order] = np.arange(b)
        if cat_val is None:
            inner: tuple[int, ...] = () if f.variable_dims else f.inner_shape  # type: ignore[assignment]
            cat_val = np.empty((0, *inner), fmt.storage_dtype(f.dtype))
        values, offsets = var_take(cat_val, cat_off, inverse, where)
        shapes = None
        if f.variable_dims:  # (0, ndim) for an empty batch, as with a single part
            ndim = 1 + len(f.inner_shape)
            shapes = np.concatenate([np.zeros((0, ndim), np.int64)] + [s for *_, s in pieces])
            shapes = shapes[inverse]
    return RaggedBatch(
        to_torch(values, f.dtype),
        torch.from_numpy(offsets),
        None if shapes is None else torch.from_numpy(np.ascontiguousarray(shapes)),
    )


def _running(pieces: list) -> list[int]:
    totals = [int(o[-1]) for _, _, o, _ in pieces]
    return [sum(totals[:i]) for i in range(len(totals))]


def checked_offsets(col: dict[str, np.ndarray], a: int, b: int, where: Path) -> np.ndarray:
    """Offsets of samples ``a..b`` of a part's column, checked to lie in order inside its
    values: a corrupt offsets file must not turn into a negative or out-of-range slice."""
    offsets = col["offsets"][a : b + 1]
    if offsets[0] < 0 or offsets[-1] > len(col["values"]) or (np.diff(offsets) < 0).any():
        raise FormatError(
            f"{where}: offsets of samples {a}..{b - 1} of this part are invalid "
            f"({offsets[:4].tolist()}... of {len(col['values'])} values); the dataset is corrupt"
        )
    return offsets


def check_shapes(shapes: np.ndarray, offsets: np.ndarray, inner: tuple, where: Path) -> None:
    """Per-sample shapes of a batch with these offsets: no negative dim, the fixed dims,
    exactly the sample's number of values (an int64 overflow is caught by the float check)."""
    lengths = np.diff(offsets)
    with np.errstate(over="ignore"):
        bad = (shapes < 0).any(axis=1) | (shapes.prod(axis=1) != lengths)
    bad |= shapes.astype(np.float64).prod(axis=1) >= 2**62
    for k, d in enumerate(inner, 1):
        if d is not None:
            bad |= shapes[:, k] != d
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise FormatError(
            f"{where}: a sample's shape {shapes[i].tolist()} does not fit its {int(lengths[i])} "
            f"values and the inner shape {inner}; the dataset is corrupt"
        )
