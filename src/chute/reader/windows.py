"""``chute.windows``: fixed-length windows over a token stream, as a dataset of their own.

Language models train on ``length`` consecutive tokens of a corpus's documents laid back to
back (nanoGPT's ``get_batch``, LitData's ``TokensLoader``, Megatron's ``GPTDataset``).
:func:`windows` makes that view of a token field (:mod:`chute.reader.tokens`) without
rewriting the data: sample ``i`` is tokens ``i * stride ... i * stride + length - 1`` of the
stream. It is a :class:`~chute.reader.gatherable.Gatherable`, so the loaders shuffle, shard,
resume and mix it as any dataset (``Loader``, ``chute.dataloader``, ``chute.mix``,
``to_device``).

* ``eos``: a token id put after every document (the stream is then ``tokens + documents``
  long); without it documents touch.
* ``stride`` (default ``length``): with ``stride == length`` every token is in exactly one
  window per epoch; smaller strides overlap, larger ones skip tokens. For next-token training,
  ``length = block_size + 1`` and ``x, y = w[:, :-1], w[:, 1:]`` (the pair across two windows'
  boundary is not trained on, as in LitData; ``stride = length - 1`` trains on it too).
* The tail, the last ``< length`` tokens: dropped (``drop_tail=True``, the default), or one
  more window padded with ``pad_id`` (``document_ids`` -1 there).
* ``dtype``: the tokens handed out as another integer dtype (``"int64"`` for an embedding),
  cast while copying, in the loader's threads (torch casts uint16 ~500x slower than numpy).
* ``document_ids=True`` / ``positions=True`` add int64 ``(length,)`` fields: the document of
  each token (its sample index in the dataset) and its position in that document (restarting
  at 0 at each document start; an ``eos`` has the position after the document's last token),
  so a model can mask attention across documents. A flat field has no documents.

* ``field=["tokens", "loss_mask", ...]``: aligned per-token fields windowed exactly as the
  tokens (``fill`` at an ``eos`` and on padding); ``labels="next"`` / ``"same"`` adds int64
  ``labels`` (the next token of the same document, or the tokens with the first of each
  document ignored), ``ignore_index`` across documents, at the window's edge and on padding,
  and with ``label_mask=`` where the target's mask is 0 (:mod:`chute.reader.aligned`).
* ``random_offset=True`` / ``shuffle_documents=True``: other windows every epoch, a pure
  function of ``(seed, epoch)`` (:mod:`chute.reader.window_order`); the loaders read epoch
  ``e`` through ``at_epoch(e)``, so shuffling, sharding and resume stay exact.

Cost. The table kept is O(parts) (``eos`` adds one of O(documents) per part used,
``shuffle_documents`` one of O(documents)). A batch of windows inside one part is one strided
copy of its values file, no Python per window; with ``eos``, that copy and one boolean
placement (:mod:`chute.reader.window_fill`). Windows over a part boundary, and documents in a
shuffled order, take a flat index per token (numpy, no Python per document).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import kinds
from .._args import check_int
from .._arrays import distinct
from ..columns.segments import segments
from ..errors import ArgumentValueError
from ..order.steps import check_epoch
from .aligned import LABELS, Aligned, check_labels, make_labels, split_fields
from .gather_args import check_gather_args, check_indices
from .gatherable import Batch, Buffers, Pad
from .token_rows import TokenRows, token_id
from .tokens import TokenStream
from .window_fill import Column, copy_rows, copy_rows_eos, copy_segments
from .window_order import DocumentOrder, epoch_offset

__all__ = ["EpochWindows", "Windows", "windows"]

DOCUMENT_IDS = "document_ids"
POSITIONS = "positions"
_INT64 = "int64"


def windows(
    ds: Any,
    field: str | Sequence[str] = "tokens",
    length: int = 2049,
    stride: int | None = None,
    *,
    eos: int | None = None,
    drop_tail: bool = True,
    pad_id: int = 0,
    document_ids: bool = False,
    positions: bool = False,
    dtype: Any = None,
    fill: Mapping[str, Any] | None = None,
    labels: str | None = None,
    label_mask: str | None = None,
    ignore_index: int = -100,
    random_offset: bool = False,
    shuffle_documents: bool = False,
    seed: int = 0,
) -> Windows:
    """Windows of ``length`` tokens, ``stride`` apart, over field ``field`` of ``ds`` (see the
    module doc). Example, nanoGPT's batches::

        w = chute.windows(chute.open("owt.chute"), "tokens", length=1025)
        for batch in chute.Loader(w, batch_size=64):
            x, y = batch["tokens"][:, :-1], batch["tokens"][:, 1:]

    With ``random_offset`` or ``shuffle_documents`` it is an :class:`EpochWindows`.
    """
    kind = EpochWindows if (random_offset or shuffle_documents) else Windows
    return kind(
        ds,
        field,
        length,
        stride,
        eos=eos,
        drop_tail=drop_tail,
        pad_id=pad_id,
        document_ids=document_ids,
        positions=positions,
        dtype=dtype,
        fill=fill,
        labels=labels,
        label_mask=label_mask,
        ignore_index=ignore_index,
        random_offset=random_offset,
        shuffle_documents=shuffle_documents,
        seed=seed,
    )


class Windows(TokenRows):
    """Windows over a token field (made by :func:`windows`): ``len()``, ``gather``, ``w[i]``,
    ``schema`` (the field and its aligned fields as ``(length,)`` rows, plus
    ``document_ids`` / ``positions`` / ``labels``)."""

    who = "chute.windows"

    def __init__(
        self,
        ds: Any,
        field: str | Sequence[str],
        length: int,
        stride: int | None = None,
        *,
        eos: int | None = None,
        drop_tail: bool = True,
        pad_id: int = 0,
        document_ids: bool = False,
        positions: bool = False,
        dtype: Any = None,
        fill: Mapping[str, Any] | None = None,
        labels: str | None = None,
        label_mask: str | None = None,
        ignore_index: int = -100,
        random_offset: bool = False,
        shuffle_documents: bool = False,
        seed: int = 0,
    ) -> None:
        field, others = split_fields(field, "chute.windows")
        self.stream = TokenStream(ds, field, "chute.windows")
        self.aligned = Aligned(self.stream, others, fill, "chute.windows")
        check_labels(labels, label_mask, ignore_index, others, "chute.windows")
        self.labels, self.label_mask = labels, label_mask
        self.ignore_index = int(ignore_index)
        self.dtype = self.stream.out_dtype(dtype, "chute.windows")
        self.field = field
        self.length = check_int("chute.windows length", length, 1)
        self.stride = (
            self.length if stride is None else check_int("chute.windows stride", stride, 1)
        )
        self.drop_tail = bool(drop_tail)
        out = np.dtype(self.dtype)
        self.eos = None if eos is None else token_id("eos", eos, out)
        self.pad_id = token_id("pad_id", pad_id, out)
        self.seed = check_int("seed", seed, 0)
        self.random_offset = bool(random_offset)
        flat_refused = document_ids or positions or eos is not None or shuffle_documents
        if self.stream.flat and flat_refused:
            raise ArgumentValueError(
                f"chute.windows: field {field!r} is a flat stream, with no documents: "
                "document_ids=, positions=, eos= and shuffle_documents= need a Ragged field "
                "(one sample a document)"
            )
        if self.random_offset and not self.drop_tail:
            raise ArgumentValueError(
                "chute.windows: random_offset=True moves the windows every epoch, so the tail "
                "moves too: keep drop_tail=True (the default)"
            )
        self.schema: dict[str, kinds.Field] = {field: kinds.Tensor((self.length,), self.dtype)}
        for name in others:
            self.schema[name] = kinds.Tensor((self.length,), self.aligned.dtypes[name])
        added = [n for n, on in ((DOCUMENT_IDS, document_ids), (POSITIONS, positions)) if on]
        added += [LABELS] if labels else []
        for name in added:
            if name in self.schema:
                raise ArgumentValueError(
                    f"chute.windows: field {name!r} is named as a field windows adds; rename "
                    "it (chute.open(path, fields=...))"
                )
            self.schema[name] = kinds.Tensor((self.length,), _INT64)
        st = self.stream
        self.order = DocumentOrder(st, eos is not None, self.seed) if shuffle_documents else None
        extra = st.docs if self.eos is not None else 0
        self._sizes = st.tokens + extra  # each part's share of the stream
        self._ends = np.cumsum(self._sizes)
        self.total = int(self._ends[-1]) if len(self._ends) else 0
        usable = self.total - (self.stride - 1 if self.random_offset else 0)
        full = max(0, (usable - self.length) // self.stride + 1)
        covered = (full - 1) * self.stride + self.length if full else 0
        tail = covered < self.total and full * self.stride < self.total
        self._len = full + (1 if tail and not self.drop_tail else 0)
        self._tables: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # with eos, per part
        self._epoch = 0

    def __len__(self) -> int:
        return self._len

    @property
    def tokens_per_sample(self) -> int:
        """Tokens in a window: ``length`` (what token-weighted mixing counts)."""
        return self.length

    def gather(self, indices: Any, out: Buffers | None = None, pad: Pad | None = None) -> Batch:
        """Windows ``indices`` as one batch of ``(B, length)`` tensors, written into ``out``
        when given (``pad`` is accepted for the loaders' sake: no field is ragged)."""
        check_gather_args(self.schema, out, pad, "")
        idx = check_indices(indices, self._len, self, positions=True)
        b, L = len(idx), self.length
        rows = self._rows(self.schema, out, b)
        if self.labels and POSITIONS not in rows:  # where documents begin, for the labels
            rows[POSITIONS] = np.ones((b, L), np.int64)
        offset = epoch_offset(self.seed, self._epoch, self.stride) if self.random_offset else 0
        starts = idx * self.stride + offset
        ends = np.minimum(starts + L, self.total)
        if (ends - starts < L).any():  # the padded tail
            short = ends - starts < L
            rows[self.field][short] = self.pad_id
            for name in self.aligned.names:
                rows[name][short] = self.aligned.fill[name]
            for name in (DOCUMENT_IDS, POSITIONS):
                if name in rows:
                    rows[name][short] = -1 if name == DOCUMENT_IDS else 0
        if self.order is not None:
            ids = tuple(n if n in rows else None for n in (DOCUMENT_IDS, POSITIONS))
            self.order.fill(rows, self._named_columns, starts, ends, self._epoch, ids)  # type: ignore[arg-type]
        else:
            first = np.searchsorted(self._ends, starts, side="right")
            last = np.searchsorted(self._ends, np.maximum(ends - 1, starts), side="right")
            hit = distinct(segments(first, last - first + 1, len(self._ends))).tolist()
            for p in hit:
                self._fill(rows, p, starts, ends, (first == p) & (last == p))
            self.stream.recheck(hit)
        if self.labels:
            rows[LABELS][...] = make_labels(
                rows[self.field],
                rows[POSITIONS],
                ends - starts,
                rows[self.label_mask] if self.label_mask else None,
                self.labels,
                self.ignore_index,
            )
        return self._handed(rows, self.schema, out, b)

    # ------------------------------------------------------------------ one part's share

    def _named_columns(self, p: int) -> list[tuple[str, np.ndarray, Any]]:
        """``(name, part p's values, what an eos is there)`` of the token and aligned fields."""
        got = [(self.field, self.stream.values(p), self.eos)]
        fill = self.aligned.fill
        return got + [(a, self.aligned.values(p, a), fill[a]) for a in self.aligned.names]

    def _fill(
        self,
        rows: dict[str, np.ndarray],
        p: int,
        starts: np.ndarray,
        ends: np.ndarray,
        inside: np.ndarray,
    ) -> None:
        """Write part ``p``'s share of every window of the batch into ``rows``. ``inside``:
        the windows wholly in this part, by whole rows (:mod:`chute.reader.window_fill`)."""
        base = int(self._ends[p] - self._sizes[p])
        columns: list[Column] = [(rows[n], v, e) for n, v, e in self._named_columns(p)]
        full = np.flatnonzero(inside & (ends - starts == self.length))
        rest = np.ones(len(starts), bool)
        if len(full) and self.eos is None:
            copy_rows(columns, full, starts[full] - base, self.length)
            rest[full] = False
        elif len(full):
            eos_table = self._doc_table(p)[1]
            done = copy_rows_eos(columns, full, starts[full] - base, eos_table, self.length)
            rest[full[done]] = False
        lo = np.maximum(starts, base)
        hi = np.minimum(ends, base + int(self._sizes[p]))
        seg = np.flatnonzero(rest & (lo < hi))
        if len(seg):
            dst = seg * self.length + (lo[seg] - starts[seg])
            eos_at = None if self.eos is None else self._doc_table(p)[1]
            copy_segments(columns, dst, lo[seg] - base, hi[seg] - lo[seg], eos_at)
        if DOCUMENT_IDS in rows or (POSITIONS in rows and not self.stream.flat):
            docs = np.flatnonzero(lo < hi)
            self._fill_docs(
                rows,
                p,
                docs * self.length + (lo[docs] - starts[docs]),
                lo[docs] - base,
                hi[docs] - lo[docs],
            )

    def _doc_table(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        """(where each document starts, where each eos is) in part ``p``'s share of the
        stream: O(documents of the part), made once per process (with ``eos`` only)."""
        got = self._tables.get(p)
        if got is None:
            offsets = self.stream.offsets(p)
            k = np.arange(len(offsets) - 1, dtype=np.int64)
            got = (offsets[:-1] + k, offsets[1:] + k)
            self._tables[p] = got
        return got

    def _fill_docs(
        self,
        rows: dict[str, np.ndarray],
        p: int,
        dst: np.ndarray,
        x: np.ndarray,
        n: np.ndarray,
    ) -> None:
        """``document_ids`` / ``positions`` of segments ``[x, x + n)`` of part ``p``'s share:
        each position's document by a binary search of the document starts."""
        starts = self._doc_table(p)[0] if self.eos is not None else self.stream.offsets(p)[:-1]
        v = segments(x, n, int(self._sizes[p]) + 1).astype(np.int64)
        d = np.searchsorted(starts, v, side="right") - 1
        where = segments(dst, n, len(rows[self.field].reshape(-1)))
        if DOCUMENT_IDS in rows:
            first = int(self.stream.doc_ends[p] - self.stream.docs[p])
            rows[DOCUMENT_IDS].reshape(-1)[where] = d + first
        if POSITIONS in rows:
            rows[POSITIONS].reshape(-1)[where] = v - starts[d]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tables": {}}  # remade per process, from its own maps

    def __repr__(self) -> str:
        return (
            f"chute.windows({self.stream.ds!r}, {self.field!r}, length={self.length}, "
            f"stride={self.stride}, {self._len} windows)"
        )


class EpochWindows(Windows):
    """Windows that differ every epoch (``random_offset`` / ``shuffle_documents``): a
    :class:`~chute.reader.gatherable.PerEpoch` dataset. ``gather`` and ``w[i]`` read
    :attr:`epoch` (0 unless :meth:`set_epoch`); ``Loader`` and ``chute.dataloader`` read epoch
    ``e`` from ``at_epoch(e)``."""

    @property
    def epoch(self) -> int:
        """The epoch that ``w[i]`` and ``gather`` read."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch`` from now on; a loader made afterwards starts at this epoch."""
        self._epoch = check_epoch("epoch", epoch)

    def at_epoch(self, epoch: int) -> EpochWindows:
        """A copy bound to ``epoch`` (sharing the tables): what the loaders gather from."""
        bound = copy.copy(self)
        bound.set_epoch(epoch)
        return bound
