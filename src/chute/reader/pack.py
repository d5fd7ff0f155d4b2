"""``chute.pack``: whole documents packed into rows of at most ``length`` tokens.

Padding every batch to its longest document wastes most of the compute on corpora of
lognormal lengths (one 41 k-token document made random batches 82% padding). Packing puts
several whole documents in one row and tells attention where they begin: each sample of
:func:`pack` is a row of ``length`` tokens (padded with ``pad_id`` after the last document),
with

* ``position_ids`` (int64, ``(length,)``): each token's position in its document, restarting
  at 0 at every document (0 on padding);
* ``cu_seqlens`` (int32, Ragged): the row's cumulative document boundaries, FlashAttention's
  varlen layout, ``[0, l1, l1 + l2, ..., used]`` plus ``length`` when the row is padded (the
  padding is then a sequence of its own, so the boundaries always end at ``length``).
  :meth:`Pack.flat_cu_seqlens` turns a batch's into the one of the flattened ``(B * length)``
  batch that ``flash_attn_varlen_func`` takes.

Documents longer than ``length`` are split into pieces of ``length`` tokens (the last one
shorter; each piece a sequence, positions restarting) or, with ``truncate=True``, cut to their
first ``length`` tokens (:attr:`Pack.dropped_tokens` counts the rest). Never silently dropped.
``dtype`` hands the tokens out as a wider integer dtype, cast while copying (as
:func:`chute.windows`).

The plan. Documents are taken in an order shuffled by ``seed``, in windows of ``window``
pieces; each window is packed by best-fit decreasing (the longest piece first, into the
fullest row it fits, else a new row), which leaves a few percent of padding where next-fit
leaves more. The plan is a pure function of ``seed`` and the documents' lengths, computed once
(O(documents) time and memory: tables of pieces and rows, never of tokens; about 1 us a piece),
so ``len()`` is fixed: the loaders' :class:`~chute.order.Order` reshuffles the rows every epoch
and gives equal steps across ranks and exact resume, as for any dataset. (A packing redone per
epoch would change the number of rows, hence the steps of an epoch, which the Order fixes up
front.) Every document, or piece of one, is in exactly one row, so in exactly one sample per
epoch.

Aligned fields (SFT): ``field=["tokens", "loss_mask", "labels"]`` packs the other fields
exactly as the tokens, each a ``(length,)`` field, ``fill`` on padding (default 0;
``fill={"labels": -100}``); ``labels="next"`` / ``"same"`` adds int64 ``labels`` made from the
tokens, ``ignore_index`` (-100) at each piece's last (``"next"``) or first (``"same"``) token,
on padding and, with ``label_mask="loss_mask"``, where the target's mask is 0
(:mod:`chute.reader.aligned`).

A gather copies each piece's tokens (and aligned values) with one flat index per part (numpy,
no Python per document or row).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .. import kinds
from .._args import check_int
from .._arrays import distinct
from ..batch import RaggedBatch, pad_batch
from ..columns.segments import segments
from ..errors import ArgumentValueError
from ..order.permute import Permutation
from .aligned import LABELS, Aligned, check_labels, make_labels, split_fields
from .gather_args import check_gather_args, check_indices
from .gatherable import Batch, Buffers, Pad
from .pack_plan import best_fit
from .token_rows import TokenRows, token_id
from .tokens import TokenStream

__all__ = ["Pack", "pack"]

POSITION_IDS = "position_ids"
CU_SEQLENS = "cu_seqlens"
_PACK_KEY = 0x5041434B  # "PACK": keeps the plan's shuffle apart from the Order's


def pack(
    ds: Any,
    field: str | Sequence[str] = "tokens",
    length: int = 4096,
    *,
    truncate: bool = False,
    seed: int = 0,
    pad_id: int = 0,
    window: int = 4096,
    dtype: Any = None,
    fill: Mapping[str, Any] | None = None,
    labels: str | None = None,
    label_mask: str | None = None,
    ignore_index: int = -100,
) -> Pack:
    """Rows of whole documents of field ``field`` of ``ds``, at most ``length`` tokens each
    (see the module doc). Example::

        rows = chute.pack(chute.open("corpus.chute"), "tokens", length=4096)
        for batch in chute.Loader(rows, batch_size=8):
            cu, max_len = rows.flat_cu_seqlens(batch["cu_seqlens"])
            out = model(batch["tokens"], position_ids=batch["position_ids"], cu_seqlens=cu)

    Chat fine-tuning, the loss on the assistant's tokens only::

        rows = chute.pack(sft, ["tokens", "loss_mask"], 4096, labels="next",
                          label_mask="loss_mask")
    """
    return Pack(
        ds,
        field,
        length,
        truncate=truncate,
        seed=seed,
        pad_id=pad_id,
        window=window,
        dtype=dtype,
        fill=fill,
        labels=labels,
        label_mask=label_mask,
        ignore_index=ignore_index,
    )


class Pack(TokenRows):
    """Packed rows of documents (made by :func:`pack`): ``len()``, ``gather``, ``rows[i]``,
    ``schema``; :attr:`padding` is the plan's share of padding tokens."""

    who = "chute.pack"

    def __init__(
        self,
        ds: Any,
        field: str | Sequence[str],
        length: int,
        *,
        truncate: bool = False,
        seed: int = 0,
        pad_id: int = 0,
        window: int = 4096,
        dtype: Any = None,
        fill: Mapping[str, Any] | None = None,
        labels: str | None = None,
        label_mask: str | None = None,
        ignore_index: int = -100,
    ) -> None:
        field, others = split_fields(field, "chute.pack")
        self.stream = TokenStream(ds, field, "chute.pack")
        self.aligned = Aligned(self.stream, others, fill, "chute.pack")
        check_labels(labels, label_mask, ignore_index, others, "chute.pack")
        self.labels, self.label_mask = labels, label_mask
        self.ignore_index = int(ignore_index)
        self.dtype = self.stream.out_dtype(dtype, "chute.pack")
        if self.stream.flat:
            raise ArgumentValueError(
                f"chute.pack: field {field!r} is a flat stream, with no documents to pack; "
                "use chute.windows, or store one document a sample (a Ragged field)"
            )
        self.field = field
        self.length = check_int("chute.pack length", length, 1)
        self.seed = check_int("seed", seed, 0)
        self.window = check_int("window", window, 1)
        self.truncate = bool(truncate)
        self.pad_id = token_id("pad_id", pad_id, np.dtype(self.dtype))
        added = [POSITION_IDS, CU_SEQLENS] + ([LABELS] if labels else [])
        for name in [field, *others]:
            if name in added:
                raise ArgumentValueError(
                    f"chute.pack: field {name!r} is named as a field pack adds; rename it "
                    "(chute.open(path, fields=...))"
                )
        self.schema: dict[str, kinds.Field] = {field: kinds.Tensor((self.length,), self.dtype)}
        for name in others:
            self.schema[name] = kinds.Tensor((self.length,), self.aligned.dtypes[name])
        self.schema[POSITION_IDS] = kinds.Tensor((self.length,), "int64")
        if labels:
            self.schema[LABELS] = kinds.Tensor((self.length,), "int64")
        self.schema[CU_SEQLENS] = kinds.Ragged("int32")
        self._plan()
        for p in range(len(self.stream.docs)):  # the lengths are read already: check them all
            self.aligned.check(p)

    # ------------------------------------------------------------------ the plan

    def _plan(self) -> None:
        """Pieces (document, start, length) and rows (pieces in row order, row starts)."""
        lengths = self.stream.lengths()
        n_docs = len(lengths)
        order = Permutation(n_docs, (self.seed, _PACK_KEY))[np.arange(n_docs, dtype=np.int64)]
        lens = lengths[order]
        L = self.length
        if self.truncate:
            self.dropped_tokens = int(np.maximum(lens - L, 0).sum())
            count = np.minimum(lens, 1)  # an empty document has no piece
            piece_len = np.minimum(lens, L)[count > 0]
            piece_doc = order[count > 0]
            piece_start = np.zeros(len(piece_doc), np.int64)
        else:
            self.dropped_tokens = 0
            count = -(-lens // L)  # pieces per document; 0 for an empty one
            piece_doc = np.repeat(order, count)
            first = np.cumsum(count) - count
            k = np.arange(len(piece_doc), dtype=np.int64) - np.repeat(first, count)
            piece_start = k * L
            piece_len = np.minimum(np.repeat(lens, count) - piece_start, L)
        rows = best_fit(piece_len, L, self.window)
        self._piece_doc = piece_doc[rows.pieces]
        self._piece_start = piece_start[rows.pieces]
        self._piece_len = piece_len[rows.pieces]
        self._row_ptr = rows.ptr
        self._at = rows.at  # where each piece starts in its row
        ends = np.concatenate([[0], np.cumsum(self._piece_len)])
        self._used = ends[rows.ptr[1:]] - ends[rows.ptr[:-1]]  # tokens in each row
        self.tokens = int(self._piece_len.sum())

    @property
    def padding(self) -> float:
        """Share of the rows' tokens that are padding (0 when there are no rows)."""
        total = len(self) * self.length
        return 1 - self.tokens / total if total else 0.0

    @property
    def tokens_per_sample(self) -> float:
        """Document tokens per row, on average (what token-weighted mixing counts)."""
        return self.tokens / len(self) if len(self) else 0.0

    def __len__(self) -> int:
        return len(self._row_ptr) - 1

    # ------------------------------------------------------------------ reading

    def gather(self, indices: Any, out: Buffers | None = None, pad: Pad | None = None) -> Batch:
        """Rows ``indices`` as one batch: ``(B, length)`` tokens, aligned fields, position_ids
        and labels (into ``out`` when given), ``cu_seqlens`` a RaggedBatch (padded, with its
        lengths, under ``pad=``)."""
        check_gather_args(self.schema, out, pad, "")
        idx = check_indices(indices, len(self), self, positions=True)
        b, L = len(idx), self.length
        fixed = [k for k in self.schema if k != CU_SEQLENS]
        rows = self._rows(fixed, out, b)
        rows[self.field][...] = self.pad_id
        rows[POSITION_IDS][...] = 0
        for name in self.aligned.names:
            rows[name][...] = self.aligned.fill[name]
        first, last = self._row_ptr[idx], self._row_ptr[idx + 1]
        per_row = last - first
        pieces = segments(first, per_row, len(self._piece_len) + 1).astype(np.int64)
        owner = np.repeat(np.arange(b, dtype=np.int64), per_row)
        n = self._piece_len[pieces]
        dst = owner * L + self._at[pieces]
        doc = self._piece_doc[pieces]
        part = np.searchsorted(self.stream.doc_ends, doc, side="right")
        size = b * L
        for p in distinct(part).tolist():
            mine = part == p
            local = doc[mine] - (self.stream.doc_ends[p] - self.stream.docs[p])
            src = self.stream.offsets(p)[local] + self._piece_start[pieces[mine]]
            to = segments(dst[mine], n[mine], size)
            sources = [(self.field, self.stream.values(p))]
            sources += [(a, self.aligned.values(p, a)) for a in self.aligned.names]
            for name, values in sources:
                rows[name].reshape(-1)[to] = values[segments(src, n[mine], len(values))]
        rows[POSITION_IDS].reshape(-1)[segments(dst, n, size)] = segments(
            np.zeros(len(n), np.int64), n, L
        )
        if self.labels:
            rows[LABELS][...] = make_labels(
                rows[self.field],
                rows[POSITION_IDS],
                self._used[idx],
                rows[self.label_mask] if self.label_mask else None,
                self.labels,
                self.ignore_index,
            )
        self.stream.recheck(distinct(part).tolist())
        batch = self._handed(rows, fixed, out, b)
        cu = self._cu_seqlens(idx, self._at[pieces] + n, per_row)
        if pad is None:
            batch[CU_SEQLENS] = cu
        else:
            batch[CU_SEQLENS], batch[f"{CU_SEQLENS}_lengths"] = pad_batch(cu, pad, CU_SEQLENS)
        return batch

    def _cu_seqlens(self, idx: np.ndarray, ends: np.ndarray, per_row: np.ndarray) -> RaggedBatch:
        """Each row's boundaries: 0, where each of its pieces ends (``ends``, the batch's
        pieces in row order), and ``length`` if the row is padded."""
        b = len(idx)
        padded = self._used[idx] < self.length
        offsets = np.zeros(b + 1, np.int64)
        np.cumsum(1 + per_row + padded, out=offsets[1:])
        values = np.zeros(int(offsets[-1]), np.int32)
        first = np.cumsum(per_row) - per_row  # each row's first piece in ends
        k = np.arange(len(ends)) - np.repeat(first, per_row)
        values[np.repeat(offsets[:-1], per_row) + 1 + k] = ends
        values[offsets[1:][padded] - 1] = self.length
        return RaggedBatch(torch.from_numpy(values), torch.from_numpy(offsets))

    def flat_cu_seqlens(self, cu: RaggedBatch) -> tuple[torch.Tensor, int]:
        """A batch's ``cu_seqlens`` (a RaggedBatch of rows of ``length``) as the int32
        boundaries of the flattened ``(B * length)`` batch, and the longest sequence:
        ``(cu_seqlens, max_seqlen)`` for ``flash_attn_varlen_func``."""
        offsets = cu.offsets
        b = len(offsets) - 1
        if b == 0:
            return torch.zeros(1, dtype=torch.int32), 0
        sizes = offsets[1:] - offsets[:-1]
        row = torch.repeat_interleave(torch.arange(b), sizes)
        flat = cu.values.to(torch.int64) + row * self.length
        keep = torch.ones(len(flat), dtype=torch.bool)
        keep[offsets[1:-1]] = False  # a row's leading 0 is the previous row's end
        out = flat[keep].to(torch.int32)
        longest = int((out[1:] - out[:-1]).max()) if len(out) > 1 else 0
        return out, longest

    def __repr__(self) -> str:
        return (
            f"chute.pack({self.stream.ds!r}, {self.field!r}, length={self.length}, "
            f"{len(self)} rows, {self.padding:.1%} padding)"
        )
