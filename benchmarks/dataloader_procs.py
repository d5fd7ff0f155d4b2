"""chute through torch DataLoader worker processes (``chute.dataloader``, batched __getitems__):
time and peak PSS per epoch, over several epochs with persistent workers.

A contender for ``benchmarks/loader.py`` (import :func:`run_dataloader_procs` and report it
beside the thread Loader and the plain per-sample DataLoader), and a script of its own:

    python benchmarks/dataloader_procs.py [--samples 4000] [--workers 2] [--epochs 3]
        [--json benchmarks/results/dataloader_procs.json]

(run from anywhere: ``_common`` is found next to this file, as for the other benchmarks).

Peak PSS is that of this process and all its children (the workers), sampled every 20 ms, above
what the tree used before the loader was made; PSS splits pages shared between processes (the
page cache of the mapped files), so it does not count them once per worker. Flat per-epoch
peaks mean the workers' memory does not grow with the epochs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import EPOCH_COLUMNS, RESULTS, TreeMemory, peak_pss, table, write_json

import chute
from chute.loader.dataloader import dataloader

MB = 1e6

NAME = "chute.dataloader (worker processes, batched __getitems__)"


def run_dataloader_procs(
    path: str | Path,
    batch_size: int,
    num_workers: int,
    epochs: int = 3,
    seed: int = 0,
    multiprocessing_context: str | None = None,
) -> dict[str, Any]:
    """Iterate the chute dataset at ``path`` for ``epochs`` epochs through ``chute.dataloader``
    (persistent workers); per epoch: seconds, samples/s, MB/s, peak PSS and anonymous PSS (MB)."""
    ds = chute.open(path)
    row_bytes = ds.nbytes / max(1, len(ds))
    before = TreeMemory().sample()
    dl = dataloader(
        ds,
        batch_size,
        seed=seed,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        multiprocessing_context=multiprocessing_context,
    )
    rows = []
    for epoch in range(epochs):
        dl.set_epoch(epoch)
        with peak_pss() as mem:
            t0 = time.perf_counter()
            samples = 0
            for batch in dl:
                samples += len(next(iter(batch.values())))
            seconds = time.perf_counter() - t0
        rows.append(
            {
                "epoch": epoch,
                "seconds": seconds,
                "samples_per_s": samples / seconds,
                "mb_per_s": samples * row_bytes / seconds / MB,
                "peak_pss_mb": (mem.peak - before[0]) / MB,
                "peak_anon_mb": (mem.peak_anon - before[1]) / MB,
            }
        )
    del dl
    return {
        "name": NAME,
        "dataset_mb": ds.nbytes / MB,
        "batch_size": batch_size,
        "workers": num_workers,
        "context": multiprocessing_context or "default",
        "epochs": rows,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=4000, help="of 3x128x128 uint8 + a label")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--context", choices=["fork", "spawn", "forkserver"], default=None)
    ap.add_argument("--json", type=Path, default=RESULTS / "dataloader_procs.json")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.chute"
        rng = np.random.default_rng(0)
        with chute.Writer(path) as w:
            for start in range(0, args.samples, 500):
                n = min(500, args.samples - start)
                w.extend(
                    {
                        "image": rng.integers(0, 256, (n, 3, 128, 128), dtype=np.uint8),
                        "label": rng.integers(0, 1000, n),
                    }
                )
        result = run_dataloader_procs(
            path, args.batch_size, args.workers, args.epochs, multiprocessing_context=args.context
        )
    print(
        f"{result['name']}: {result['workers']} workers ({result['context']}), "
        f"batch {result['batch_size']}, dataset {result['dataset_mb']:.0f} MB"
    )
    print(table(result["epochs"], EPOCH_COLUMNS))
    print(f"wrote {write_json(args.json, result)}")
    return result


if __name__ == "__main__":
    main()
