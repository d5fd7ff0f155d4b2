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

A gather copies each piece's tokens with one flat index per part (numpy, no Python per
document or row).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from .. import format as fmt
from .._args import check_int, one_index
from .._arrays import distinct
from .._torch import empty_buffers, to_torch
from ..batch import RaggedBatch, pad_batch
from ..errors import ArgumentValueError
from ..order.permute import Permutation
from .gather import check_gather_args, check_indices, out_rows
from .samples import ReadsBatches
from .segments import segments
from .tokens import TokenStream
from .windows import token_id

__all__ = ["Pack", "pack"]

POSITION_IDS = "position_ids"
CU_SEQLENS = "cu_seqlens"
_PACK_KEY = 0x5041434B  # "PACK": keeps the plan's shuffle apart from the Order's


def pack(
    ds: Any,
    field: str = "tokens",
    length: int = 4096,
    *,
    truncate: bool = False,
    seed: int = 0,
    pad_id: int = 0,
    window: int = 4096,
    dtype: Any = None,
) -> Pack:
    """Rows of whole documents of field ``field`` of ``ds``, at most ``length`` tokens each
    (see the module doc). Example::

        rows = chute.pack(chute.open("corpus.chute"), "tokens", length=4096)
        for batch in chute.Loader(rows, batch_size=8):
            cu, max_len = rows.flat_cu_seqlens(batch["cu_seqlens"])
            out = model(batch["tokens"], position_ids=batch["position_ids"], cu_seqlens=cu)
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
    )


class Pack(ReadsBatches):
    """Packed rows of documents (made by :func:`pack`): ``len()``, ``gather``, ``rows[i]``,
    ``schema``; :attr:`padding` is the plan's share of padding tokens."""

    def __init__(
        self,
        ds: Any,
        field: str,
        length: int,
        *,
        truncate: bool = False,
        seed: int = 0,
        pad_id: int = 0,
        window: int = 4096,
        dtype: Any = None,
    ) -> None:
        self.stream = TokenStream(ds, field, "chute.pack")
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
        for name in (POSITION_IDS, CU_SEQLENS):
            if name == field:
                raise ArgumentValueError(
                    f"chute.pack: the token field is named {field!r}, as a field pack adds; "
                    "rename it (chute.open(path, fields=...))"
                )
        self.schema: dict[str, fmt.Field] = {
            field: fmt.Tensor((self.length,), self.dtype),
            POSITION_IDS: fmt.Tensor((self.length,), "int64"),
            CU_SEQLENS: fmt.Ragged("int32"),
        }
        self._plan()

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
        rows = _best_fit(piece_len, L, self.window)
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

    def empty_batch(self, batch_size: int, pin_memory: bool = False) -> dict[str, torch.Tensor]:
        """Pre-allocated ``out=`` buffers for :meth:`gather` (the fixed-shape fields)."""
        return empty_buffers(self.schema, batch_size, pin_memory)

    def __getitem__(self, i: Any) -> dict[str, Any]:
        """Row ``i`` (an int): tokens, position_ids and its cu_seqlens (int32, 1-D)."""
        i = one_index(i, "chute.pack is indexed by an int")
        return {k: v[0] for k, v in self.gather([i]).items()}

    def gather(
        self,
        indices: Any,
        out: Mapping[str, torch.Tensor] | None = None,
        pad: float | int | None = None,
    ) -> dict[str, Any]:
        """Rows ``indices`` as one batch: ``(B, length)`` tokens and position_ids (into ``out``
        when given), ``cu_seqlens`` a RaggedBatch (padded, with its lengths, under ``pad=``)."""
        check_gather_args(self.schema, out, pad, "")
        idx = check_indices(indices, len(self), self, positions=True)
        b, L = len(idx), self.length
        rows = {}
        for name in (self.field, POSITION_IDS):
            f = self.schema[name]
            if out is not None and name in out:
                rows[name] = out_rows(out[name], name, f, b)  # type: ignore[arg-type]
            else:
                rows[name] = np.empty((b, L), fmt.storage_dtype(f.dtype))
        rows[self.field][...] = self.pad_id
        rows[POSITION_IDS][...] = 0
        first, last = self._row_ptr[idx], self._row_ptr[idx + 1]
        per_row = last - first
        pieces = segments(first, per_row, len(self._piece_len) + 1).astype(np.int64)
        owner = np.repeat(np.arange(b, dtype=np.int64), per_row)
        n = self._piece_len[pieces]
        dst = owner * L + self._at[pieces]
        doc = self._piece_doc[pieces]
        part = np.searchsorted(self.stream.doc_ends, doc, side="right")
        tokens = rows[self.field].reshape(-1)
        for p in distinct(part).tolist():
            mine = part == p
            local = doc[mine] - (self.stream.doc_ends[p] - self.stream.docs[p])
            src = self.stream.offsets(p)[local] + self._piece_start[pieces[mine]]
            values = self.stream.values(p)
            tokens[segments(dst[mine], n[mine], len(tokens))] = values[
                segments(src, n[mine], len(values))
            ]
        rows[POSITION_IDS].reshape(-1)[segments(dst, n, len(tokens))] = segments(
            np.zeros(len(n), np.int64), n, L
        )
        self.stream.recheck(distinct(part).tolist())
        batch: dict[str, Any] = {}
        for name in (self.field, POSITION_IDS):
            if out is not None and name in out:
                batch[name] = out[name] if len(out[name]) == b else out[name][:b]
            else:
                batch[name] = to_torch(rows[name], self.schema[name].dtype)  # type: ignore[union-attr]
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


class _Rows:
    """A packing: ``pieces`` (indices, row after row), ``ptr`` (each row's first, and the
    end), ``at`` (each piece's start in its row, in ``pieces`` order)."""

    def __init__(self, pieces: np.ndarray, ptr: np.ndarray, at: np.ndarray) -> None:
        self.pieces, self.ptr, self.at = pieces, ptr, at


def _best_fit(lengths: np.ndarray, capacity: int, window: int) -> _Rows:
    """Best-fit decreasing over consecutive windows of ``window`` pieces: within a window the
    longest piece goes first, each into the open row with the least room that still holds it
    (a sorted list of rooms, bisected), else into a new row. Rows stay in the window they were
    opened in. O(pieces log rows) time, Python per piece (about 1 us)."""
    rows_of: list[list[int]] = []
    for a in range(0, len(lengths), window):
        chunk = np.arange(a, min(a + window, len(lengths)))
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        rooms: list[tuple[int, int]] = []  # (room left, row), sorted
        opened: list[list[int]] = []
        for i, n in zip(chunk.tolist(), lengths[chunk].tolist(), strict=True):
            k = bisect.bisect_left(rooms, (n, -1))
            if k < len(rooms):
                room, r = rooms.pop(k)
                opened[r].append(i)
                room -= n
            else:
                r, room = len(opened), capacity - n
                opened.append([i])
            if room > 0:
                bisect.insort(rooms, (room, r))
        rows_of.extend(opened)
    sizes = np.array([len(r) for r in rows_of], np.int64)
    ptr = np.zeros(len(rows_of) + 1, np.int64)
    np.cumsum(sizes, out=ptr[1:])
    pieces = np.array([i for r in rows_of for i in r], np.int64)
    n = lengths[pieces] if len(pieces) else np.zeros(0, np.int64)
    ends = np.cumsum(n)
    starts_of_row = np.concatenate([[0], ends])[ptr[:-1]]
    at = ends - n - np.repeat(starts_of_row, sizes)
    return _Rows(pieces, ptr, at)
