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

_PLAN_CACHE = 1 << 22  # index values a Plan keeps of the batches it computed (32 MB)


class Plan(Sequence[np.ndarray]):
    """One rank's remaining batches of one epoch (what :meth:`Order.plan` returns): a sequence
    of read-only int64 index arrays, batch ``j`` computed when ``plan[j]`` is asked for, from
    ``lookup(positions)`` (the epoch's global order at those positions). Recently computed
    batches are kept (up to :data:`_PLAN_CACHE` indices), as a loader asks for a batch more
    than once (to gather it, then to count it). Thread-safe."""

    def __init__(
        self,
        lookup: Callable[[np.ndarray], np.ndarray],
        n: int,
        start: int,
        batch_size: int,
        rank: int,
        world_size: int,
        drop_last: bool,
    ) -> None:
        self._lookup = lookup
        self._n, self._start, self._bs, self._rank = n, start, batch_size, rank
        self._step = batch_size * world_size
        self._full = (n - start) // self._step
        rest = n - start - self._full * self._step
        self._share = math.ceil(rest / world_size) if rest and not drop_last else 0
        self._len = self._full + (1 if self._share else 0)
        self._kept: OrderedDict[int, np.ndarray] = OrderedDict()
        self._kept_size = 0
        self._lock = threading.Lock()

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
        with self._lock:
            idx = self._kept.get(k)
        if idx is not None:
            return idx
        if k < self._full:
            first = self._start + k * self._step + self._rank * self._bs
            pos = np.arange(first, first + self._bs, dtype=np.int64)
        else:  # the short last step; positions past the end wrap to the start: the padding
            first = self._start + self._full * self._step + self._rank * self._share
            pos = np.arange(first, first + self._share, dtype=np.int64) % self._n
        idx = np.asarray(self._lookup(pos), dtype=np.int64)  # fresh: each lookup makes one
        idx.setflags(write=False)
        with self._lock:
            self._kept[k] = idx
            self._kept_size += len(idx)
            while self._kept_size > _PLAN_CACHE and len(self._kept) > 1:
                self._kept_size -= len(self._kept.popitem(last=False)[1])
        return idx

    def __iter__(self) -> Iterator[np.ndarray]:
        for k in range(self._len):
            yield self[k]
