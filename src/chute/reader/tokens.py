"""A token field read as one stream: what :func:`chute.windows`, :func:`chute.pack`, the
token-budget batches and token-weighted mixing read.

A *token field* of a chute :class:`~chute.Dataset` is either a :class:`chute.Ragged` field of
integers with no inner dimensions (one document per sample, its tokens the sample's values) or
a fixed-shape integer :class:`chute.fields.Tensor` field (a flat stream: shape ``()``, one token a
sample; or pre-chunked rows, read back to back), with no documents. The stream is the field's
values in stored order, part after part. :class:`TokenStream` gives each part's values file and
offsets, mapped, never copied: every table kept is O(parts); the per-document tables that
packing and batching build are O(documents), never O(tokens).

Offsets are checked when a part is first used by this process: non-decreasing, else a
:class:`~chute.errors.FormatError` naming the file, the field and the first bad sample (the
first and last offsets are checked at open already).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import format as fmt
from ..errors import ArgumentError, ArgumentValueError, FormatError, SchemaError
from .dataset import Dataset

__all__ = ["TokenStream", "checked_lengths", "row_length", "token_lengths", "tokens_per_sample"]

_INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


class TokenStream:
    """Field ``field`` of dataset ``ds`` as one token stream (see the module doc).

    ``tokens[p]`` and ``docs[p]``: tokens and documents of part ``p`` (no documents in a flat
    field); ``token_ends`` / ``doc_ends``: their running sums over the parts.
    """

    def __init__(self, ds: Any, field: str, who: str) -> None:
        if not isinstance(ds, Dataset):
            raise ArgumentError(
                f"{who} reads a chute Dataset (chute.open(path)), not {type(ds).__name__}; "
                "select samples after, through the loader's order, or write the subset first"
            )
        if not isinstance(field, str) or field not in ds.schema:
            raise SchemaError(
                f"{who}: {ds.path} has no field {field!r}; its fields are {sorted(ds.schema)}"
            )
        f = ds.schema[field]
        flat = f.fixed
        kind = np.dtype(fmt.storage_dtype(f.dtype)).kind if f.dtype != "bfloat16" else "f"
        if kind not in "iu" or not f.numeric or not (flat or f.sample_shape == (None,)):
            raise SchemaError(
                f"{who}: field {field!r} of {ds.path} is {f!r}; a token field holds "
                "integers, as chute.Ragged('int32') (documents) or a fixed-shape int Tensor (a "
                "flat stream)"
            )
        self.ds, self.field, self.dtype = ds, field, f.dtype
        self.flat = flat
        self.row = int(np.prod(f.sample_shape)) if flat else 1  # type: ignore[arg-type]
        parts = ds.parts
        if flat:
            self.tokens = np.array([p.num_samples * self.row for p in parts], np.int64)
            self.docs = np.zeros(len(parts), np.int64)
        else:
            self.docs = np.array([p.num_samples for p in parts], np.int64)
            self.tokens = np.array(
                [int(ds._column(i, field)[0]["offsets"][-1]) for i in range(len(parts))], np.int64
            )
        self.token_ends = np.cumsum(self.tokens)
        self.doc_ends = np.cumsum(self.docs)
        self._checked: set[int] = set()

    @property
    def total(self) -> int:
        """Tokens in the stream."""
        return int(self.token_ends[-1]) if len(self.token_ends) else 0

    def values(self, p: int) -> np.ndarray:
        """The tokens of part ``p``, 1-D (a read-only map)."""
        col, _ = self.ds._column(p, self.field)
        return col["data"].reshape(-1) if self.flat else col["values"]

    def offsets(self, p: int) -> np.ndarray:
        """The document offsets of part ``p`` (``docs[p] + 1``, int64), checked non-decreasing
        the first time (O(documents of the part), once per process)."""
        offsets = self.ds._column(p, self.field)[0]["offsets"]
        if p not in self._checked:
            checked_lengths(self.ds, p, self.field)
            self._checked.add(p)
        return offsets

    def lengths(self) -> np.ndarray:
        """Each document's token count (int64, O(documents)); 1 per row of a flat field."""
        if self.flat:
            return np.full(len(self.ds), self.row, np.int64)
        out = [checked_lengths(self.ds, p, self.field) for p in range(len(self.tokens))]
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    def out_dtype(self, dtype: Any, who: str) -> str:
        """The dtype a view hands the tokens out as: ``dtype`` (an int dtype that holds every
        value of the field's, cast while copying, in the loader's threads: torch converts
        uint16 on the CPU ~500x slower than numpy), or the field's own (None)."""
        if dtype is None:
            return self.dtype
        name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
        if name not in _INTS or not np.can_cast(self.dtype, name, "safe"):
            raise ArgumentValueError(
                f"{who}: dtype={dtype!r} cannot hold every value of field {self.field!r} "
                f"({self.dtype}); pass an integer dtype at least as wide, e.g. 'int64'"
            )
        return name

    def recheck(self, parts: Any) -> None:
        """The files read are still those ``open()`` saw (see ``Dataset._recheck``)."""
        self.ds._recheck(parts)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_checked": set()}  # each process checks what it maps


