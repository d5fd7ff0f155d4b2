"""Per-token fields that travel with a token field through :func:`chute.windows` and
:func:`chute.pack`: a loss mask, stored labels, attention document ids, anything with one value
per token.

``field=["tokens", "loss_mask", ...]``: the first name is the token field (what windows and
packing are planned on), the others are *aligned* to it: Ragged numeric fields of the same
dataset with one value per token (or, for a flat token stream, fixed-shape fields of the
token field's row shape). Each comes out as a ``(length,)`` field placed exactly as the tokens
(the same offsets), ``fill`` where no document token is (padding, an ``eos``). A document
whose aligned field has another length than its tokens is a
:class:`~chute.errors.SchemaError` naming the field and the document, raised when its part is
first read (O(documents of the part), once per process).

``labels="next"`` / ``"same"`` adds an int64 ``labels`` field computed from the tokens
(:func:`make_labels`): the next token of the same sequence (targets for a model that does not
shift), or the tokens themselves with ``ignore_index`` at each sequence's first token (for
models that shift inside, as Hugging Face's do; the pair across two sequences is then never
trained on). ``label_mask=NAME`` (an aligned field, the loss mask) sets ``ignore_index`` where
the target token's mask is 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import format as fmt
from ..errors import ArgumentError, ArgumentValueError, SchemaError
from .tokens import TokenStream

__all__ = ["LABELS", "Aligned", "check_labels", "make_labels", "split_fields"]

LABELS = "labels"
LABEL_MODES = ("next", "same")


def split_fields(field: Any, who: str) -> tuple[str, list[str]]:
    """``field`` (a name, or a list of names: the token field first) as (token field, the
    aligned fields)."""
    if isinstance(field, str):
        return field, []
    if not isinstance(field, Sequence) or not field or not all(isinstance(f, str) for f in field):
        raise ArgumentError(
            f"{who}: field is a field name or a list of them (the token field first), got "
            f"{field!r}"[:300]
        )
    names = list(field)
    if len(set(names)) != len(names):
        raise ArgumentValueError(f"{who}: field {names!r} names a field twice")
    return names[0], names[1:]


class Aligned:
    """The aligned fields of ``stream`` (see the module doc): their dtypes, fill values and,
    per part, their values files, checked against the tokens' offsets on first use."""

    def __init__(
        self,
        stream: TokenStream,
        names: Sequence[str],
        fill: Mapping[str, Any] | None,
        who: str,
    ) -> None:
        ds, self.stream, self.names = stream.ds, stream, list(names)
        self.dtypes: dict[str, str] = {}
        token_field = ds.schema[stream.field]
        for name in self.names:
            f = ds.schema.get(name)
            if f is None:
                raise SchemaError(
                    f"{who}: {ds.path} has no field {name!r}; its fields are {sorted(ds.schema)}"
                )
            shape_ok = (
                f.fixed and f.sample_shape == token_field.sample_shape
                if stream.flat
                else not f.fixed and f.sample_shape == (None,)
            )
            if not f.numeric or not shape_ok:
                want = (
                    f"a fixed-shape field of shape {token_field.sample_shape}"
                    if stream.flat
                    else "a Ragged field with one value a token"
                )
                raise SchemaError(
                    f"{who}: field {name!r} of {ds.path} is {f!r}; a field aligned to the "
                    f"tokens {stream.field!r} is {want}"
                )
            if f.dtype == "bfloat16":
                raise SchemaError(
                    f"{who}: field {name!r} of {ds.path} is bfloat16; store an aligned field as "
                    "an int, bool or float32"
                )
            self.dtypes[name] = f.dtype
        fill = dict(fill or {})
        unknown = sorted(set(fill) - set(self.names))
        if unknown:
            raise ArgumentValueError(
                f"{who}: fill= names {unknown}, which are not aligned fields ({self.names})"
            )
        self.fill = {n: _fits(n, fill.get(n, 0), self.dtypes[n], who) for n in self.names}
        self._checked: set[int] = set()

    def values(self, p: int, name: str) -> np.ndarray:
        """Field ``name``'s values in part ``p``, 1-D (a read-only map), checked aligned."""
        self.check(p)
        col, _ = self.stream.ds._column(p, name)
        return col["data"].reshape(-1) if self.stream.flat else col["values"]

    def check(self, p: int) -> None:
        """Every document of part ``p`` has as many values in each aligned field as tokens;
        else a SchemaError naming the field and the first document that does not."""
        if p in self._checked or self.stream.flat:
            return
        ds = self.stream.ds
        tokens = self.stream.offsets(p)
        for name in self.names:
            col, files = ds._column(p, name)
            offsets = col["offsets"]
            if len(offsets) == len(tokens) and np.array_equal(offsets, tokens):
                continue
            lengths = np.diff(offsets)
            bad = np.flatnonzero(lengths != np.diff(tokens))
            i = int(bad[0]) if len(bad) else 0
            raise SchemaError(
                f"{files['offsets']}: field {name!r} of document {ds.parts[p].start + i} has "
                f"{int(lengths[i])} values and its tokens {self.stream.field!r} "
                f"{int(tokens[i + 1] - tokens[i])}; an aligned field has one value a token"
            )
        self._checked.add(p)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_checked": set()}  # each process checks what it maps


