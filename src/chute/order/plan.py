"""The batches one rank reads in one epoch, each computed when asked for (what
:meth:`chute.Order.plan` returns)."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import overload

import numpy as np

from ..errors import SampleIndexError

CHUNK = 1 << 15  # positions looked up at once (~5 us a batch of 256 for a Feistel order)
FIRST_CHUNK = 1 << 12  # positions of the first chunk: what a pass's first batch waits for
_KEEP = 4  # chunks a Plan keeps (each CHUNK int64 indices: 1 MB in all)


class Plan(Sequence[np.ndarray]):
    """One rank's remaining batches of one epoch (what :meth:`Order.plan` returns): a sequence
    of read-only int64 index arrays, batch ``j`` computed when ``plan[j]`` is asked for, from
    ``lookup(positions)`` (the epoch's global order at those positions). Thread-safe.

    Batches are looked up a chunk at a time: the positions of ``~CHUNK / batch_size``
    consecutive batches of this rank in one ``lookup`` call. A lazy order costs a few ns a
    position on arrays of thousands and ~1 us on arrays of 256 (numpy's per-call overhead
    times the Feistel rounds), so a batch looked up alone would cost more than its gather.
    The first chunk is smaller (:data:`FIRST_CHUNK` positions): a pass's first batch waits
    for it alone, and a loader's threads gather from it while one of them looks up the next
    (shuffled token documents, 118 batches a pass: the Loader with 1 thread 1.17x as fast, 2
    threads 1.035x, as with a first chunk of the whole pass). The last :data:`_KEEP` chunks
    are kept: a loader asks for a batch more than once (to gather it, then to count it), and
    its threads read neighbouring batches. ``prepare``, if given, is called with each chunk's
    indices once computed (a Gatherable's ``prepare``: see :attr:`chute.order.Order.prepare`).
    """

    def __init__(
        self,
        lookup: Callable[[np.ndarray], np.ndarray],
        n: int,
        start: int,
        batch_size: int,
        rank: int,
        world_size: int,
        drop_last: bool,
        prepare: Callable[[np.ndarray], object] | None = None,
    ) -> None:
        self._lookup, self._prepare = lookup, prepare
        self._n, self._start, self._bs, self._rank = n, start, batch_size, rank
        self._step = batch_size * world_size
        self._full = (n - start) // self._step
        rest = n - start - self._full * self._step
        self._share = math.ceil(rest / world_size) if rest and not drop_last else 0
        self._len = self._full + (1 if self._share else 0)
        self._per_chunk = max(1, CHUNK // batch_size)
        self._first = min(self._per_chunk, max(1, FIRST_CHUNK // batch_size))  # chunk 0's
        self._chunks: OrderedDict[int, list[np.ndarray]] = OrderedDict()  # oldest first
        self._last: tuple[int, list[np.ndarray]] = (-1, [])  # the chunk asked for last
        self._lock = threading.Lock()  # held while a chunk is computed: others need it too

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, j: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, j: slice) -> list[np.ndarray]: ...

    def __getitem__(self, j: int | slice) -> np.ndarray | list[np.ndarray]:
        if isinstance(j, slice):
            return [self[k] for k in range(*j.indices(self._len))]
        k = int(j) + (self._len if j < 0 else 0)
        if not 0 <= k < self._len:
            raise SampleIndexError(f"batch {j} is out of range for a plan of {self._len}")
        if k < self._first:
            c, i = 0, k
        else:  # chunk c >= 1: batches first + (c - 1) * per_chunk onwards
            c, i = divmod(k - self._first, self._per_chunk)
            c += 1
        last = self._last  # one read: another thread may replace it, never half-way
        if last[0] == c:
            return last[1][i]
        with self._lock:
            rows = self._chunks.get(c)
            if rows is None:
                rows = self._chunks[c] = self._compute(c)
                if len(self._chunks) > _KEEP:
                    self._chunks.popitem(last=False)
            self._last = (c, rows)
        return rows[i]

    def _compute(self, c: int) -> list[np.ndarray]:
        """The batches of chunk ``c``, from one lookup of their positions (two with the short
        last step)."""
        return self.rows(self._chunk_start(c), min(self._chunk_start(c + 1), self._len))

    def _chunk_start(self, c: int) -> int:
        """The first batch of chunk ``c``: 0, then ``first`` and every ``per_chunk`` after."""
        return 0 if c == 0 else self._first + (c - 1) * self._per_chunk

    def rows(self, a: int, b: int) -> list[np.ndarray]:
        """Batches ``a`` to ``b`` (``0 <= a <= b <= len``), computed now from one lookup of
        their positions (two with the short last step), not kept: for a process that reads
        only some batches of the plan (``chute/loader/streams.py``)."""
        rows: list[np.ndarray] = []
        full = min(b, self._full)
        if a < full:
            firsts = self._start + np.arange(a, full, dtype=np.int64) * self._step
            pos = (firsts + self._rank * self._bs)[:, None] + np.arange(self._bs, dtype=np.int64)
            idx = np.asarray(self._lookup(pos.ravel()), dtype=np.int64).reshape(pos.shape)
            idx.setflags(write=False)
            rows.extend(idx)
        if a <= self._full < b:  # the short last step; positions past the end wrap to the start
            first = self._start + self._full * self._step + self._rank * self._share
            pos = np.arange(first, first + self._share, dtype=np.int64) % self._n
            idx = np.array(self._lookup(pos), dtype=np.int64)
            idx.setflags(write=False)
            rows.append(idx)
        if self._prepare is not None and rows:
            self._prepare(np.concatenate(rows))
        return rows

    def __iter__(self) -> Iterator[np.ndarray]:
        for k in range(self._len):
            yield self[k]
