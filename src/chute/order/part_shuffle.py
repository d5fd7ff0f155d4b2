"""The part-aware shuffle (``Loader(shuffle="parts")``): each rank reads its own share of
the parts, for datasets whose parts are fetched (object storage) or slow to seek.

The epoch's global order, for ``world`` ranks and batches of ``batch``: the parts are
shuffled, then dealt to the ranks, each part to the rank with the fewest samples so far
(ranks get the same number of samples to within one part). A rank's stream is its parts'
samples shuffled within a sliding window of ``window`` parts: the samples of its ``k``-th
part are shuffled and cut into ``window`` equal slices, slice ``d`` going to stretch
``k + d`` of the stream, and each stretch is shuffled. So a sample moves at most ``window``
parts from where its part starts, a batch draws from at most ``window`` (at a stretch's
edge ``window + 1``) consecutive parts, and the stream's first stretch needs the rank's first
part alone: the first batches wait for one part, not a window of them. Global step ``j``
then gives rank ``r`` the ``j``-th ``batch`` samples of stream ``r`` (the Order's usual
split of a step into contiguous rank slices), for as many steps as the shortest stream
fills; the samples left over (at most about one part per rank) end the epoch, split the
usual way.

So it is a permutation of the samples like any global order: every sample once per epoch,
equal steps per rank, and ``state_dict`` / resume exact. Like the other orders it is never
materialised: :class:`PartPermutation` maps positions to samples with tables of O(parts)
(the deal of parts to ranks, slice and stretch sizes) and the few stretches being read (each
about one part of samples, at most ``_Stream.MADE``). The order depends on ``(world,
batch)`` as well as the seed and epoch: the Order records the pair an epoch started with, and
a job resumed with another world size or batch size finishes that epoch in its order (each
rank then reads from every part, for the rest of that epoch only).
"""

from __future__ import annotations

import bisect
import heapq
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._arrays import distinct
from ..errors import ArgumentValueError
from .permute import Permutation


class PartPermutation:
    """Position -> sample of the part-aware order of one epoch, for ``world`` ranks taking
    ``batch`` samples a step (see the module docstring). Computed for any positions directly:
    tables of O(parts), a batch looked up in O(batch); nothing of size ``n`` is built."""

    def __init__(
        self, sizes: Sequence[int], batch: int, world: int, window: int, seed: int, epoch: int
    ) -> None:
        counts = np.asarray(sizes, np.int64)
        starts = np.cumsum(counts) - counts
        self.n, self.batch, self.world = int(counts.sum()), batch, world
        owned: list[list[int]] = [[] for _ in range(world)]
        loads = [(0, r) for r in range(world)]  # (samples so far, rank): the fewest first
        shuffled = Permutation(len(counts), (seed, epoch, 3))[np.arange(len(counts))]
        for p in shuffled.tolist():
            load, r = heapq.heappop(loads)
            owned[r].append(p)
            heapq.heappush(loads, (load + int(counts[p]), r))
        self.streams = [
            _Stream(np.array(parts, np.int64), counts, starts, window, (seed, epoch, r))
            for r, parts in enumerate(owned)
        ]
        lengths = np.array([s.length for s in self.streams], np.int64)
        self.steps = int(lengths.min()) // batch
        self.head = self.steps * batch * world  # positions laid out step by step
        tails = lengths - self.steps * batch  # the rest, rank after rank
        self.tail_starts = self.head + np.cumsum(tails) - tails

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, positions: Any) -> np.ndarray:
        p = np.asarray(positions, dtype=np.int64)
        run = self._run(p)
        if run is not None:  # a batch of the plan: one rank's consecutive stream positions
            r, a = run
            return self.streams[r].run(a, a + len(p))
        rank, i = np.empty_like(p), np.empty_like(p)
        head = p < self.head
        step, within = np.divmod(p[head], self.batch * self.world)
        rank[head] = within // self.batch
        i[head] = step * self.batch + within % self.batch
        tail = p[~head]
        owner = np.searchsorted(self.tail_starts, tail, side="right") - 1
        rank[~head] = owner
        i[~head] = self.steps * self.batch + tail - self.tail_starts[owner]
        out = np.empty_like(p)
        for r in distinct(rank).tolist():  # a batch is one rank's, or a few in the tail
            at = rank == r
            out[at] = self.streams[r][i[at]]
        return out

    def _run(self, p: np.ndarray) -> tuple[int, int] | None:
        """(rank, first stream position) when positions ``p`` are consecutive and lie in one
        rank's slice of one step; else None."""
        if p.ndim != 1 or not len(p) or int(p[-1]) >= self.head:
            return None
        first = int(p[0])
        if first < 0 or int(p[-1]) - first != len(p) - 1 or not (np.diff(p) == 1).all():
            return None
        step, within = divmod(first, self.batch * self.world)
        r, at = divmod(within, self.batch)
        if at + len(p) > self.batch:
            return None
        return r, step * self.batch + at


