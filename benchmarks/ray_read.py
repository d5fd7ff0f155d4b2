"""Ray Data reading the same data three ways: ``chute.ray.read`` vs ``ray.data.read_numpy``
(.npy files) vs ``ray.data.read_parquet`` (Parquet written by Ray, tensor column).

    python benchmarks/ray_read.py [--samples 20000] [--files 8] [--shape 3,32,32] [--repeats 3]

Writes ``--samples`` uint8 tensors of ``--shape`` as ``--files`` chute parts, as many .npy
files, and as many Parquet files, then for each reader (in alternating order, ``--repeats``
times; the table shows medians) builds the Ray dataset and iterates
``iter_torch_batches(batch_size=256)`` over it: rows/s from the dataset's creation to the last
batch, and the time to the first batch. All files are in the page cache (one warm-up pass
each first): this measures the readers, not the disk. Ray runs on all CPUs of this machine
(``--cpus``). Prints a table and writes JSON (``--json``, default
benchmarks/results/ray_read.json). Never asserts on time.
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, table, write_json

import chute
import chute.ray

BATCH = 256


def make_data(root: Path, n: int, files: int, shape: tuple[int, ...]) -> dict[str, Path]:
    """The same ``n`` samples as a chute dataset, .npy files and Parquet files."""
    import ray

    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
    per = math.ceil(n / files)
    paths = {"chute": root / "d.chute", "npy": root / "npy", "parquet": root / "parquet"}
    chute.write(paths["chute"], {"data": data}, part_size=per)
    paths["npy"].mkdir()
    for i, a in enumerate(range(0, n, per)):
        np.save(paths["npy"] / f"{i:05d}.npy", data[a : a + per])
    ray.data.from_numpy([data[a : a + per] for a in range(0, n, per)]).write_parquet(
        str(paths["parquet"])
    )
    return paths


def readers(paths: dict[str, Path]) -> dict[str, Callable[[], Any]]:
    import ray

    return {
        "chute.ray.read": lambda: chute.ray.read(paths["chute"]),
        "ray read_numpy": lambda: ray.data.read_numpy(str(paths["npy"])),
        "ray read_parquet": lambda: ray.data.read_parquet(str(paths["parquet"])),
    }


def run_once(make: Callable[[], Any], n: int) -> dict[str, float]:
    t0 = time.perf_counter()
    first = None
    rows = 0
    for batch in make().iter_torch_batches(batch_size=BATCH):
        if first is None:
            first = time.perf_counter() - t0
        rows += len(batch["data"])
    seconds = time.perf_counter() - t0
    if rows != n:
        raise RuntimeError(f"read {rows} rows, expected {n}")
    return {"first_batch_s": first or seconds, "seconds": seconds, "rows_per_s": rows / seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=20_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--shape", default="3,32,32")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cpus", type=int, default=None)
    ap.add_argument("--dir", default=None, help="where to write the data (default: a temp dir)")
    ap.add_argument("--json", default=str(RESULTS / "ray_read.json"))
    args = ap.parse_args()
    shape = tuple(int(d) for d in args.shape.split(","))

    import ray

    ray.init(
        num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR"
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    root = Path(tempfile.mkdtemp(prefix="ray_read-", dir=args.dir))
    try:
        paths = make_data(root, args.samples, args.files, shape)
        makers = readers(paths)
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in makers}
        for make in makers.values():  # warm-up: page cache, Ray workers
            run_once(make, args.samples)
        for r in range(args.repeats):
            order = list(makers) if r % 2 == 0 else list(reversed(makers))
            for name in order:
                runs[name].append(run_once(makers[name], args.samples))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        ray.shutdown()

    rows = []
    for name, rs in runs.items():
        rows.append(
            {
                "reader": name,
                "rows_per_s": statistics.median(r["rows_per_s"] for r in rs),
                "first_batch_s": statistics.median(r["first_batch_s"] for r in rs),
            }
        )
    base = rows[0]
    for row in rows:
        row["chute_speedup"] = base["rows_per_s"] / row["rows_per_s"]
        row["first_batch_ratio"] = row["first_batch_s"] / base["first_batch_s"]
    print(
        f"{args.samples} samples of uint8{list(shape)} in {args.files} files, "
        f"iter_torch_batches(batch_size={BATCH}), median of {args.repeats}"
    )
    print(
        table(
            rows,
            [
                ("reader", "reader", "s"),
                ("rows_per_s", "rows/s", ",.0f"),
                ("chute_speedup", "chute rows/s ÷ this", ".2f"),
                ("first_batch_s", "first batch s", ".3f"),
                ("first_batch_ratio", "first batch ÷ chute's", ".2f"),
            ],
        )
    )
    out = write_json(
        args.json,
        {
            "samples": args.samples,
            "files": args.files,
            "shape": list(shape),
            "batch_size": BATCH,
            "ray": ray.__version__,
            "results": rows,
            "runs": runs,
        },
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
