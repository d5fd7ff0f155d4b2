"""Loader faults: a worker that raises or dies ends the loop with an error that names it,
within a bounded time; bad arguments fail at construction, not mid-epoch."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from _reliability import record

import chute

pytestmark = pytest.mark.slow  # the fault harness: real processes, signals, fuzzing

BOUND_S = 10.0  # the error must reach the loop this fast (it takes milliseconds)


@pytest.fixture(scope="module")
def ds_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("loader") / "d.chute"
    n = 64
    return chute.write(
        path,
        {
            "x": np.arange(n * 4, dtype=np.float32).reshape(n, 4),
            "t": [np.arange(i % 5, dtype=np.int64) for i in range(n)],
        },
    )


class Boom(Exception):
    pass


def _loader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("chute-loader")]


@pytest.fixture(scope="module")
def fixed_path(tmp_path_factory) -> Path:
    """Fixed-shape fields only: the Loader gathers several small batches per work item."""
    path = tmp_path_factory.mktemp("loader") / "f.chute"
    return chute.write(path, {"x": np.arange(64 * 4, dtype=np.float32).reshape(64, 4)})


@pytest.mark.parametrize("workers", [0, 1, 2, 4])
@pytest.mark.parametrize("data", ["mixed", "fixed"])
def test_worker_thread_raising(
    ds_path: Path, fixed_path: Path, data: str, workers: int, record_property
) -> None:
    """The transform raises on one batch (first, middle, last; a plain Exception, and a
    BaseException such as SystemExit): the loop gets WorkerError naming the worker and the
    batch, the original exception as its cause, every batch before it intact, and no worker
    thread left running. With fixed fields only, batches are gathered in groups."""
    ds = chute.open(ds_path if data == "mixed" else fixed_path)
    outcomes: Counter = Counter()
    n_batches = len(chute.Loader(ds, batch_size=8, num_workers=0))
    for fail_at in (0, n_batches // 2, n_batches - 1):
        for exc_type in (Boom, SystemExit):

            def transform(batch, fail_at=fail_at, exc_type=exc_type):
                if int(batch["x"][0, 0]) == fail_at * 8 * 4:  # shuffle=False: batch k
                    raise exc_type(f"bad batch {fail_at}")
                return batch

            loader = chute.Loader(
                ds, batch_size=8, shuffle=False, num_workers=workers, transform=transform
            )
            got = []
            t0 = time.monotonic()
            if not workers and exc_type is SystemExit:  # no worker: it is the caller's own
                with pytest.raises(SystemExit):
                    for batch in loader:
                        got.append(batch["x"][:, 0].clone())
                assert len(got) == fail_at
                outcomes["SystemExit itself (calling thread)"] += 1
                continue
            with pytest.raises(chute.WorkerError) as info:
                for batch in loader:
                    got.append(batch["x"][:, 0].clone())
                    t0 = time.monotonic()
            assert time.monotonic() - t0 < BOUND_S
            assert isinstance(info.value.__cause__, exc_type)
            assert f"batch {fail_at}" in str(info.value)
            where = "chute-loader-" if workers else threading.current_thread().name
            assert where in str(info.value)
            assert len(got) == fail_at
            for k, xs in enumerate(got):  # nothing skipped or garbled before the failure
                assert xs.tolist() == [float((k * 8 + i) * 4) for i in range(8)]
            deadline = time.monotonic() + BOUND_S
            while _loader_threads() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert not _loader_threads()
            outcomes[f"WorkerError ({exc_type.__name__})"] += 1
    ds.close()
    record(
        record_property,
        "Loader worker thread raises",
        f"{workers} worker thread(s), {data} fields; transform raises Exception or SystemExit "
        "on the first, middle or last batch",
        outcomes.total(),
        "WorkerError naming worker and batch, cause attached, earlier batches intact, "
        "threads stopped",
    )


def _slow(batch):
    time.sleep(0.05)
    return batch


def _kill_one_worker(ds: chute.Dataset, busy: bool) -> tuple[str, float]:
    """Start a 2-worker chute.dataloader, take a batch, SIGKILL one worker, run on. Returns
    the outcome and the seconds from the kill to the error."""
    dl = chute.dataloader(
        ds,
        batch_size=4,
        shuffle=False,
        num_workers=2,
        batch_transform=_slow if busy else None,
        multiprocessing_context="fork",
    )
    me = psutil.Process()
    others = {c.pid for c in me.children()}
    it = iter(dl)
    next(it)
    workers = [c.pid for c in me.children() if c.pid not in others]
    assert len(workers) == 2, workers
    os.kill(workers[-1], signal.SIGKILL)
    t0 = time.monotonic()
    try:
        for _ in it:
            assert time.monotonic() - t0 < BOUND_S, "the loop did not notice the dead worker"
        outcome = "completed without an error"
    except RuntimeError as exc:
        named = str(workers[-1]) in str(exc) and "worker" in str(exc).lower()
        outcome = f"{type(exc).__name__} {'naming' if named else 'NOT naming'} the worker"
    except (ConnectionError, EOFError) as exc:  # torch fetching a dead worker's shared memory
        outcome = f"{type(exc).__name__} NOT naming the worker"
    elapsed = time.monotonic() - t0
    del it  # (also drops the traceback's hold on it) shuts the other worker down
    deadline = time.monotonic() + BOUND_S
    while any(
        psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in workers
    ):
        assert time.monotonic() < deadline, "DataLoader workers left running"
        time.sleep(0.05)
    return outcome, elapsed


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # torch's __del__
@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
def test_dataloader_worker_killed(ds_path: Path, busy: bool, record_property) -> None:
    """SIGKILL one DataLoader worker process mid-epoch (idle after prefetching, or busy in a
    slow transform), 4 times: the loop must raise an error naming the worker's pid within
    BOUND_S, and the other worker must stop."""
    ds = chute.open(ds_path)
    outcomes: Counter = Counter()
    slowest = 0.0
    for _ in range(4):
        outcome, elapsed = _kill_one_worker(ds, busy)
        outcomes[outcome] += 1
        slowest = max(slowest, elapsed)
    assert slowest < BOUND_S
    record(
        record_property,
        "DataLoader worker process killed",
        f"chute.dataloader, 2 fork workers, SIGKILL one while {'busy' if busy else 'idle'}",
        outcomes.total(),
        f"{', '.join(f'{k}: {v}' for k, v in sorted(outcomes.items()))}; "
        f"error within {slowest:.2f} s; other worker stopped",
    )
    assert "completed without an error" not in outcomes
    assert not any("NOT naming" in k for k in outcomes), outcomes


TYPE, VALUE, SCHEMA = chute.ArgumentError, chute.ArgumentValueError, chute.SchemaError
BAD_LOADER_ARGS = [
    ({"batch_size": 0}, "batch_size", VALUE),
    ({"batch_size": -3}, "batch_size", VALUE),
    ({"batch_size": 2.5}, "batch_size", TYPE),
    ({"batch_size": "8"}, "batch_size", TYPE),
    ({"batch_size": True}, "batch_size", TYPE),
    ({"num_workers": -1}, "num_workers", VALUE),
    ({"num_workers": 1.0}, "num_workers", TYPE),
    ({"prefetch": 0, "num_workers": 2}, "prefetch", VALUE),
    ({"reuse_after": 0}, "reuse_after", VALUE),
    ({"rank": 2, "world_size": 2}, "rank", VALUE),
    ({"rank": -1, "world_size": 2}, "rank", VALUE),
    ({"rank": 0, "world_size": 0}, "world_size", VALUE),
    ({"seed": -1}, "seed", VALUE),
    ({"seed": 1.5}, "seed", TYPE),
    ({"block_size": 0}, "block_size", VALUE),
    ({"transform": "not callable"}, "transform", TYPE),
    ({"pad": "x"}, "pad", SCHEMA),
    (
        {"pad": 1.5},
        "pad",
        SCHEMA,
    ),  # the ragged field is int64: a fractional fill would be truncated
]
BAD_DATALOADER_ARGS = [
    ({"batch_size": 0}, "batch_size", VALUE),
    ({"num_workers": -2}, "num_workers", VALUE),
    ({"rank": 3, "world_size": 2}, "rank", VALUE),
    ({"world_size": 0, "rank": 0}, "world_size", VALUE),
    ({"sample_transform": 3}, "sample_transform", TYPE),
    ({"batch_sampler": object()}, "batch_sampler", VALUE),
    ({"generator": torch.Generator()}, "generator", VALUE),
]


def test_argument_validation(ds_path: Path, record_property) -> None:
    """Bad arguments: an ArgumentError (wrong type) or ArgumentValueError (wrong value) naming
    the argument when the loader is built, before any thread or process starts; a pad= that
    does not fit the field is a SchemaError."""
    ds = chute.open(ds_path)
    threads = set(threading.enumerate())  # (earlier tests' threads may still be ending)
    cases = 0
    for kwargs, name, error in BAD_LOADER_ARGS:
        args = {"batch_size": 8, **kwargs}
        with pytest.raises(error, match=name):
            chute.Loader(ds, **args)
        cases += 1
    for kwargs, name, error in BAD_DATALOADER_ARGS:
        args = {"batch_size": 8, **kwargs}
        with pytest.raises(error, match=name):
            chute.dataloader(ds, **args)
        cases += 1
    for make in (chute.Loader, chute.dataloader):
        with pytest.raises(chute.ArgumentError, match="chute Dataset"):
            make([1, 2, 3], batch_size=2)
        cases += 1
    with pytest.raises(chute.SchemaError, match="nope"):
        chute.open(ds_path, fields=["x", "nope"])
    with pytest.raises(chute.SchemaError, match="string"):
        chute.open(ds_path, fields="x")
    cases += 2
    assert set(threading.enumerate()) - threads == set()  # no thread started
    record(
        record_property,
        "bad loader arguments",
        "Loader / dataloader: batch_size 0/neg/float/str/bool, workers < 0, prefetch 0, "
        "reuse_after 0, rank >= world_size, rank < 0, world_size 0, seed < 0, block_size 0, "
        "non-callable transforms, a pad that does not fit, generator=, not a Dataset; "
        "open(fields=) unknown field or a str",
        cases,
        "all SchemaError naming the argument, at construction; no thread started",
    )


def test_batch_size_beyond_dataset(ds_path: Path, record_property) -> None:
    """A batch_size far larger than the dataset is legal (one short batch per epoch); the
    loader must not size its buffers from it (a 10^12-row ring cannot be allocated)."""
    ds = chute.open(ds_path)
    outcomes: Counter = Counter()
    for workers, keep in [(0, None), (2, None), (0, 1), (2, 1)]:  # fresh batches and the ring
        try:
            loader = chute.Loader(ds, batch_size=10**12, num_workers=workers, reuse_after=keep)
            sizes = [len(b["x"]) for b in loader]
            assert sizes == [len(ds)]
            outcomes["one batch of the whole dataset"] += 1
        except RuntimeError as exc:  # torch's allocator, not a chute error
            outcomes[f"{type(exc).__name__} from the allocator"] += 1
    record(
        record_property,
        "bad loader arguments",
        "batch_size 10^12 on a 64-sample dataset (0 and 2 workers, fresh batches and "
        "reuse_after=1)",
        outcomes.total(),
        outcomes,
    )
    if "one batch of the whole dataset" not in outcomes or len(outcomes) > 1:
        pytest.xfail(
            "known bug (reported): Loader allocates its ring with batch_size rows, not "
            "min(batch_size, the largest batch of the plan)"
        )
