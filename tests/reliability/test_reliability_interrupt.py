"""Ctrl-C during iteration: SIGINT to a process running a training-like loop.

The child runs a loop over a chute Loader (worker threads) or chute.dataloader (worker
processes), is interrupted several times (to its pid alone, and to its whole process group as
a terminal's Ctrl-C does), and after each KeyboardInterrupt reports what is left: threads,
child processes, open file descriptors. The child also says when each epoch starts: a SIGINT
after which two more epochs start was swallowed (pressed again, and counted), so nothing here
depends on how fast a loaded machine runs (waits are generous, only against hangs). The
parent checks that /dev/shm holds no new segment once the child has exited.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from _reliability import record, shm_entries

import chute

pytestmark = pytest.mark.slow  # the fault harness: real processes, signals, fuzzing

HANG_S = 120.0  # no line from the child for this long: it hangs
TORCH_FD_RACE = 2  # fds a rare Ctrl-C may leave open inside torch's DataLoader (see below)

CHILD = textwrap.dedent(
    """
    import gc, json, os, sys, threading, time
    import psutil
    import chute

    path, mode, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ds = chute.open(path)

    def slow(batch):
        time.sleep(0.01)
        return batch

    def make():
        if mode == "loader":
            return chute.Loader(ds, batch_size=8, num_workers=2, transform=slow)
        return chute.dataloader(ds, batch_size=8, num_workers=2, batch_transform=slow,
                                multiprocessing_context="fork")

    def levels():
        gc.collect()
        me = psutil.Process()
        return {
            "threads": sorted(t.name for t in threading.enumerate()
                              if t is not threading.main_thread()),
            "children": [c.pid for c in me.children(recursive=True)
                         if c.status() != psutil.STATUS_ZOMBIE],
            "fds": len(os.listdir("/proc/self/fd")),
        }

    def settled():  # the last pass's queue feeder threads and pipes end asynchronously
        prev, deadline = levels(), time.monotonic() + 3
        while time.monotonic() < deadline:
            time.sleep(0.1)
            if (now := levels()) == prev:
                return now
            prev = now
        return prev

    for _ in make():  # warm-up epoch: lazy imports, caches
        pass
    base = settled()
    for k in range(rounds):
        workers = None
        try:
            while True:
                first = True
                for _ in make():  # (a kept batch would rightly keep its shared memory)
                    if workers is None:
                        workers = [c.pid for c in psutil.Process().children()]
                        print(json.dumps({"ready": k, "workers": workers}), flush=True)
                    elif first:
                        print(json.dumps({"epoch": k}), flush=True)
                    first = False
        except KeyboardInterrupt:
            pass
        deadline = time.monotonic() + 3  # queue feeder threads and workers end asynchronously
        while (now := levels()) != base and time.monotonic() < deadline:
            time.sleep(0.02)
        print(json.dumps({"round": k, "base": base, "now": now, "workers": workers}),
              flush=True)
    """
)


@pytest.fixture(scope="module")
def ds_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("interrupt") / "d.chute"
    x = np.arange(240 * 16, dtype=np.float32).reshape(240, 16)
    return chute.write(path, {"x": x, "t": [np.arange(i % 7) for i in range(240)]})


def _line(proc: subprocess.Popen) -> dict:
    """The child's next JSON line (failing if none comes within ``HANG_S``: a hang)."""
    ready, _, _ = select.select([proc.stdout], [], [], HANG_S)
    assert ready, f"no line from the child in {HANG_S:.0f} s: it hangs"
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert line, "the child died"
    return json.loads(line)


def _report(proc: subprocess.Popen) -> dict | None:
    """The child's report after a SIGINT; None when two epochs start first (it was lost)."""
    epochs = 0
    while epochs < 2:
        line = _line(proc)
        if "round" in line:
            return line
        epochs += "epoch" in line
    return None


@pytest.mark.parametrize("mode", ["loader", "dataloader"])
def test_sigint_during_iteration(ds_path: Path, tmp_path: Path, mode: str, record_property) -> None:
    rounds = 5
    shm_before = shm_entries()
    with open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(ds_path), mode, str(rounds)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,  # its own process group, as a job in a terminal
        )
    all_workers: set[int] = set()
    times, lost, extra_fds = [], 0, 0
    try:
        for k in range(rounds):
            ready = _line(proc)
            while "epoch" in ready:  # epochs of the round before its report
                ready = _line(proc)
            assert ready.get("ready") == k, (tmp_path / "stderr").read_text()
            all_workers.update(ready["workers"])
            time.sleep(0.1 + 0.05 * k)  # mid-epoch
            t0 = time.monotonic()
            for _ in range(3):  # a Ctrl-C the child swallowed is pressed again, as a user would
                if k % 2:  # a terminal's Ctrl-C: the whole foreground group
                    os.killpg(proc.pid, signal.SIGINT)
                else:
                    os.kill(proc.pid, signal.SIGINT)
                report = _report(proc)
                if report is not None:
                    break
                lost += 1
            assert report is not None, f"round {k}: no reaction to 3 x SIGINT; the loop hangs"
            times.append(time.monotonic() - t0)
            base, now = report["base"], report["now"]
            assert now["threads"] == base["threads"], (k, now["threads"])
            assert now["children"] == [], (k, now["children"])
            # torch's own race, not chute's: a Ctrl-C landing while torch unpickles a batch
            # from a worker, between receiving a shared-memory fd and the try/finally that
            # closes it (torch.multiprocessing.reductions.rebuild_storage_fd), or while it
            # joins a worker, leaves that one fd (or a pipe pair) open: ~1 round in 50 here
            # (CI failed once on it). Bounded, so tolerated for worker processes only.
            spare = TORCH_FD_RACE if mode == "dataloader" else 0
            assert base["fds"] <= now["fds"] <= base["fds"] + spare, (k, now["fds"], base["fds"])
            extra_fds = now["fds"] - base["fds"]
        assert proc.wait(30) == 0, (tmp_path / "stderr").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    alive = [p for p in all_workers if psutil.pid_exists(p)]
    alive = [p for p in alive if psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == [], f"worker processes outlived the job: {alive}"
    ours = {str(pid) for pid in (proc.pid, *all_workers)}  # torch_<pid>_...: not other jobs'
    leaked = [
        name
        for name in shm_entries() - shm_before
        if not name.startswith("torch_") or name.split("_")[1] in ours
    ]
    assert leaked == [], f"shared-memory segments leaked: {leaked}"
    record(
        record_property,
        "SIGINT during iteration",
        f"{'Loader, 2 threads' if mode == 'loader' else 'chute.dataloader, 2 processes'} "
        f"(a new iterator per epoch); {rounds} interrupts mid-epoch (to the pid, and to the "
        "process group like Ctrl-C)",
        rounds,
        f"stopped within the epoch of the SIGINT that took ({max(times):.2f} s at most); "
        f"Ctrl-C lost {lost}x; threads and processes back to baseline, "
        f"fds +{extra_fds} after the last; no /dev/shm segment left",
    )
    # With worker processes, a Ctrl-C landing while CPython runs a finalizer (torch's iterator
    # of the previous epoch shutting its workers down) is swallowed by CPython ("Exception
    # ignored in __del__"): ~1 in 70 here. Pressing again stops the loop; nothing leaks.
    assert lost <= (1 if mode == "dataloader" else 0), lost
