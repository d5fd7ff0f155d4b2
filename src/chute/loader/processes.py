"""The worker processes of :func:`chute.dataloader`: how each starts (SIGINT ignored, see the
NOTE in ``chute/loader/dataloader.py``), what a dead one's exit code says happened, and the
iterator that hands their batches out."""

from __future__ import annotations

import gc
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ..errors import StaleIteratorError, WorkerError
from .batch_dataset import Reported

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
    ``chute/loader/dataloader.py``); only in the main thread, where Python runs handlers.
    What exists is frozen out of garbage collection meanwhile (``gc.freeze``), so that a
    forked worker never collects what it inherited: an earlier loader's unreachable torch
    iterator would stop its workers from there ("Exception ignored ... can only test a
    child process"). This process collects it as usual afterwards."""
    gc.freeze()
    try:
        return _uninterrupted(start)
    finally:
        gc.unfreeze()


def _uninterrupted(start: Callable[[], T]) -> T:
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


class Consumed:
    """The iterator of a ``chute.dataloader`` (``loader``): batches of torch's iterator (or
    of ``chute/loader/streams.py``'s) ``it``, advancing the order's ``progress`` as each is
    handed out; a dead worker raised as a :class:`~chute.errors.WorkerError` (see the NOTE
    in ``chute/loader/dataloader.py``)."""

    def __init__(self, it: Iterator[Any], progress: Iterator[Any], loader: Any) -> None:
        self._it: Iterator[Any] | None = it
        self._progress = progress
        self._loader = loader
        self._handed = 0
        self._stale: str | None = None  # why a newer pass ended this one

    def __iter__(self) -> Consumed:
        return self

    def __len__(self) -> int:
        return 0 if self._it is None else len(self._it)  # type: ignore[arg-type]

    def close(self, why: str | None = None) -> None:
        """End this pass: a newer pass took the loader over (``why``), or ``close``. Drops
        torch's iterator (its workers stop, unless persistent, when the newer pass is already
        reusing it) and refuses further batches."""
        if self._it is not None:
            self._stale = why
            self._it = None

    def _stop_workers(self, it: Iterator[Any]) -> None:
        """The pass failed: stop its workers now, not when ``it`` is collected (see the NOTE),
        and let the next ``iter()`` start new ones, also with ``persistent_workers``."""
        self._it = None
        self._loader._forget_workers()
        shutdown = getattr(it, "_shutdown_workers", None)  # none without worker processes
        if shutdown is not None:
            shutdown()

    def __next__(self) -> Any:
        it = self._it
        if it is None:
            if self._stale is not None:
                raise StaleIteratorError(
                    f"this DataLoader iterator was ended after {self._handed} batches: "
                    f"{self._stale}. chute.dataloader runs one pass at a time: use one "
                    "iterator at a time, or a second dataloader"
                )
            raise StopIteration
        try:
            batch = next(it)
        except StopIteration:
            next(self._progress, None)  # the epoch is over: the order moves on to the next
            self._it = None
            raise
        except Exception as exc:  # from a worker (or a dead one: see the NOTE)
            dead: list[tuple[int, int]] = []
            if isinstance(exc, (ConnectionError, EOFError, RuntimeError)):  # a dead worker?
                # A dropped connection comes a moment before the exit: wait for it, boundedly.
                # torch's SIGCHLD handler raises wherever the signal lands, the call's first
                # line too: once a dead worker at most, so look again as often.
                for _ in range(len(getattr(it, "_workers", ())) + 1):
                    try:
                        dead = exited_workers(it, 0.0 if isinstance(exc, RuntimeError) else 2.0)
                        break
                    except RuntimeError:
                        continue
            self._stop_workers(it)
            if not dead:
                raise
            raise WorkerError(death_message(dead, exc)) from exc
        next(self._progress)  # record the batch as consumed
        self._handed += 1
        if type(batch) is Reported:  # samples replaced (on_error="skip")
            return self._loader._report(batch)
        return batch
