"""Per-epoch variety for :func:`chute.windows`: where epoch ``e``'s windows start and in which
order its documents are laid back to back, pure functions of ``(seed, e)`` so that resuming
any epoch at any step reads the same windows.

* ``random_offset=True``: every window of epoch ``e`` starts ``o_e`` tokens later,
  ``o_e = Permutation(stride, (seed, OFFSET_KEY, e))[0]``, uniform in ``[0, stride)``: the
  window edges move every epoch (nanoGPT draws a random offset per window), so window 0 of
  epochs 0 and 1 differ and the pairs across an edge are trained on in other epochs.
  ``len()`` counts the windows that fit at any offset, so it is the same every epoch.
* ``shuffle_documents=True``: epoch ``e`` lays the documents back to back in the order
  ``Permutation(documents, (seed, ORDER_KEY, e))`` (Megatron's GPTDataset reshuffles its
  documents every epoch the same way), each followed by its ``eos``. :class:`DocumentOrder`
  keeps the documents' lengths and where each starts (O(documents), made once per process)
  and the epoch's table of where each slot ends (O(documents) a epoch, the last two kept); a
  window is then copied piece by piece out of the documents it covers, one flat index per part
  (numpy, no Python per document).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .._arrays import distinct
from ..columns.segments import segments
from ..order.permute import Permutation
from .tokens import TokenStream

__all__ = ["DocumentOrder", "epoch_offset"]

OFFSET_KEY = 0x4F464653  # "OFFS": keeps these draws apart from the loaders' own
ORDER_KEY = 0x444F4353  # "DOCS"
_KEEP = 2


def epoch_offset(seed: int, epoch: int, stride: int) -> int:
    """Where epoch ``epoch``'s windows start: uniform in ``[0, stride)``, from ``seed``."""
    return int(Permutation(stride, (seed, OFFSET_KEY, epoch))[np.zeros(1, np.int64)][0])


class DocumentOrder:
    """The documents of ``stream`` laid back to back in a per-epoch order (module doc)."""

    def __init__(self, stream: TokenStream, eos: bool, seed: int) -> None:
        self.stream, self.eos, self.seed = stream, eos, seed
        self._docs: tuple[np.ndarray, np.ndarray] | None = None
        self._epochs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()

    def documents(self) -> tuple[np.ndarray, np.ndarray]:
        """(each document's length, where it starts in its part's values): O(documents)."""
        if self._docs is None:
            lengths = self.stream.lengths()
            parts = range(len(self.stream.docs))
            starts = [self.stream.offsets(p)[:-1] for p in parts]
            self._docs = lengths, (np.concatenate(starts) if starts else lengths.copy())
        return self._docs

    def table(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Epoch ``epoch``'s (documents in order, where each one's slot ends in the stream)."""
        with self._lock:
            got = self._epochs.get(epoch)
            if got is None:
                lengths = self.documents()[0]
                n = len(lengths)
                order = Permutation(n, (self.seed, ORDER_KEY, epoch))[np.arange(n, dtype=np.int64)]
                got = order, np.cumsum(lengths[order] + int(self.eos))
                while len(self._epochs) >= _KEEP:
                    del self._epochs[next(iter(self._epochs))]
                self._epochs[epoch] = got
            return got

    def fill(
        self,
        rows: dict[str, np.ndarray],
        columns: Any,
        starts: np.ndarray,
        ends: np.ndarray,
        epoch: int,
        ids: tuple[str | None, str | None],
    ) -> None:
        """Write the windows ``[starts, ends)`` of epoch ``epoch``'s stream into ``rows``:
        ``columns(p)`` gives ``[(name, part p's values, its eos value)]``; ``ids``: the names
        of the document ids and positions rows to fill (None: not wanted)."""
        lengths, doc_start = self.documents()
        order, slot_end = self.table(epoch)
        b, length = next(iter(rows.values())).shape
        live = np.flatnonzero(ends > starts)
        k0 = np.searchsorted(slot_end, starts[live], side="right")
        k1 = np.searchsorted(slot_end, ends[live] - 1, side="right")
        count = k1 - k0 + 1
        slot = segments(k0, count, len(slot_end) + 1).astype(np.int64)
        row = np.repeat(live, count)
        doc = order[slot]
        slot_start = slot_end[slot] - lengths[doc] - int(self.eos)
        lo = np.maximum(starts[row], slot_start)
        hi = np.minimum(ends[row], slot_end[slot])
        at, n = lo - slot_start, hi - lo
        dst = row * length + (lo - starts[row])
        real = np.clip(np.minimum(hi, slot_start + lengths[doc]) - lo, 0, None)
        part = np.searchsorted(self.stream.doc_ends, doc, side="right")
        size = b * length
        for p in distinct(part).tolist():
            mine = np.flatnonzero(part == p)
            src = doc_start[doc[mine]] + at[mine]
            to = segments(dst[mine], real[mine], size)
            cut = mine[real[mine] < n[mine]]  # slots whose eos is in the window
            for name, values, eos in columns(p):
                flat = rows[name].reshape(-1)
                flat[to] = values[segments(src, real[mine], len(values))]
                if len(cut):
                    flat[dst[cut] + real[cut]] = eos
        where = segments(dst, n, size)
        doc_ids, positions = ids
        if doc_ids is not None:
            rows[doc_ids].reshape(-1)[where] = np.repeat(doc, n)
        if positions is not None:
            rows[positions].reshape(-1)[where] = segments(at, n, int(lengths.max(initial=0)) + 2)
        self.stream.recheck(distinct(part).tolist())

    def __getstate__(self) -> dict[str, Any]:
        # remade per process, from its own maps; a lock does not pickle
        return {**self.__dict__, "_docs": None, "_epochs": {}, "_lock": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
