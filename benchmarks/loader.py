"""chute.Loader against the usual ways of feeding a training loop, side by side in one run.

    python benchmarks/loader.py                  # full size (~5 GB of temporary stores)
    python benchmarks/loader.py --quick          # 1/20 of the samples: a smoke run
    python benchmarks/loader.py --scale 0.5 --reps 5 --json out.json

Two synthetic datasets of uint8 images plus an int64 label: CIFAR-like (200k x 3x32x32) and
ImageNet-like (12k x 3x224x224). Every row reads the same shuffled epoch (chute.Order, seed 0)
with batch 256 from a hot page cache:

* gather limit: ``np.take(src, idx, axis=0, out=buf)`` per field from arrays in RAM into a
  reused buffer, one thread: the ceiling for one thread.
* chute Loader with 1 and 2 worker threads, on the memory-mapped dataset (``chute.open``)
  and on ``chute.open(...).to_memory()`` (anonymous memory, like the gather limit); 3 epochs,
  each reshuffled. By default its batches are fresh memory (the user may keep them); the
  ``reuse_after=1`` rows reuse a ring of slots instead (a batch valid until the next is asked for):
  "x ring" is the default's throughput over the ring's, with the same workers, in this run.
* torch DataLoader, per-sample ``__getitem__`` + default collate, over in-RAM arrays and over
  ``np.load(mmap_mode=...)`` memmaps, with 0 and 2 worker processes.
* h5py, one sample per chunk and a tuned chunk cache, per-sample reads, 0 and 2 workers.

The stores and readers are those of ``chute bench`` (``chute.bench.contenders``), so both tools
measure the same configurations; this script adds the worker-count sweep, several epochs and
no per-batch checksum (which would cost as much as the gather itself). Throughput counts the
samples of an epoch after its first batch over the time after it: the best epoch of ``--reps``
interleaved repetitions (the rows alternate, so a burst of other work on the machine hits them
alike), of ``--epochs`` epochs each for the gather limit and the chute rows (a chute Loader
lives on across its epochs: is its memory flat?), of one epoch for the 15-100x slower rows.
Peak PSS is of the whole process tree (main + workers) above what it used before the loader
was opened; "anon" excludes file-backed pages (memory maps).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from _common import RESULTS, peak_pss, table, write_json

import chute
from chute.bench.contenders import CONTENDERS, Contender, Setup
from chute.bench.contenders.native import copy_path

MB = 1e6
DATASETS = {"cifar-like": (200_000, (3, 32, 32)), "imagenet-like": (12_000, (3, 224, 224))}
# (label, chute bench contender, workers or None (it has none), runs --epochs epochs: the fast
# rows do, so that the ratios between them compare as many draws each; the slow rows run one)
ROWS = [
    ("gather limit (np.take, 1 thread)", "gather limit (in RAM)", None, True),
    ("chute Loader", "chute Loader", 1, True),
    ("chute Loader", "chute Loader", 2, True),
    ("chute Loader, reuse_after=1 (ring)", "chute Loader, reuse_after=1", 1, True),
    ("chute Loader, reuse_after=1 (ring)", "chute Loader, reuse_after=1", 2, True),
    ("chute Loader, ds.to_memory()", "chute Loader, to_memory()", 1, True),
    ("chute Loader, ds.to_memory()", "chute Loader, to_memory()", 2, True),
    ("chute.dataloader (processes, batched)", "chute.dataloader", 2, True),
    ("DataLoader, in-RAM arrays", "DataLoader, in-RAM arrays", 0, False),
    ("DataLoader, in-RAM arrays", "DataLoader, in-RAM arrays", 2, False),
    ("DataLoader, np.memmap", "DataLoader, np.memmap", 0, False),
    ("DataLoader, np.memmap", "DataLoader, np.memmap", 2, False),
    ("h5py, tuned chunk cache", "h5py, tuned", 0, False),
    ("h5py, tuned chunk cache", "h5py, tuned", 2, False),
]


def _loader_ring(setup: Setup) -> chute.Loader:
    ds = chute.open(setup.copy)
    return chute.Loader(
        ds, setup.batch_size, seed=setup.seed, num_workers=setup.workers, reuse_after=1
    )


# The opt-in fast path: a ring of reused slots instead of fresh memory per batch (the default).
RING = Contender(
    "chute Loader, reuse_after=1",
    "chute.open + Loader(reuse_after=1): a ring of reused slots, a batch valid until the next",
    copy_path,
    _loader_ring,
)


def _loader_in_ram(setup: Setup) -> chute.Loader:
    ds = chute.open(setup.copy).to_memory()
    return chute.Loader(ds, setup.batch_size, seed=setup.seed, num_workers=setup.workers)


# Reads from anonymous memory, like the gather limit: numpy asks for transparent huge pages for
# it, while a file map gets 2 MB pages only where the page cache happens to hold 2 MB folios
# (with 4 KB pages, random reads of 3 KB rows were ~25% slower here). This row separates the
# Loader's own overhead from the cost of reading through a memory map.
IN_RAM = Contender(
    "chute Loader, to_memory()",
    "chute.open(...).to_memory() + Loader: the dataset read into RAM first",
    copy_path,
    _loader_in_ram,
)


def make_dataset(root: Path, n: int, shape: tuple[int, ...], batch_size: int) -> Setup:
    """Random images and labels as a chute dataset, and the chute bench Setup reading it."""
    copy = root / "data.chute"
    step = max(1, (64 << 20) // int(np.prod(shape)))
    with chute.Writer(copy) as w:
        for start in range(0, n, step):
            rng = np.random.default_rng(start)
            m = min(step, n - start)
            w.extend(
                {
                    "x": rng.integers(0, 256, (m, *shape), dtype=np.uint8),
                    "y": rng.integers(0, 1000, m, dtype=np.int64),
                }
            )

    def chunks(multiple: int) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        # Opened per call and closed after: a map of the data left in this process would
        # halve the PSS that the rows' own maps of the same pages are charged.
        with chute.open(copy) as ds:
            rows = max(multiple, step // multiple * multiple)
            for start in range(0, n, rows):
                batch = ds[start : start + rows]
                yield start, {k: batch[k].numpy() for k in ds.schema}

    with chute.open(copy) as ds:
        schema = ds.schema
    return Setup(
        root=root,
        copy=copy,
        fields=schema,  # type: ignore[arg-type]  # both fields are fixed-shape
        num_samples=n,
        batch_size=batch_size,
        workers=0,
        seed=0,
        batches=tuple(chute.Order(n, batch_size, seed=0).plan()),
        chunks=chunks,
    )


def measure(contender: Contender, setup: Setup, epochs: int) -> dict[str, Any]:
    """Time to first batch, samples/s of each epoch, peak PSS after each epoch."""
    gc.collect()
    rates, pss, anon = [], [], []
    stats = None
    with peak_pss() as mem:
        t0 = time.perf_counter()
        loader = contender.open(setup)
        first_batch_s = None
        for epoch in range(epochs):
            if epoch and isinstance(loader, Iterator):  # one pass only (the gather limit)
                loader = None
                loader = contender.open(setup)
            samples, start = 0, time.perf_counter()
            for batch in loader:
                if first_batch_s is None:  # the first batch: its time is time to first batch
                    start = time.perf_counter()
                    first_batch_s = start - t0
                    continue
                samples += len(batch["x"])
            if samples:
                rates.append(samples / (time.perf_counter() - start))
            total, total_anon = mem.sample()
            pss.append((max(mem.peak, total) - mem.baseline) / MB)
            anon.append((max(mem.peak_anon, total_anon) - mem.baseline_anon) / MB)
        if hasattr(loader, "stats"):
            stats = str(loader.stats())
        del loader  # workers and buffers go before the sampler stops
    return {
        "first_batch_s": first_batch_s,
        "epoch_samples_per_s": rates,
        "samples_per_s": max(rates),
        "peak_pss_mb_by_epoch": pss,
        "peak_anon_mb_by_epoch": anon,
        "loader_stats": stats,
    }


def bench_dataset(name: str, n: int, shape: tuple[int, ...], args: argparse.Namespace) -> dict:
    by_name = {c.name: c for c in [*CONTENDERS, RING, IN_RAM]}
    missing = [c for _, c, _, _ in ROWS if c not in by_name]
    if missing:
        sys.exit(f"chute.bench.contenders has no {missing}; update ROWS in {__file__}")
    root = Path(tempfile.mkdtemp(prefix="chute-loader-bench-", dir=args.work_dir))
    try:
        print(f"{name}: writing {n:,} x {shape} uint8 to {root}", file=sys.stderr, flush=True)
        setup = make_dataset(root, n, shape, args.batch_size)
        stores = {}
        for _, cname, _, _ in ROWS:
            write = by_name[cname].write
            if write is not None and write not in stores:
                stores[write] = write(setup)
        for path in stores.values():  # a hot page cache: read every store once
            for f in [path] if path.is_file() else sorted(path.rglob("*")):
                if f.is_file():
                    f.read_bytes()
        results: list[dict[str, Any]] = [{} for _ in ROWS]
        for rep in range(args.reps):
            for i, (label, cname, workers, multi) in enumerate(ROWS):
                s = dataclasses.replace(setup, workers=workers or 0)
                how = "" if workers is None else f", {workers} workers"
                print(f"  rep {rep + 1}/{args.reps}: {label}{how}", file=sys.stderr, flush=True)
                r = measure(by_name[cname], s, args.epochs if multi else 1)
                best = results[i]
                if not best or r["samples_per_s"] > best["samples_per_s"]:
                    results[i] = {"row": label, "workers": workers, **r}
                results[i]["first_batch_s"] = min(
                    r["first_batch_s"], best.get("first_batch_s", float("inf"))
                )
        return summarize(name, n, shape, results)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def summarize(name: str, n: int, shape: tuple[int, ...], results: list[dict]) -> dict:
    limit = results[0]["samples_per_s"]
    plain = max(r["samples_per_s"] for r in results if r["row"].startswith("DataLoader, in-RAM"))
    ring = {r["workers"]: r["samples_per_s"] for r in results if "(ring)" in r["row"]}
    for r in results:
        if r["row"] == "chute Loader":  # fresh batches (the default) over the ring
            r["x_ring"] = r["samples_per_s"] / ring[r["workers"]]
        r["x_limit"] = r["samples_per_s"] / limit
        r["x_dataloader"] = r["samples_per_s"] / plain
        r["pss_mb"] = r["peak_pss_mb_by_epoch"][-1]
        r["anon_mb"] = r["peak_anon_mb_by_epoch"][-1]
        r["pss_first_mb"] = r["peak_pss_mb_by_epoch"][0]
        r["first_batch_ms"] = r["first_batch_s"] * 1e3
    return {"dataset": name, "samples": n, "shape": list(shape), "rows": results}


COLUMNS = [
    ("row", "row", "s"),
    ("workers", "workers", ""),
    ("samples_per_s", "samples/s", ",.0f"),
    ("x_limit", "x limit", ".2f"),
    ("x_dataloader", "x DataLoader", ".1f"),
    ("x_ring", "x ring", ".2f"),
    ("first_batch_ms", "1st batch ms", ",.0f"),
    ("pss_first_mb", "PSS MB ep1", ",.0f"),
    ("pss_mb", "PSS MB last", ",.0f"),
    ("anon_mb", "anon MB", ",.0f"),
]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--scale", type=float, default=1.0, help="fraction of the samples (1.0; >= 4 batches)"
    )
    p.add_argument("--quick", action="store_true", help="same as --scale 0.05 --reps 1")
    p.add_argument("--reps", type=int, default=3, help="interleaved repetitions, best kept (3)")
    p.add_argument("--epochs", type=int, default=3, help="epochs of the fast rows (3)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    p.add_argument("--work-dir", default=None, help="where the temporary stores go")
    p.add_argument("--json", default=str(RESULTS / "loader.json"), help="results file")
    args = p.parse_args(argv)
    if args.quick:
        args.scale, args.reps = 0.05, 1
    out = []
    for name in args.datasets:
        n, shape = DATASETS[name]
        res = bench_dataset(name, max(4 * args.batch_size, int(n * args.scale)), shape, args)
        out.append(res)
        print(
            f"\n{name}: {res['samples']:,} x {'x'.join(map(str, shape))} uint8 + int64 label, "
            f"batch {args.batch_size}, hot page cache, best of {args.reps}"
        )
        print(table(res["rows"], COLUMNS))
    path = write_json(
        args.json,
        {"batch_size": args.batch_size, "reps": args.reps, "epochs": args.epochs, "results": out},
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
