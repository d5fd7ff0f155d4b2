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

Cost. The table kept is O(parts) (``eos`` adds one of O(documents) per part used). A window
inside one part is one slice of its values file; a batch of them is one vectorized copy (a
strided view of the file indexed by the window starts), no Python per window. Windows over a
part boundary, and ``eos``, take a flat index per token (numpy, no Python per document).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from .. import format as fmt
from .._args import check_int, one_index
from .._arrays import distinct
from .._torch import empty_buffers, to_torch
from ..errors import ArgumentError, ArgumentValueError
from .gather import check_gather_args, check_indices, out_rows
from .samples import ReadsBatches
from .segments import segments
from .tokens import TokenStream

__all__ = ["Windows", "token_id", "windows"]

DOCUMENT_IDS = "document_ids"
POSITIONS = "positions"
_INT64 = "int64"


def windows(
    ds: Any,
    field: str = "tokens",
    length: int = 2049,
    stride: int | None = None,
    *,
    eos: int | None = None,
    drop_tail: bool = True,
    pad_id: int = 0,
    document_ids: bool = False,
    positions: bool = False,
    dtype: Any = None,
) -> Windows:
    """Windows of ``length`` tokens, ``stride`` apart, over field ``field`` of ``ds`` (see the
    module doc). Example, nanoGPT's batches::

        w = chute.windows(chute.open("owt.chute"), "tokens", length=1025)
        for batch in chute.Loader(w, batch_size=64):
            x, y = batch["tokens"][:, :-1], batch["tokens"][:, 1:]
    """
    return Windows(
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
    )


