"""What a reader of a remote dataset holds: the parts it will read next (:class:`PartFeed`)
and the parts it has mapped (:class:`HeldParts`).

A part's files are pinned in the cache (:meth:`RemoteCache.pin_part`) while they are used,
so no process evicts them. Two kinds of use, each bounded, so that the cache holds at most
``ahead + keep`` parts per reading process beyond what it may evict:

- :class:`PartFeed`: the coming batches of a pass (the loader's plan) give the sequence of
  parts in the order they are first needed (each batch's parts that the batch before did not
  touch); a :class:`~chute.store.prefetch.Prefetcher` downloads them ``ahead`` parts early.
  The reader reports which parts it reads (:meth:`PartFeed.reached`): the feed hands the
  parts fetched up to those over (releasing older ones), which starts the next fetches. A
  reader that reads parts out of the feed's window (random access) simply fetches them
  itself; the feed then waits, it never runs further ahead than ``ahead`` parts.
- :class:`HeldParts`: the parts whose files are memory-mapped by this process, at most
  ``keep`` (least recently mapped dropped first: ``on_drop`` lets the dataset forget its
  maps of it, and its pin is released).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from .locks import Pin
from .prefetch import Prefetcher


class PartFeed:
    """Prefetch, in order and ``ahead`` parts early, the parts of ``batches`` (index arrays;
    ``parts_of(indices)`` -> the sorted part numbers they hit) with ``fetch(part)`` -> a
    :class:`Pin`. :meth:`close` releases everything (also done by the loader's pass end)."""

    def __init__(
        self,
        batches: Iterable[np.ndarray],
        parts_of: Callable[[np.ndarray], Iterable[int]],
        fetch: Callable[[int], Pin],
        *,
        ahead: int = 2,
    ):
        self._window: collections.deque[int] = collections.deque()  # fetched, not handed over
        self._parts_of = parts_of
        self._lock = threading.Lock()
        self.closed = False
        self._prefetcher: Prefetcher[int, Pin] = Prefetcher(
            self._sequence(batches, parts_of), fetch, ahead=ahead, release=Pin.release
        )

    def _sequence(
        self, batches: Iterable[np.ndarray], parts_of: Callable[[np.ndarray], Iterable[int]]
    ) -> Iterator[int]:
        previous: set[int] = set()
        for idx in batches:
            parts = [int(p) for p in parts_of(idx)]
            for p in parts:
                if p not in previous:
                    self._window.append(p)  # pulled by the prefetcher: now being fetched
                    yield p
            previous = set(parts)

    def at(self, indices: np.ndarray) -> None:
        """The reader now reads the batch ``indices``: :meth:`reached` with its parts, then
        wait for those of them being fetched (rather than fetching them beside)."""
        parts = [int(p) for p in self._parts_of(indices)]
        self.reached(parts)
        for p in parts:
            self._prefetcher.wait(p)

    def reached(self, parts: Iterable[int]) -> None:
        """The reader now reads ``parts``: hand over the parts fetched so far, in order, up
        to the last of them in the window, which starts the next fetches. It never waits:
        a part still downloading is handed over by a later call (the reader's own pin waits
        for that download). A failed download raises here, for the batch that needs it."""
        want = set(parts)
        with self._lock:
            if self.closed:
                return
            last = max((k for k, p in enumerate(self._window) if p in want), default=-1)
            for _ in range(last + 1):
                if not self._prefetcher.ready():
                    return
                self._window.popleft()
                next(self._prefetcher, None)

    def close(self) -> None:
        """Stop fetching and release every pin (idempotent)."""
        with self._lock:
            self.closed = True
            self._window.clear()
        self._prefetcher.close()

    def __enter__(self) -> PartFeed:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class HeldParts:
    """Pins of the parts this process has mapped, at most ``keep`` (None: unbounded, and
    nothing is held: without a cache limit nothing is evicted). Holding a part beyond
    ``keep`` drops the least recently held one: ``on_drop(part)`` is called, then its pin is
    released."""

    def __init__(self, keep: int | None, on_drop: Callable[[int], Any]):
        self.keep = keep
        self.on_drop = on_drop
        self._pins: collections.OrderedDict[int, Pin] = collections.OrderedDict()
        self._lock = threading.Lock()

    def hold(self, part: int, pin: Pin) -> None:
        """Keep ``pin`` (of ``part``, just mapped) until dropped; releases it at once when
        nothing is held."""
        if self.keep is None:
            pin.release()
            return
        dropped: list[tuple[int, Pin]] = []
        with self._lock:
            old = self._pins.pop(part, None)
            self._pins[part] = pin
            while len(self._pins) > self.keep:
                dropped.append(self._pins.popitem(last=False))
        if old is not None:
            old.release()
        for p, pin_ in dropped:
            self.on_drop(p)
            pin_.release()

    def release_all(self) -> None:
        with self._lock:
            pins, self._pins = list(self._pins.values()), collections.OrderedDict()
        for pin in pins:
            pin.release()
