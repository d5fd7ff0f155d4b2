"""A gather's arguments checked before any read: the indices (in range, negatives counted from
the end), ``out=`` (buffers of fixed-shape fields only) and ``pad=`` (a per-field mapping
names only fields there are; no ``FIELD_lengths`` that is already a field). Every dataset
type (a Dataset, a Subset, a mix, the token views) checks with these, so each refuses alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from .. import kinds
from ..batch import Pad, check_pad_fields
from ..errors import SampleIndexError, SchemaError


def out_of_range(value: Any, n: int, owner: object, at: int | None = None) -> SampleIndexError:
    """The error for index ``value`` (at position ``at`` of a batch, if given) into the ``n``
    samples of ``owner`` (formatted only here, never per batch)."""
    where = "" if at is None else f" (at position {at})"
    if n == 0:
        return SampleIndexError(
            f"index {value}{where} is out of range: {owner} is empty (0 samples), no index is"
        )
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


def check_gather_args(
    schema: Mapping[str, kinds.Field], out: Any, pad: Pad | None, narrow: str
) -> None:
    """``out=`` holds buffers of fixed-shape fields only, ``pad=`` per field names fields of
    ``schema``, and ``pad=`` would add no ``FIELD_lengths`` that is already a field
    (``narrow``: how to leave one out, e.g. "open it with fields="); else a SchemaError."""
    fixed = set(kinds.fixed_fields(schema))
    if out is not None and (not isinstance(out, Mapping) or not fixed.issuperset(out)):
        raise SchemaError(
            f"out= takes a dict of buffers for fixed-shape fields {sorted(fixed)} (see "
            f"empty_batch()); got {sorted(out) if isinstance(out, Mapping) else type(out)}"
        )
    check_pad_fields(pad, list(schema))
    if pad is not None:
        for name, f in schema.items():
            if f.pads and f"{name}_lengths" in schema:
                raise SchemaError(
                    f"pad= would add {name + '_lengths'!r} (the lengths of field {name!r}), but "
                    f"there is a field of that name; {narrow} without one of them, or pad "
                    "yourself from the RaggedBatch"
                )