class Windows(ReadsBatches):
    """Windows over a token field (made by :func:`windows`): ``len()``, ``gather``, ``w[i]``,
    ``schema`` (the field as ``(length,)`` rows, plus ``document_ids`` / ``positions``)."""

    def __init__(
        self,
        ds: Any,
        field: str,
        length: int,
        stride: int | None = None,
        *,
        eos: int | None = None,
        drop_tail: bool = True,
        pad_id: int = 0,
        document_ids: bool = False,
        positions: bool = False,
        dtype: Any = None,
    ) -> None:
        self.stream = TokenStream(ds, field, "chute.windows")
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
        if self.stream.flat and (document_ids or positions or eos is not None):
            raise ArgumentValueError(
                f"chute.windows: field {field!r} is a flat stream, with no documents: "
                "document_ids=, positions= and eos= need a Ragged field (one sample a document)"
            )
        self.schema: dict[str, fmt.Field] = {field: fmt.Tensor((self.length,), self.dtype)}
        for name, wanted in ((DOCUMENT_IDS, document_ids), (POSITIONS, positions)):
            if wanted:
                if name == field:
                    raise ArgumentValueError(
                        f"chute.windows: the token field is named {field!r}, as the {name} it "
                        "would add; rename the field (chute.open(path, fields=...))"
                    )
                self.schema[name] = fmt.Tensor((self.length,), _INT64)
        st = self.stream
        extra = st.docs if self.eos is not None else 0
        self._sizes = st.tokens + extra  # each part's share of the stream
        self._ends = np.cumsum(self._sizes)
        self.total = int(self._ends[-1]) if len(self._ends) else 0
        full = max(0, (self.total - self.length) // self.stride + 1)
        covered = (full - 1) * self.stride + self.length if full else 0
        tail = covered < self.total and full * self.stride < self.total
        self._len = full + (1 if tail and not self.drop_tail else 0)
        self._tables: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # with eos, per part

    def __len__(self) -> int:
        return self._len

    @property
    def tokens_per_sample(self) -> int:
        """Tokens in a window: ``length`` (what token-weighted mixing counts)."""
        return self.length

    def empty_batch(self, batch_size: int, pin_memory: bool = False) -> dict[str, torch.Tensor]:
        """Pre-allocated ``out=`` buffers for :meth:`gather`."""
        return empty_buffers(self.schema, batch_size, pin_memory)

    def __getitem__(self, i: Any) -> dict[str, Any]:
        """Window ``i`` (an int) as ``{field: (length,) tensor, ...}``."""
        i = one_index(i, "chute.windows is indexed by an int")
        return {k: t[0] for k, t in self.gather([i]).items()}

    def gather(
        self,
        indices: Any,
        out: Mapping[str, torch.Tensor] | None = None,
        pad: float | int | None = None,
    ) -> dict[str, Any]:
        """Windows ``indices`` as one batch of ``(B, length)`` tensors, written into ``out``
        when given (``pad`` is accepted for the loaders' sake: no field is ragged)."""
        check_gather_args(self.schema, out, pad, "")
        idx = check_indices(indices, self._len, self, positions=True)
        b = len(idx)
        rows = {}
        for name, f in self.schema.items():
            if out is not None and name in out:
                rows[name] = out_rows(out[name], name, f, b)  # type: ignore[arg-type]
            else:
                rows[name] = np.empty((b, self.length), fmt.storage_dtype(f.dtype))
        starts = idx * self.stride
        ends = np.minimum(starts + self.length, self.total)
        if (ends - starts < self.length).any():  # the padded tail
            short = ends - starts < self.length
            rows[self.field][short] = self.pad_id
            for name in (DOCUMENT_IDS, POSITIONS):
                if name in rows:
                    rows[name][short] = -1 if name == DOCUMENT_IDS else 0
        first = np.searchsorted(self._ends, starts, side="right")
        last = np.searchsorted(self._ends, np.maximum(ends - 1, starts), side="right")
        hit = distinct(segments(first, last - first + 1, len(self._ends))).tolist()
        for p in hit:
            self._fill(rows, p, starts, ends, (first == p) & (last == p))
        self.stream.recheck(hit)
        batch: dict[str, Any] = {}
        for name, f in self.schema.items():
            if out is not None and name in out:
                batch[name] = out[name] if len(out[name]) == b else out[name][:b]
            else:
                batch[name] = to_torch(rows[name], f.dtype)
        return batch

    # ------------------------------------------------------------------ one part's share

    def _fill(
        self,
        rows: dict[str, np.ndarray],
        p: int,
        starts: np.ndarray,
        ends: np.ndarray,
        inside: np.ndarray,
    ) -> None:
        """Write part ``p``'s share of every window of the batch into ``rows``. ``inside``:
        the windows wholly in this part, one strided copy when there is no ``eos``."""
        base = int(self._ends[p] - self._sizes[p])
        values = self.stream.values(p)
        tokens = rows[self.field]
        full = inside & (ends - starts == self.length)
        if self.eos is None and full.any():
            view = np.lib.stride_tricks.sliding_window_view(values, self.length)
            tokens[full] = view[starts[full] - base]
            rest = ~full
        else:
            rest = np.ones(len(starts), bool)
        lo = np.maximum(starts, base)
        hi = np.minimum(ends, base + int(self._sizes[p]))
        seg = np.flatnonzero(rest & (lo < hi))
        if len(seg):
            flat = tokens.reshape(-1)
            dst = seg * self.length + (lo[seg] - starts[seg])
            x, n = lo[seg] - base, hi[seg] - lo[seg]
            if self.eos is None:
                flat[segments(dst, n, len(flat))] = values[segments(x, n, len(values))]
            else:
                self._fill_eos(flat, p, values, dst, x, n)
        if DOCUMENT_IDS in rows or POSITIONS in rows:
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

    def _fill_eos(
        self,
        flat: np.ndarray,
        p: int,
        values: np.ndarray,
        dst: np.ndarray,
        x: np.ndarray,
        n: np.ndarray,
    ) -> None:
        """Segments ``[x, x + n)`` of part ``p``'s share, eos included, into ``flat`` at
        ``dst``: the tokens by one flat take, the eos positions set after."""
        eos_at = self._doc_table(p)[1]
        ex = np.searchsorted(eos_at, x, side="left")  # eos before x: real = x - ex
        ey = np.searchsorted(eos_at, x + n, side="left")
        where = segments(dst, n, len(flat))
        keep = np.ones(len(where), bool)
        if (ey > ex).any():
            count = ey - ex
            seg_base = np.cumsum(n) - n
            owner = np.repeat(np.arange(len(x)), count)
            e = eos_at[segments(ex, count, len(eos_at))]
            keep[seg_base[owner] + (e - x[owner])] = False
        real_n = n - (ey - ex)
        flat[where[keep]] = values[segments(x - ex, real_n, len(values))]
        flat[where[~keep]] = self.eos

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


def token_id(name: str, value: Any, dtype: np.dtype) -> int:
    """``value`` as a token id that fits ``dtype``; else an error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentError(f"{name} must be an int token id, got {value!r}")
    info = np.iinfo(dtype)
    if not info.min <= value <= info.max:
        raise ArgumentValueError(
            f"{name}={value} does not fit the token field's {dtype} ({info.min} to {info.max})"
        )
    return int(value)
