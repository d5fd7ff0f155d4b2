"""The worker processes of :func:`chute.dataloader`: how each starts (SIGINT ignored, see the
NOTE in ``chute/loader/dataloader.py``), and what a dead one's exit code says happened."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def exited_workers(it: Any, wait_s: float) -> list[tuple[int, int]]:
    """(pid, exit code) of the workers of torch iterator ``it`` that have exited, polled for up
    to ``wait_s``; empty if none has (or ``it`` has no worker processes)."""
    workers = getattr(it, "_workers", [])
    deadline = time.monotonic() + wait_s
    while True:
        try:
            dead = [w for w in workers if w.exitcode is not None]  # (reaps them)
            if dead or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        except RuntimeError:  # torch's SIGCHLD handler: a worker died; look again
            pass
    return [(w.pid, w.exitcode) for w in dead]


def death_message(dead: list[tuple[int, int]], exc: BaseException) -> str:
    """What the workers' exit codes say happened, and what to do about it."""
    who = ", ".join(f"{pid} ({exit_reason(code)})" for pid, code in dead)
    head = f"DataLoader worker process {who} died mid-epoch ({type(exc).__name__}: {exc})"
    codes = [code for _, code in dead]
    if -signal.SIGKILL in codes:
        return (
            f"{head}; a SIGKILL is usually the out-of-memory killer (see dmesg): use fewer "
            "workers, smaller batches or lighter transforms"
        )
    if any(code > 0 for code in codes):
        return (
            f"{head}. The worker exited on an error of its own: its traceback is printed "
            "above, on this process's stderr. A spawned worker that exits with code 1 at "
            "start usually could not import the main module or unpickle a transform: guard "
            "the script's entry point with `if __name__ == '__main__':` and define "
            "transforms at module level"
        )
    return f"{head}; it was stopped by a signal from outside the loader"


def exit_reason(code: int) -> str:
    """``multiprocessing``'s exit code in words: "exit code 1", "killed by SIGKILL"."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:  # a signal without a name (real-time signals)
        return f"killed by signal {-code}"


def worker_init(user_fn: Callable[[int], None] | None, worker_id: int) -> None:
    """Each worker ignores SIGINT (the main process stops it: see the NOTE), then runs the
    user's ``worker_init_fn``. Module-level, so that spawned workers can unpickle it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if user_fn is not None:
        user_fn(worker_id)


def uninterrupted(start: Callable[[], T]) -> T:
    """``start()`` (which starts worker processes), with a SIGINT that lands meanwhile
    recorded and replayed to the previous handler once it returns (see the NOTE in
    ``chute/loader/dataloader.py``); only in the main thread, where Python runs handlers."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        return start()
    interrupted: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    try:
        return start()
    finally:
        signal.signal(signal.SIGINT, previous)
        if interrupted:  # the previous handler (default: KeyboardInterrupt) now
            signal.raise_signal(signal.SIGINT)