class _Stream:
    """One rank's stream: the samples of ``parts`` (in this order) shuffled within a sliding
    window of ``window`` parts. Part ``k``'s samples, permuted, are cut into ``window``
    slices (sizes as ``np.array_split``); slice ``d`` goes to stretch ``k + d``; each stretch
    is permuted. ``stream[i]`` for positions ``i`` of the stream. A stretch (about one part
    of samples) is made whole when first looked up, with numpy's permutations, and the last
    few are kept, as a batch lies in one stretch or two and the stretches come in order; a
    part or stretch of more than ``MADE`` samples is permuted by a Feistel
    :class:`~chute.order.permute.Permutation` instead, a lookup at a time (O(batch) memory)."""

    KEEP = 4  # stretches kept made
    MADE = 1 << 20  # samples of a stretch made whole (8 MiB); larger ones are computed lazily

    def __init__(
        self,
        parts: np.ndarray,
        counts: np.ndarray,
        starts: np.ndarray,
        window: int,
        key: tuple[int, ...],
    ) -> None:
        self.parts, self.counts, self.starts = parts, counts, starts
        self.window, self.key = window, key
        n = counts[parts]
        self.length = int(n.sum())
        d = np.arange(window)
        self.slices = n[:, None] // window + (d[None, :] < (n % window)[:, None])  # (K, window)
        self.slice_starts = np.cumsum(self.slices, axis=1) - self.slices
        sizes = np.zeros(len(parts) + window - 1 if len(parts) else 0, np.int64)
        for j in range(window if len(parts) else 0):
            sizes[j : j + len(parts)] += self.slices[:, j]
        self.sizes = sizes
        self.stretch_starts = np.cumsum(sizes) - sizes
        self._starts, self._sizes = self.stretch_starts.tolist(), sizes.tolist()  # for run()
        self._made: dict[int, np.ndarray] = {}  # stretch -> its samples
        self._perms: dict[int, np.ndarray] = {}  # part -> its permutation
        self._lock = threading.Lock()

    def __getitem__(self, i: np.ndarray) -> np.ndarray:
        m = np.searchsorted(self.stretch_starts, i, side="right") - 1
        j = i - self.stretch_starts[m]
        out = np.empty_like(i)
        for s in distinct(m).tolist():  # a batch lies in one stretch, or two
            at = m == s
            out[at] = self._in_stretch(s, j[at])
        return out

    def _in_stretch(self, s: int, j: np.ndarray) -> np.ndarray:
        """Samples at offsets ``j`` of stretch ``s``, made whole or computed lazily."""
        if self._sizes[s] <= self.MADE:
            return self._made_stretch(s)[j]
        return self._lazy_stretch(s, j)

    def run(self, a: int, b: int) -> np.ndarray:
        """The samples at stream positions ``a .. b - 1`` (a slice of one stretch or two)."""
        out = []
        starts, sizes = self._starts, self._sizes
        s = bisect.bisect_right(starts, a) - 1
        while a < b:
            end = min(b, starts[s] + sizes[s])
            if end > a:
                out.append(self._in_stretch(s, np.arange(a - starts[s], end - starts[s])))
                a = end
            s += 1
        return np.concatenate(out) if len(out) != 1 else out[0]

    def _pieces(self, s: int) -> list[tuple[int, int, int]]:
        """(part, first, count): the slices of stretch ``s``, each a range of positions of
        its part's permutation."""
        ks = range(max(0, s - self.window + 1), min(s, len(self.parts) - 1) + 1)
        return [
            (int(self.parts[k]), int(self.slice_starts[k, s - k]), int(self.slices[k, s - k]))
            for k in ks
        ]

    def _part(self, part: int, positions: np.ndarray) -> np.ndarray:
        """Samples at ``positions`` of part ``part``'s permutation: numpy's (made, and the
        last few kept) for a part of at most ``MADE`` samples, else a Feistel one (lazy)."""
        n = int(self.counts[part])
        key = (self.key[0], self.key[1], 5, part)
        if n > self.MADE:
            return self.starts[part] + Permutation(n, key)[positions]
        with self._lock:
            perm = self._perms.get(part)
        if perm is None:
            perm = np.random.default_rng(list(key)).permutation(n)
            with self._lock:
                _keep(self._perms, part, perm, 2 * self.window)
        return self.starts[part] + perm[positions]

    def _made_stretch(self, s: int) -> np.ndarray:
        """The samples of stretch ``s`` (at most ``MADE``), in stream order; the last few
        are kept (the next lookups index them)."""
        with self._lock:
            got = self._made.get(s)
        if got is not None:
            return got
        pieces = [self._part(p, np.arange(a, a + c)) for p, a, c in self._pieces(s)]
        got = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
        np.random.default_rng([*self.key, 4, s]).shuffle(got)
        with self._lock:
            _keep(self._made, s, got, self.KEEP)
        return got

    def _lazy_stretch(self, s: int, j: np.ndarray) -> np.ndarray:
        """Samples at offsets ``j`` of stretch ``s`` (more than ``MADE``), computed alone."""
        q = Permutation(int(self.sizes[s]), (*self.key, 4, s))[j]
        pieces = self._pieces(s)
        counts = np.array([c for _, _, c in pieces], np.int64)
        ends = np.cumsum(counts)
        which = np.searchsorted(ends, q, side="right")  # the slice each offset falls in
        out = np.empty_like(q)
        for w in distinct(which).tolist():
            at = which == w
            part, a, c = pieces[w]
            out[at] = self._part(part, a + q[at] - (ends[w] - c))
        return out


def _keep(cache: dict[int, np.ndarray], key: int, value: np.ndarray, most: int) -> None:
    """``cache[key] = value``, dropping the oldest entries beyond ``most``."""
    cache[key] = value
    while len(cache) > most:
        cache.pop(next(iter(cache)))


PARTS_WINDOW = 2  # the sliding window, in parts (a reader keeps 2 mapped, 2 prefetched)


def order_options(ds: Any, shuffle: bool | str) -> dict[str, Any]:
    """The :class:`~chute.order.Order` keywords of a loader's ``shuffle``: for ``"parts"``
    the samples per part of ``ds`` (a chute Dataset), else none."""
    if shuffle != "parts":
        if isinstance(shuffle, str):
            raise ArgumentValueError(f"shuffle is True, False or 'parts', got {shuffle!r}")
        return {}
    parts = getattr(ds, "parts", None)
    if parts is None:
        raise ArgumentValueError(
            f"shuffle='parts' needs a chute Dataset (its parts), not {type(ds).__name__}; "
            "a Subset or a mix is shuffled with shuffle=True"
        )
    return {"parts": [p.num_samples for p in parts], "window": PARTS_WINDOW}
