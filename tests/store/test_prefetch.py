"""The prefetcher and the part feed (chute/store/prefetch.py, parts.py): order, bounds, the
first fetch alone, hand-over without waiting, errors at their part. Fetches are plain
functions here (no server): what is tested is the scheduling."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from chute.store import Prefetcher
from chute.store.locks import Pin
from chute.store.parts import PartFeed


class Recorder:
    """A fetch that records how many run at once, and waits for ``gate`` when given."""

    def __init__(self, gate: threading.Event | None = None, fail: int | None = None):
        self.gate, self.fail = gate, fail
        self.running = self.peak = 0
        self.first_alone = None
        self.started: list[int] = []
        self.released: list[int] = []
        self.lock = threading.Lock()

    def fetch(self, part: int) -> int:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.started.append(part)
        try:
            if self.gate is not None and part != 0:
                self.gate.wait(5)
            time.sleep(0.02)
            if part == self.fail:
                raise OSError(f"part {part} failed")
            with self.lock:
                if part == 0:
                    self.first_alone = self.running == 1
            return part
        finally:
            with self.lock:
                self.running -= 1

    def release(self, part: int) -> None:
        self.released.append(part)


def test_in_order_bounded_first_alone_and_released():
    rec = Recorder()
    with Prefetcher(range(8), rec.fetch, ahead=3, release=rec.release) as pf:
        got = [part for part, _ in pf]
    assert got == list(range(8))
    assert rec.first_alone  # the reader waits for part 0: nothing beside it
    assert rec.peak <= 3
    assert sorted(rec.released) == list(range(8))  # each result released once


def test_error_raised_for_its_part_and_close_releases_the_rest():
    rec = Recorder(fail=2)
    pf = Prefetcher(range(6), rec.fetch, ahead=2, release=rec.release)
    assert [next(pf)[0], next(pf)[0]] == [0, 1]
    with pytest.raises(OSError, match="part 2"):
        next(pf)
    pf.close()
    assert set(rec.released) <= set(range(6)) - {2}
    assert 0 in rec.released and 1 in rec.released


def test_feed_hands_over_without_waiting():
    """A reader of part 0 is not held up by part 1 still downloading: reached() returns at
    once and hands part 1 over on a later call."""
    gate = threading.Event()
    rec = Recorder(gate=gate)

    def pin(part: int) -> Pin:
        rec.fetch(part)
        return Pin([], [])  # pins nothing: no cache here

    batches = [np.array([0, 1]), np.array([2, 3]), np.array([4, 5])]  # parts 0, 1, 2
    # ahead=1: part 1 is fetched once part 0 is handed over, part 2 only after part 1 (with
    # ahead=2 parts 1 and 2 both wait for part 0, then start in either order: CI saw [0, 2])
    feed = PartFeed(batches, lambda idx: [int(idx[0]) // 2], pin, ahead=1)
    try:
        deadline = time.monotonic() + 5
        while rec.started[-1:] != [1] and time.monotonic() < deadline:
            time.sleep(0.01)
            feed.reached([0])  # part 0 done: handed over, which starts part 1
        t = time.perf_counter()
        feed.reached([1])  # part 1 waits for the gate: not ready, so no wait here
        assert time.perf_counter() - t < 0.5
        gate.set()
    finally:
        feed.close()
    assert rec.started[:2] == [0, 1]


def test_wait_for_a_part_being_fetched_and_close_while_waiting():
    gate = threading.Event()
    rec = Recorder(gate=gate)
    pf = Prefetcher(range(4), rec.fetch, ahead=2)
    t = time.perf_counter()
    pf.wait(0)  # the first fetch: done after its ~20 ms
    assert time.perf_counter() - t >= 0.015 and rec.started[0] == 0
    pf.wait(7)  # not given out: at once
    waiter = threading.Thread(target=pf.wait, args=(1,))  # gated until `gate`
    waiter.start()
    waiter.join(0.1)
    assert waiter.is_alive()  # still waiting for part 1
    gate.set()
    waiter.join(5)
    assert not waiter.is_alive()
    pf.close()
    pf.wait(2)  # after close: nothing pending, no CancelledError
