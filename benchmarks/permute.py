"""The lazy permutation (chute.permute.Permutation) against a materialised one, side by side.

    python benchmarks/permute.py [--sizes 1e6 1e9] [--batches 256 65536] [--repeats 20]

For each ``n`` and batch size, in one run:

  * ``lazy ns/index``: ``Permutation(n, seed)[positions]`` for a batch of random positions
    (construction excluded; it is reported as ``lazy build us``, paid once per epoch's plan).
  * ``mat ns/index``: ``perm[positions]`` on ``perm = rng.permutation(n)`` built beforehand;
    ``mat build s`` is that build (8 bytes a sample of RAM), paid once per epoch.
  * ``lazy/mat``: the per-index ratio; ``epoch lazy/mat``: a whole epoch of batches (n indices)
    with the build included, i.e. (n * lazy) / (build + n * mat).

A materialised permutation that would not fit in half the RAM is skipped (``-``). Prints a table
and writes JSON (``--json``, default benchmarks/results/permute.json). Never asserts on time.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from pathlib import Path

import numpy as np
from _common import RESULTS, table, write_json

from chute import ChuteError
from chute.order.permute import Permutation, check_materialise

COLUMNS = [
    ("n", "n", ".0e"),
    ("batch", "batch", "d"),
    ("lazy_ns", "lazy ns/index", ".1f"),
    ("mat_ns", "mat ns/index", ".1f"),
    ("ratio", "lazy/mat", ".1f"),
    ("lazy_build_us", "lazy build us", ".1f"),
    ("mat_build_s", "mat build s", ".2f"),
    ("epoch_ratio", "epoch lazy/mat", ".2f"),
    ("mat_gb", "mat GB", ".1f"),
]


def per_index(fn, positions: np.ndarray, repeats: int) -> float:
    """Median ns per index of ``fn(positions)`` over ``repeats`` calls (after one warm-up)."""
    fn(positions)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn(positions)
        times.append(time.perf_counter() - t)
    return statistics.median(times) / len(positions) * 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=float, nargs="+", default=[1e6, 1e9])
    ap.add_argument("--batches", type=int, nargs="+", default=[256, 65536])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", type=Path, default=RESULTS / "permute.json")
    args = ap.parse_args()
    rows = []
    rng = np.random.default_rng(0)
    for n in map(int, args.sizes):
        t = time.perf_counter()
        for e in range(100):
            Permutation(n, (0, e))
        lazy_build = (time.perf_counter() - t) / 100 * 1e6
        lazy = Permutation(n, (0, 1))
        perm = None
        mat_build = None
        try:
            check_materialise(n, 8, "rng.permutation(n)", "skipped")
            gc.collect()
            t = time.perf_counter()
            perm = np.random.default_rng(1).permutation(n)
            mat_build = time.perf_counter() - t
        except (ChuteError, MemoryError) as exc:
            print(f"n={n:.0e}: materialised permutation skipped ({exc})")
        for b in args.batches:
            positions = rng.integers(0, n, b, dtype=np.int64)
            lazy_ns = per_index(lazy.__getitem__, positions, args.repeats)
            row = {"n": n, "batch": b, "lazy_ns": lazy_ns, "lazy_build_us": lazy_build}
            if perm is not None:
                mat_ns = per_index(perm.__getitem__, positions, args.repeats)
                row.update(
                    mat_ns=mat_ns,
                    ratio=lazy_ns / mat_ns,
                    mat_build_s=mat_build,
                    epoch_ratio=(n * lazy_ns) / (mat_build * 1e9 + n * mat_ns),
                    mat_gb=n * 8 / 1e9,
                )
            rows.append(row)
            print(table([row], COLUMNS).splitlines()[-1], flush=True)
        del perm
        gc.collect()
    print()
    print(table(rows, COLUMNS))
    print(f"\nwrote {write_json(args.json, {'rows': rows})}")


if __name__ == "__main__":
    main()
