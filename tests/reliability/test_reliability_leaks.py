"""Open/iterate/close cycles: file descriptors, memory maps, threads and RSS return to baseline.

A training job opens datasets for weeks (every epoch, every evaluation, every worker); a few
bytes or one descriptor leaked per open is an outage after enough epochs.
"""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import numpy as np
import pytest
from _reliability import mapped_regions, open_fds, record, rss_bytes

import chute

pytestmark = pytest.mark.slow  # the fault harness: real processes, signals, fuzzing

RSS_SLACK = 6 << 20  # allocator noise; a 1 KB leak per cycle would be 10 MB


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "t.chute"
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    return chute.write(path, {"x": x, "t": [np.arange(i, dtype=np.int32) for i in range(4)]})


def _levels() -> tuple[int, int, int, int]:
    gc.collect()
    return open_fds(), mapped_regions(), threading.active_count(), rss_bytes()


def _cycles(fn, n: int) -> dict[str, int]:
    for _ in range(min(n // 10, 500)):  # warm-up: caches, allocator arenas, lazy imports
        fn()
    fds, maps, threads, rss = _levels()
    for _ in range(n):
        fn()
    fds2, maps2, threads2, rss2 = _levels()
    # (<=: a thread or pipe of an earlier test may end meanwhile; a leak adds one per cycle)
    assert fds2 <= fds, f"{fds2 - fds} file descriptors leaked in {n} cycles"
    assert maps2 - maps <= 4, f"{maps2 - maps} memory maps leaked in {n} cycles"
    assert threads2 <= threads, f"{threads2 - threads} threads left running after {n} cycles"
    assert rss2 - rss < RSS_SLACK, f"RSS grew by {(rss2 - rss) >> 20} MB in {n} cycles"
    return {"fds": fds2 - fds, "maps": maps2 - maps, "rss_kb": (rss2 - rss) >> 10}


def test_open_iterate_close_cycles(tiny: Path, record_property) -> None:
    def cycle() -> None:
        with chute.open(tiny) as ds:
            ds.gather(np.arange(len(ds)))
            ds[0], ds[1:3]

    got = _cycles(cycle, 10_000)
    record(
        record_property,
        "open/iterate/close cycles",
        "10,000 x (open, gather all, index, slice, close); tiny 2-field dataset",
        10_000,
        f"fds +{got['fds']}, maps +{got['maps']}, RSS {got['rss_kb']:+d} KB: back to baseline",
    )


def test_loader_cycles(tiny: Path, record_property) -> None:
    """Each cycle starts and stops 2 worker threads and a ring of buffers; half the cycles
    stop early (``break``), which must stop the workers too."""
    k = 0

    def cycle() -> None:
        nonlocal k
        k += 1
        ds = chute.open(tiny)
        for _ in chute.Loader(ds, batch_size=1, num_workers=2, shuffle=True, seed=k):
            if k % 2:
                break
        ds.close()

    got = _cycles(cycle, 1_000)
    record(
        record_property,
        "open/iterate/close cycles",
        "1,000 x (open, Loader with 2 threads: full epoch or break after one batch, close)",
        1_000,
        f"fds +{got['fds']}, threads back, RSS {got['rss_kb']:+d} KB: back to baseline",
    )
