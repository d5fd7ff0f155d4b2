"""Functions run in child processes (spawn or fork) by the remote-storage tests."""

from __future__ import annotations

import os
import resource
import signal
import time
from pathlib import Path
from typing import Any


def pin_part(cache: Any, part: int, start: Any, out: str) -> None:
    """Wait for ``start`` (an Event), pin ``part``, write its paths to ``out``."""
    if start is not None:
        start.wait(30)
    pin = cache.pin_part(part)
    Path(out).write_text("\n".join(str(p) for p in pin.paths))
    pin.release()


def pin_part_report(cache: Any, part: int, out: str) -> None:
    """Pin ``part``; write its paths, or the error, to ``out``."""
    try:
        with cache.pin_part(part) as pin:
            Path(out).write_text("\n".join(str(p) for p in pin.paths))
    except Exception as exc:
        Path(out).write_text(f"{type(exc).__name__}: {exc}")


def pin_and_hold(cache: Any, part: int, ready: str, done: str) -> None:
    """Pin ``part``, create ``ready``, hold the pin until ``done`` exists (30 s at most)."""
    with cache.pin_part(part):
        Path(ready).touch()
        deadline = time.monotonic() + 30
        while not os.path.exists(done) and time.monotonic() < deadline:
            time.sleep(0.02)


def ensure(cache: Any, relpath: str) -> None:
    cache.ensure(relpath)


def ensure_with_file_limit(cache: Any, relpath: str, limit: int, out: str) -> None:
    """Download under RLIMIT_FSIZE (a full disk, as far as writes go); report the error."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    try:
        cache.ensure(relpath)
        Path(out).write_text("no error")
    except Exception as exc:
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
        Path(out).write_text(f"{type(exc).__name__}: {exc}")
