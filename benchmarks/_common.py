"""Helpers shared by the scripts in ``benchmarks/``: peak memory of a process tree, the machine
a run was on, aligned tables and JSON results. Benchmarks print a table AND write JSON, and
never assert on wall time; ratios are measured side by side in the same run."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from chute.bench.machine import machine  # the same description as chute bench
from chute.bench.measure import TreeMemory  # PSS of this process and all its children
from chute.bench.report import columns_table as table  # the one table printer

__all__ = [
    "EPOCH_COLUMNS",
    "TreeMemory",
    "child_json",
    "machine",
    "peak_pss",
    "table",
    "write_json",
]

RESULTS = Path(__file__).resolve().parent / "results"

# The table columns of the per-epoch benchmarks (key, header, format).
EPOCH_COLUMNS = [
    ("epoch", "epoch", "d"),
    ("seconds", "s", ".2f"),
    ("samples_per_s", "samples/s", ",.0f"),
    ("mb_per_s", "MB/s", ".0f"),
    ("peak_pss_mb", "peak PSS MB", ".1f"),
    ("peak_anon_mb", "peak anon MB", ".1f"),
]


@contextmanager
def peak_pss(interval: float = 0.02) -> Iterator[TreeMemory]:
    """Sample the PSS of this process tree (workers included) while the block runs.

    PSS splits shared pages between the processes mapping them, so forked workers sharing one
    copy are not counted twice. Read ``mem.peak - mem.baseline`` (bytes; ``peak_anon`` for
    anonymous memory only) inside or after the block.
    """
    _trim_heap()
    mem = TreeMemory(interval)
    mem.start()
    try:
        yield mem
    finally:
        mem.stop()


def _trim_heap() -> None:
    """Give memory freed earlier back to the OS (glibc keeps it, resident, for reuse): else
    a later allocation reuses it and never shows in the PSS measured above the baseline."""
    gc.collect()
    with suppress(OSError, AttributeError):  # not glibc: nothing to do
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def write_json(path: str | os.PathLike, payload: dict[str, Any]) -> Path:
    """Write ``payload`` plus the machine and the command line as indented JSON."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "machine": machine(),
        **payload,
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


def child_json(python: str, argv: list[str]) -> dict[str, Any]:
    """Run ``python *argv`` and return the JSON object its last stdout line holds, or
    ``{"skipped": why}`` (its last stderr line) when it fails or cannot start.

    A peer such as LitData may live in an environment of its own: the child gets this
    interpreter's ``sys.path`` as its ``PYTHONPATH``, so it sees this one's packages (torch
    included) first, then its own.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        done = subprocess.run([python, *argv], env=env, capture_output=True, text=True)
    except OSError as exc:  # no such interpreter, or not executable
        return {"skipped": f"{python}: {exc.strerror}"}
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return {"skipped": (done.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(lines[-1])
