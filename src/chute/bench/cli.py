"""Arguments and entry point of ``chute bench`` (registered in ``chute.cli``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from ..errors import NotWritableError, require
from .report import plot, table
from .run import run_bench


def parse_size(text: str) -> float:
    """A byte count: ``2e9``, ``500MB``, ``2GB``, ``64MiB``..."""
    units = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 1e3, "mb": 1e6, "gb": 1e9, "b": 1}
    t = text.strip().lower()
    for unit, mult in units.items():
        if t.endswith(unit):
            return float(t[: -len(unit)]) * mult
    try:
        return float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 2e9, 500MB, 2GB)") from None


def count(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer ``>= minimum`` (worker counts, batch sizes)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def check_writable(path: str, option: str) -> None:
    """Fail now, not after a benchmark of several minutes, if ``path`` cannot be written."""
    file = Path(path)
    folder = file.parent
    if file.is_dir():
        raise NotWritableError(f"{option} {path}: is a folder; give a file name")
    if not folder.is_dir():
        raise NotWritableError(f"{option} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (file.exists() and not os.access(file, os.W_OK)):
        raise NotWritableError(f"{option} {path}: cannot write there (permission denied)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", help="a chute dataset, or any source chute convert accepts")
    p.add_argument(
        "--max-bytes",
        type=parse_size,
        default=2e9,
        help="copy at most this much of the data into each store (default 2GB)",
    )
    p.add_argument("--batch-size", type=count(1), default=256)
    p.add_argument("--workers", type=count(0), default=None, help="default: min(4, CPU count)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="OUT.json", help="write the results as JSON")
    p.add_argument("--plot", metavar="OUT.png", help="write a bar chart (needs matplotlib)")
    p.add_argument(
        "--drop-caches",
        action="store_true",
        help="empty the page cache before each contender (cold); without root only the "
        "bench's own files are evicted (posix_fadvise)",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=60.0,
        help="stop a contender after this many seconds (default 60; 0: read the whole epoch)",
    )
    p.add_argument("--work-dir", help="where the copies are written (default: the temp dir)")


def main(args: argparse.Namespace) -> int:
    if args.json:
        check_writable(args.json, "--json")
    if args.plot:
        require("matplotlib", "bench")
        check_writable(args.plot, "--plot")
    try:
        report = run_bench(
            args.source,
            max_bytes=args.max_bytes,
            batch_size=args.batch_size,
            workers=args.workers,
            seed=args.seed,
            cold=args.drop_caches,
            time_limit=args.time_limit or None,
            work_dir=args.work_dir,
        )
    except OSError as exc:  # no room for the copies, unreadable source: no traceback needed
        print(f"chute bench: error: {exc}", file=sys.stderr)
        return 1
    print(table(report))
    if args.json:
        print(f"JSON: {report.save_json(args.json)}")
    if args.plot:
        print(f"plot: {plot(report, args.plot)}")
    bad = [r.name for r in report.results if r.checksum_ok is False]
    if bad:
        print(f"checksum mismatch: {', '.join(bad)} did not read the same samples in order")
        return 1
    return 0
