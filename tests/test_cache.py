"""chute.cache: build once (across processes, under a lock that dies with its holder), reopen."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

import chute
from chute.errors import SchemaError, SourceError


def build_logged(log: Path, n: int = 10, delay: float = 0.0):
    def build():
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(delay)
        return {"x": np.arange(n)}

    return build


def test_builds_once_then_opens(tmp_path):
    log = tmp_path / "log"
    ds = chute.cache(tmp_path / "c.chute", build_logged(log), key="v1")
    assert len(ds) == 10 and ds.metadata["cache_key"] == "v1"
    again = chute.cache(tmp_path / "c.chute", build_logged(log), key="v1")
    np.testing.assert_array_equal(again[0:10]["x"].numpy(), np.arange(10))
    assert len(log.read_text().split()) == 1


def test_changed_key_rebuilds(tmp_path):
    log = tmp_path / "log"
    chute.cache(tmp_path / "c.chute", build_logged(log), key={"size": 10})
    ds = chute.cache(tmp_path / "c.chute", build_logged(log, n=4), key={"size": 4})
    assert len(ds) == 4 and len(log.read_text().split()) == 2
    with pytest.raises(SchemaError, match="JSON value"):
        chute.cache(tmp_path / "c.chute", build_logged(log), key=object())


@pytest.mark.timeout(60)  # a lock that fails to see its own holder waits forever
@pytest.mark.parametrize(
    "spelling", ["cache/tok.chute", "cache/../cache/tok.chute", "link/tok.chute"]
)
def test_relative_path_builds_under_its_own_lock(tmp_path, monkeypatch, spelling):
    """The lock ``cache`` takes and the one its writer takes are the same lock, however the
    path is spelled (relative, with ``..``, through a linked folder): the build re-enters it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cache").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "cache")
    log = tmp_path / "log"
    ds = chute.cache(spelling, build_logged(log), key="v1")
    assert len(ds) == 10 and ds.metadata["cache_key"] == "v1"
    ds = chute.cache(spelling, build_logged(log, n=4), key="v2")
    assert len(ds) == 4 and len(log.read_text().split()) == 2
    assert [p.name for p in (tmp_path / "cache").iterdir() if p.name.endswith(".lock")] == [
        ".tok.chute.lock"
    ]


def test_iterable_build_and_failure(tmp_path):
    def failing():
        yield {"x": 1}
        raise OSError("download interrupted")

    with pytest.raises(OSError, match="download interrupted"):
        chute.cache(tmp_path / "c.chute", failing)
    assert not (tmp_path / "c.chute").exists()
    ds = chute.cache(tmp_path / "c.chute", lambda: ({"x": i} for i in range(3)))
    assert [int(ds[i]["x"]) for i in range(3)] == [0, 1, 2]


def test_build_must_be_callable(tmp_path):
    with pytest.raises(SourceError, match=r"build must be a function .* got a dict; .*lambda"):
        chute.cache(tmp_path / "c.chute", {"x": np.arange(3)})
    assert not (tmp_path / "c.chute").exists() and not (tmp_path / ".c.chute.lock").exists()


def _rank(path, log, barrier):
    barrier.wait()
    ds = chute.cache(path, build_logged(log, delay=0.3), key="k")
    assert len(ds) == 10


def test_concurrent_ranks_build_once(tmp_path):
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(3)
    procs = [
        ctx.Process(target=_rank, args=(tmp_path / "c.chute", tmp_path / "log", barrier))
        for _ in range(3)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert len((tmp_path / "log").read_text().split()) == 1


def _die_while_building(path, started):
    def build():
        started.set()
        time.sleep(60)  # killed here, holding the lock

    chute.cache(path, build)


def test_lock_dies_with_its_holder(tmp_path):
    ctx = mp.get_context("fork")
    started = ctx.Event()
    holder = ctx.Process(target=_die_while_building, args=(tmp_path / "c.chute", started))
    holder.start()
    assert started.wait(30)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(10)
    t0 = time.monotonic()
    ds = chute.cache(tmp_path / "c.chute", build_logged(tmp_path / "log"))
    assert len(ds) == 10 and time.monotonic() - t0 < 10