def token_lengths(ds: Any, who: str) -> np.ndarray:
    """Per-sample length of ``ds`` (a Dataset, packed rows or windows, or a Subset of one) for
    length-aware batching, int64, O(samples): a Dataset's longest Ragged field in each sample;
    a row of :func:`chute.pack` or :func:`chute.windows` its ``length``, the tokens a model
    computes on whatever share of them is padding. Else an error."""
    from .subset import SubsetDataset

    base = ds.dataset if isinstance(ds, SubsetDataset) else ds
    row = row_length(ds)
    if row is not None:
        return np.full(len(ds), row, np.int64)
    if not isinstance(base, Dataset):
        raise ArgumentError(
            f"{who} batches a chute Dataset, chute.pack or chute.windows rows (or a Subset of "
            f"one) by its samples' lengths, not {type(base).__name__}"
        )
    names = [k for k, f in base.schema.items() if f.numeric and not f.fixed]
    if not names:
        raise SchemaError(
            f"{who}: {base.path} has no Ragged field to measure; its fields are {dict(base.schema)}"
        )
    got = np.zeros(len(base), np.int64)
    for name in names:
        per = [checked_lengths(base, p, name) for p in range(len(base.parts))]
        if per:
            np.maximum(got, np.concatenate(per), out=got)
    return got[ds.indices] if isinstance(ds, SubsetDataset) else got


def row_length(ds: Any) -> int | None:
    """The length of every row of ``ds`` when it is rows of :func:`chute.pack` or
    :func:`chute.windows` (or a Subset of them: a view of a :class:`TokenStream` in rows of
    ``length`` tokens), else None."""
    from .subset import SubsetDataset

    base: Any = ds.dataset if isinstance(ds, SubsetDataset) else ds
    return int(base.length) if isinstance(getattr(base, "stream", None), TokenStream) else None


def checked_lengths(ds: Dataset, p: int, name: str) -> np.ndarray:
    """The sample lengths of variable-size field ``name`` in part ``p`` of ``ds`` (int64), or
    a :class:`~chute.errors.FormatError` naming the file, field and first sample whose
    offsets run backwards."""
    col, files = ds._column(p, name)
    offsets = col["offsets"]
    lengths = np.diff(offsets)
    bad = np.flatnonzero(lengths < 0)
    if len(bad):
        i = int(bad[0])
        raise FormatError(
            f"{files['offsets']}: field {name!r}: the offsets of sample "
            f"{ds.parts[p].start + i} run backwards ({int(offsets[i])} then "
            f"{int(offsets[i + 1])}); the dataset is corrupt, run `chute verify` on it"
        )
    return lengths


def tokens_per_sample(ds: Any, who: str) -> float:
    """Tokens in a sample of ``ds`` on average: a token view's own count (windows, packed
    rows), else a dataset's mean :func:`token_lengths`."""
    own = getattr(ds, "tokens_per_sample", None)
    if own is not None:
        return float(own)
    lengths = token_lengths(ds, who)
    return float(lengths.mean()) if len(lengths) else 0.0
