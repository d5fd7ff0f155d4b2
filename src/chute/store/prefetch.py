"""Fetch the parts a reader will need next, in the order it needs them, a bounded number
ahead, on background threads.

chute's order is a pure function of (seed, epoch, rank, world size), so a rank knows the
sequence of parts it will read before it reads them. :class:`Prefetcher` takes that sequence
(an iterator, consumed lazily) and a ``fetch(part)`` function (download and pin, e.g.
``RemoteCache.pin_part``); it keeps ``ahead`` fetches running or done beyond the part being
read (the first fetch runs alone: the reader waits for it, and fetches beside it would take
its bandwidth; the next ones are given out but wait for it), and hands the results out in
order. A reader that needs a part being fetched waits for it (:meth:`Prefetcher.wait`)
rather than fetching it beside. The part handed out before is released
(``release``, e.g. ``Pin.release``) when the next one is asked for, so at most ``ahead + 1``
parts are pinned by one reader: that is the ``in_flight`` to pass to ``RemoteCache.check_limit``.

A failed fetch raises its error when its part is asked for, not before, and never hangs: the
fetch itself is bounded (the store's retries). :meth:`Prefetcher.close` cancels what has not
started, waits for running fetches and releases every result not handed out.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from ..errors import ArgumentError

P = TypeVar("P")
R = TypeVar("R")


class Prefetcher(Generic[P, R]):
    """``for part, result in Prefetcher(order, fetch, ahead=2, release=...)``: each part of
    ``order`` with ``fetch(part)``, fetched up to ``ahead`` parts early on ``workers``
    threads (default ``ahead``). ``release(result)`` is called on the previous result when
    the next is asked for, and on every result not handed out at :meth:`close`."""

    def __init__(
        self,
        order: Iterable[P],
        fetch: Callable[[P], R],
        *,
        ahead: int = 2,
        workers: int | None = None,
        release: Callable[[R], Any] | None = None,
    ):
        if not isinstance(ahead, int) or ahead < 0:
            raise ArgumentError(f"ahead must be an int >= 0, got {ahead!r}")
        self.ahead = ahead
        self._order = iter(order)
        self._fetch = fetch
        self._release = release
        self._pool = ThreadPoolExecutor(max(1, workers or ahead), "chute-prefetch")
        self._pending: collections.deque[tuple[P, Future[R]]] = collections.deque()
        self._current: R | None = None
        self._has_current = False
        self._closed = False
        self._lock = threading.Lock()
        self._first_done = threading.Event()  # the fetches after the first wait for it
        self._started = False  # a fetch was given out
        self._fill()

    def _fill(self) -> None:
        while len(self._pending) < self.ahead:
            try:
                part = next(self._order)
            except StopIteration:
                return
            first, self._started = not self._started, True
            self._pending.append((part, self._pool.submit(self._run, part, first)))

    def _run(self, part: P, first: bool) -> R:
        if not first:
            self._first_done.wait()  # set by the first fetch, or by close()
        try:
            return self._fetch(part)
        finally:
            if first:
                self._first_done.set()

    def wait(self, part: P) -> None:
        """Wait until the fetch of ``part``, if it is given out and not handed over, is done
        (its result or error is for ``__next__``); at once otherwise."""
        with self._lock:
            futures = [f for p, f in self._pending if p == part]
        for f in futures:
            with contextlib.suppress(CancelledError):  # close() dropped it
                f.exception()  # waits; never raises the fetch's error

    def _drop_current(self) -> None:
        if self._has_current:
            current, self._current, self._has_current = self._current, None, False
            if self._release is not None:
                self._release(current)  # type: ignore[arg-type]

    def __iter__(self) -> Prefetcher[P, R]:
        return self

    def __next__(self) -> tuple[P, R]:
        with self._lock:
            if self._closed:
                raise StopIteration
            self._drop_current()
            if not self._pending:
                try:  # ahead == 0: fetch in the caller's thread
                    part = next(self._order)
                except StopIteration:
                    self.close()
                    raise
                result = self._fetch(part)
            else:
                part, future = self._pending.popleft()
                self._fill()
                result = future.result()  # the fetch's error, raised for the part it is
            self._current, self._has_current = result, True
            return part, result

    def ready(self) -> bool:
        """Whether :meth:`__next__` would return (or raise) without waiting for a fetch."""
        with self._lock:
            return self._closed or not self._pending or self._pending[0][1].done()

    def close(self) -> None:
        """Stop: cancel fetches not started, wait for running ones, release all results
        (the last one handed out too). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._first_done.set()  # a fetch waiting for the first one starts (or is cancelled)
        self._drop_current()
        pending, self._pending = list(self._pending), collections.deque()
        for _, future in pending:
            future.cancel()
        self._pool.shutdown(wait=True)
        for _, future in pending:
            if future.cancelled() or future.exception() is not None:
                continue
            if self._release is not None:
                self._release(future.result())

    def __enter__(self) -> Prefetcher[P, R]:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self._pool.shutdown(wait=False, cancel_futures=True)