def _fits(name: str, value: Any, dtype: str, who: str) -> int | float:
    """``value`` as a fill value of field ``name`` (``dtype``), else an error."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ArgumentError(f"{who}: fill[{name!r}] must be a number, got {value!r}")
    store = np.dtype(fmt.storage_dtype(dtype))
    if np.array(value).astype(store).item() != value:
        raise ArgumentValueError(f"{who}: fill[{name!r}]={value!r} does not fit its {dtype}")
    return value.item() if isinstance(value, np.generic) else value


def check_labels(
    labels: Any, label_mask: Any, ignore_index: Any, aligned: Sequence[str], who: str
) -> None:
    """The ``labels=`` / ``label_mask=`` / ``ignore_index=`` arguments, else an error."""
    if labels is not None and labels not in LABEL_MODES:
        raise ArgumentValueError(
            f"{who}: labels= is 'next' (the next token), 'same' (the tokens, for a model that "
            f"shifts) or None, got {labels!r}"
        )
    if label_mask is not None and (labels is None or label_mask not in aligned):
        raise ArgumentValueError(
            f"{who}: label_mask={label_mask!r} needs labels= and one of the aligned fields "
            f"{list(aligned)} (field=['tokens', 'loss_mask'], labels='next', "
            "label_mask='loss_mask')"
        )
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, (int, np.integer)):
        raise ArgumentError(f"{who}: ignore_index must be an int, got {ignore_index!r}")
    if labels is not None and LABELS in aligned:
        raise ArgumentValueError(
            f"{who}: labels= adds a field {LABELS!r}, as an aligned field is named; carry the "
            "stored one (no labels=) or rename it (chute.open(path, fields=...))"
        )


def make_labels(
    tokens: np.ndarray,
    positions: np.ndarray,
    used: np.ndarray,
    mask: np.ndarray | None,
    mode: str,
    ignore_index: int,
) -> np.ndarray:
    """The ``(B, L)`` int64 labels of rows ``tokens``: a sequence begins where ``positions``
    is 0 and at each row's first column; row ``r``'s first ``used[r]`` columns are tokens, the
    rest padding. ``"next"``: the next column's token where it is in the same sequence (else
    ``ignore_index``); ``"same"``: the token, ``ignore_index`` at a sequence's first one.
    ``mask``: the loss mask, ``ignore_index`` where the target's is 0. Padding: ignored."""
    b, length = tokens.shape
    begins = positions == 0
    begins[:, 0] = True
    valid = np.arange(length)[None, :] < used[:, None]
    out = np.full((b, length), ignore_index, np.int64)
    if mode == "next":
        keep = valid[:, 1:] & ~begins[:, 1:]
        if mask is not None:
            keep &= mask[:, 1:] != 0
        np.copyto(out[:, :-1], tokens[:, 1:], where=keep, casting="unsafe")
    else:
        keep = valid & ~begins
        if mask is not None:
            keep &= mask != 0
        np.copyto(out, tokens, where=keep, casting="unsafe")
    return out
