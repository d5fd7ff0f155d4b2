"""Soak: several loaders over one dataset at once, for many epochs. Does anything drift?

    python benchmarks/soak.py [--samples 8000] [--epochs 6] [--loaders 4] [--workers 2]
        [--kind dataloader|loader] [--json benchmarks/results/soak.json]

``--loaders`` consumers run in parallel threads, each over its own ``chute.dataloader`` with
``--workers`` worker processes (``--kind loader``: a ``chute.Loader`` with that many worker
threads), all reading the same dataset, epoch after epoch (persistent workers, reshuffled with
``set_epoch``). Per epoch it reports the throughput of all loaders together, the peak PSS and
anonymous PSS of the whole process tree (workers included, above the baseline before the
loaders were made), and an order-independent checksum of what each loader delivered. The
checksums must all equal the dataset's own: every sample exactly once, intact, in every epoch,
for every loader. Peak memory should be flat across epochs: growth means a leak. Anonymous
memory is the telling column: PSS also counts the dataset's file pages, which rise as the
workers map more of the file (bounded by its size) and fall as the kernel reclaims them.

Benchmarks never assert on wall time; the checksum mismatch is the one failure (exit code 1).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import EPOCH_COLUMNS, RESULTS, TreeMemory, peak_pss, table, write_json

import chute

MB = 1e6
_K = np.random.default_rng(12345).integers(1, 2**63, 4096, dtype=np.uint64) | np.uint64(1)


def checksum(batch: dict[str, Any]) -> int:
    """An order-independent checksum of a batch (sum mod 2**64 of per-sample hashes of the
    index, the image and the tokens): equal for any order and any batching of one epoch."""
    idx = batch["idx"].numpy().astype(np.uint64)
    img = batch["image"].numpy().reshape(len(idx), -1).view(np.uint64)
    with np.errstate(over="ignore"):
        rows = (img * _K[: img.shape[1]]).sum(axis=1, dtype=np.uint64)
        total = ((rows + idx * _K[-1]) * (idx | np.uint64(1))).sum(dtype=np.uint64)
        tok = batch["tokens"]
        lengths = np.diff(tok.offsets.numpy())
        weight = np.repeat(idx * _K[-2] + np.uint64(1), lengths)
        total += (tok.values.numpy().astype(np.uint64) * weight).sum(dtype=np.uint64)
    return int(total)


def make_dataset(path: Path, n: int) -> Path:
    rng = np.random.default_rng(0)
    with chute.Writer(path) as w:
        for start in range(0, n, 1000):
            m = min(1000, n - start)
            w.extend(
                {
                    "idx": np.arange(start, start + m, dtype=np.int64),
                    "image": rng.integers(0, 256, (m, 3, 64, 64), dtype=np.uint8),
                    "tokens": [rng.integers(0, 50_000, 1 + i % 97) for i in range(m)],
                }
            )
    return path


def make_loader(ds: chute.Dataset, kind: str, batch_size: int, workers: int, seed: int) -> Any:
    if kind == "loader":
        return chute.Loader(ds, batch_size, seed=seed, num_workers=workers)
    return chute.dataloader(
        ds, batch_size, seed=seed, num_workers=workers, persistent_workers=workers > 0
    )


def consume(loader: Any, epoch: int, out: dict[str, Any]) -> None:
    """One loader's epoch, in its own thread: its checksum and sample count, or its error."""
    try:
        loader.set_epoch(epoch)
        total = count = 0
        for batch in loader:
            total = (total + checksum(batch)) % 2**64
            count += len(batch["idx"])
        out.update(sum=total, count=count)
    except BaseException as exc:  # re-raised in the main thread
        out["error"] = exc


def soak(args: argparse.Namespace, path: Path) -> dict[str, Any]:
    ds = chute.open(path)
    expected = checksum(ds.gather(np.arange(len(ds))))
    before = TreeMemory().sample()
    loaders = [
        make_loader(ds, args.kind, args.batch_size, args.workers, seed=i)
        for i in range(args.loaders)
    ]
    rows = []
    for epoch in range(args.epochs):
        out: list[dict[str, Any]] = [{} for _ in loaders]
        threads = [
            threading.Thread(target=consume, args=(dl, epoch, o))
            for dl, o in zip(loaders, out, strict=True)
        ]
        with peak_pss() as mem:
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            seconds = time.perf_counter() - t0
        for o in out:
            if "error" in o:
                raise o["error"]
        sums, counts = [o["sum"] for o in out], [o["count"] for o in out]
        samples = sum(counts)
        rows.append(
            {
                "epoch": epoch,
                "seconds": seconds,
                "samples_per_s": samples / seconds,
                "mb_per_s": samples * ds.nbytes / len(ds) / seconds / MB,
                "peak_pss_mb": (mem.peak - before[0]) / MB,
                "peak_anon_mb": (mem.peak_anon - before[1]) / MB,
                "checksums_ok": sum(s == expected for s in sums),
                "checksums": [f"{s:016x}" for s in sums],
            }
        )
        print(
            f"epoch {epoch}: {seconds:.2f} s, {samples / seconds:,.0f} samples/s, peak PSS "
            f"{rows[-1]['peak_pss_mb']:.0f} MB, checksums {rows[-1]['checksums_ok']}"
            f"/{args.loaders} ok",
            flush=True,
        )
    loaders.clear()  # stops the workers
    return {
        "kind": args.kind,
        "loaders": args.loaders,
        "workers_per_loader": args.workers,
        "samples": len(ds),
        "dataset_mb": ds.nbytes / MB,
        "batch_size": args.batch_size,
        "expected_checksum": f"{expected:016x}",
        "all_checksums_ok": all(r["checksums_ok"] == args.loaders for r in rows),
        # after the first epoch (workers start, caches fill): MB per epoch, least squares
        "peak_pss_growth_mb_per_epoch": _trend([r["peak_pss_mb"] for r in rows[1:]]),
        "peak_anon_growth_mb_per_epoch": _trend([r["peak_anon_mb"] for r in rows[1:]]),
        "epochs": rows,
    }


def _trend(values: list[float]) -> float:
    return float(np.polyfit(range(len(values)), values, 1)[0]) if len(values) > 1 else 0.0


COLUMNS = [*EPOCH_COLUMNS, ("checksums_ok", "checksums ok", "d")]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=8000, help="of 3x64x64 uint8 + tokens")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--loaders", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2, help="per loader")
    ap.add_argument("--kind", choices=["dataloader", "loader"], default="dataloader")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--json", type=Path, default=RESULTS / "soak.json")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = make_dataset(Path(tmp) / "soak.chute", args.samples)
        result = soak(args, path)
    print(
        f"\n{result['loaders']} x {result['kind']} ({result['workers_per_loader']} workers "
        f"each) over one {result['dataset_mb']:.0f} MB dataset, batch {result['batch_size']}"
    )
    print(table(result["epochs"], COLUMNS))
    print(
        f"after epoch 0, peak PSS {result['peak_pss_growth_mb_per_epoch']:+.2f} MB/epoch, peak "
        f"anon {result['peak_anon_growth_mb_per_epoch']:+.2f} MB/epoch; "
        f"checksums {'all equal the dataset' if result['all_checksums_ok'] else 'MISMATCH'}"
    )
    print(f"wrote {write_json(args.json, result)}")
    if not result["all_checksums_ok"]:
        raise SystemExit(1)
    return result


if __name__ == "__main__":
    main()
