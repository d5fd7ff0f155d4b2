"""Ctrl-C during iteration: SIGINT to a process running a training-like loop.

The child runs a loop over a chute Loader (worker threads) or chute.dataloader (worker
processes), is interrupted several times (to its pid alone, and to its whole process group as
a terminal's Ctrl-C does), and after each KeyboardInterrupt reports what is left: threads,
child processes, open file descriptors. The parent times each interrupt and checks that
/dev/shm holds no new segment once the child has exited.
"""

from __future__ import annotations

import json
import os
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

PROMPT_S = 5.0  # from SIGINT to the loop having unwound and cleaned up

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

    for _ in make():  # warm-up epoch: lazy imports, caches
        pass
    base = levels()
    for k in range(rounds):
        workers = None
        try:
            while True:
                for _ in make():  # (a kept batch would rightly keep its shared memory)
                    if workers is None:
                        workers = [c.pid for c in psutil.Process().children()]
                        print(json.dumps({"ready": k, "workers": workers}), flush=True)
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
    x = np.arange(400 * 16, dtype=np.float32).reshape(400, 16)
    return chute.write(path, {"x": x, "t": [np.arange(i % 7) for i in range(400)]})


@pytest.mark.parametrize("mode", ["loader", "dataloader"])
def test_sigint_during_iteration(ds_path: Path, mode: str, record_property) -> None:
    rounds = 3
    shm_before = shm_entries()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(ds_path), mode, str(rounds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a job in a terminal
    )
    assert proc.stdout is not None
    all_workers: set[int] = set()
    times = []
    try:
        for k in range(rounds):
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else ""
            ready = json.loads(line)
            assert ready["ready"] == k
            all_workers.update(ready["workers"])
            time.sleep(0.1 + 0.1 * k)  # mid-epoch
            t0 = time.monotonic()
            if k % 2:  # a terminal's Ctrl-C: the whole foreground group
                os.killpg(proc.pid, signal.SIGINT)
            else:
                os.kill(proc.pid, signal.SIGINT)
            report = json.loads(proc.stdout.readline())
            times.append(time.monotonic() - t0)
            assert times[-1] < PROMPT_S, f"round {k}: {times[-1]:.1f} s to stop"
            base, now = report["base"], report["now"]
            assert now["threads"] == base["threads"], (k, now["threads"])
            assert now["children"] == [], (k, now["children"])
            assert now["fds"] == base["fds"], (k, now["fds"], base["fds"])
        assert proc.wait(30) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    alive = [p for p in all_workers if psutil.pid_exists(p)]
    alive = [p for p in alive if psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == [], f"worker processes outlived the job: {alive}"
    assert shm_entries() - shm_before == set(), "shared-memory segments leaked"
    record(
        record_property,
        "SIGINT during iteration",
        f"{'Loader, 2 threads' if mode == 'loader' else 'chute.dataloader, 2 processes'}; "
        f"{rounds} interrupts mid-epoch (to the pid, and to the process group like Ctrl-C)",
        rounds,
        f"stopped within {max(times):.2f} s; threads, processes, fds back to baseline; "
        "no /dev/shm segment left",
    )
