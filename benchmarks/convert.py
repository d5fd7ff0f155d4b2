"""Conversion throughput: chute.convert from HDF5 and Zarr against the source's own read speed,
and chute.from_torch with 2 worker processes against a single-process loop, in one run.

    python benchmarks/convert.py             # ~300 MB per source, 2000 PNG samples
    python benchmarks/convert.py --quick     # 1/10 of that: a smoke run
    python benchmarks/convert.py --scale 2 --reps 5 --json out.json

Sources: an HDF5 file (chunked, uncompressed) and a Zarr v3 store (zstd, the default codec),
each holding ``image`` (N x 3072 uint8, CIFAR-sized rows with some structure, so zstd has
something to do) and ``label`` (N int64). For each source, side by side:

* read: the source's own sequential read, chunk-aligned row ranges (``ds[a:b]`` per dataset,
  the same ranges chute reads), results dropped.
* write: writing the same bytes from RAM to one plain file and ``fsync``: what the destination
  disk takes, whatever the converter does.
* floor: read, then write the bytes to one plain file and ``fsync``: the I/O any converter must
  do, one after the other (chute also checksums, writes .npy headers and a manifest).
* convert: ``chute.convert(src, dst)`` with its default single read-ahead thread.

A converter can at best overlap reading with writing, so it cannot beat the slower of "read" and
"write": "convert/bound" is convert against that bound, ``max(read, write)`` seconds. Where the
disk writes slower than the source reads (a page-cached source, or a slow destination disk),
"convert/read" is capped at write/read whatever the converter does.

"warm" rows read a source that is in the page cache; "cold" rows first evict it with
``posix_fadvise(DONTNEED)`` (no root needed), so reads come from the disk. MB/s counts the
source's uncompressed bytes. Peak memory is the anonymous PSS of the process above its
baseline during the conversion (file-backed page cache excluded): it stays near
``(workers + 2) * batch_bytes`` whatever the source's size. Best of ``--reps``, interleaved.

from_torch: a map-style Dataset that decodes one PNG (224x224x3) per ``__getitem__`` with PIL;
"loop" is a plain ``for i in range(len(ds)): ds[i]`` (decode only, nothing written). "CPU s"
adds up the CPU time of the main process and its workers: unlike wall time, it does not
depend on other work on the machine, and shows what parallel decoding costs.
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import zarr
from _common import RESULTS, peak_pss, table, write_json
from PIL import Image
from torch.utils.data import Dataset

import chute
from chute.bench.measure import evict
from chute.sources.base import BATCH_BYTES, plan_ranges

ROW = 3072
MB = 1e6


def make_images(n: int, seed: int = 0) -> np.ndarray:
    """Rows with structure (gradients + noise): compressible, like real images."""
    rng = np.random.default_rng(seed)
    base = np.linspace(0, 200, ROW, dtype=np.float32)
    out = np.empty((n, ROW), np.uint8)
    for a in range(0, n, 8192):
        b = min(n, a + 8192)
        noise = rng.integers(0, 24, (b - a, ROW), dtype=np.uint8)
        out[a:b] = (base + rng.integers(0, 32, (b - a, 1))).astype(np.uint8) + noise
    return out


def make_sources(folder: Path, n: int) -> dict[str, Path]:
    images, labels = make_images(n), np.arange(n, dtype=np.int64)
    h5 = folder / "src.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("image", data=images, chunks=(256, ROW))
        f.create_dataset("label", data=labels, chunks=(4096,))
    zr = folder / "src.zarr"
    g = zarr.open_group(zr, mode="w", zarr_format=3)
    g.create_array("image", shape=images.shape, chunks=(256, ROW), dtype=np.uint8)[:] = images
    g.create_array("label", shape=labels.shape, chunks=(4096,), dtype=np.int64)[:] = labels
    return {"hdf5 (chunked, raw)": h5, "zarr v3 (zstd)": zr}


def open_arrays(path: Path) -> tuple[Any, dict[str, Any]]:
    if path.suffix == ".h5":
        f = h5py.File(path, "r")
        return f, {k: f[k] for k in ("image", "label")}
    g = zarr.open_group(path, mode="r")
    return None, {k: g[k] for k in ("image", "label")}


def ranges(arrays: dict[str, Any]) -> list[range]:
    n = arrays["image"].shape[0]
    chunks = [a.chunks[0] for a in arrays.values()]
    return plan_ranges(n, ROW + 8, chunks, BATCH_BYTES)


def read_all(path: Path) -> list[np.ndarray]:
    """The source's blocks in RAM, in the order :func:`read_source` writes them."""
    handle, arrays = open_arrays(path)
    try:
        return [np.ascontiguousarray(a[r.start : r.stop]) for r in ranges(arrays)
                for a in arrays.values()]  # fmt: skip
    finally:
        if handle is not None:
            handle.close()


def write_blocks(blocks: list[np.ndarray], sink: Path) -> None:
    """Write ``blocks`` (already in RAM) to ``sink`` and ``fsync``: the destination's speed."""
    with open(sink, "wb") as out:
        for block in blocks:
            out.write(memoryview(block).cast("B"))
        out.flush()
        os.fsync(out.fileno())


def read_source(path: Path, sink: Path | None = None) -> None:
    """The source's own sequential read; with ``sink``, also write the bytes + fsync."""
    handle, arrays = open_arrays(path)
    out = open(sink, "wb") if sink else None  # noqa: SIM115
    try:
        for r in ranges(arrays):
            for a in arrays.values():
                block = a[r.start : r.stop]
                if out:
                    out.write(memoryview(np.ascontiguousarray(block)).cast("B"))
        if out:
            out.flush()
            os.fsync(out.fileno())
    finally:
        if out:
            out.close()
        if handle is not None:
            handle.close()


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (DataLoader workers)."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def timed(fn: Callable[[], Any], cold: Path | None = None) -> tuple[float, float, float]:
    """(wall seconds, peak anonymous PSS above baseline in bytes, CPU seconds) of ``fn()``."""
    if cold is not None:  # every file of the source leaves the page cache
        evict([cold] if cold.is_file() else [p for p in cold.rglob("*") if p.is_file()])
    with peak_pss() as mem:
        t0, cpu0 = time.perf_counter(), cpu_seconds()
        fn()
        dt, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    return dt, mem.peak_anon - mem.baseline_anon, cpu


def bench_convert(folder: Path, n: int, reps: int) -> list[dict[str, Any]]:
    nbytes = n * (ROW + 8)
    rows = []
    for name, src in make_sources(folder, n).items():
        for cache in ("warm", "cold"):
            cold = src if cache == "cold" else None
            best: dict[str, float] = {}
            peak = 0.0
            blocks = read_all(src)
            for _ in range(reps):
                read_source(src)  # warm the page cache (or the code paths, for "cold")
                for key, fn in (
                    ("read", lambda s=src: read_source(s)),
                    ("write", lambda b=blocks: write_blocks(b, folder / "raw.bin")),
                    ("floor", lambda s=src: read_source(s, folder / "raw.bin")),
                    ("convert", lambda s=src: chute.convert(s, folder / "o.chute", progress=False)),
                ):
                    dt, mem, _ = timed(fn, cold)
                    best[key] = min(best.get(key, float("inf")), dt)
                    if key == "convert":
                        peak = max(peak, mem)
                    shutil.rmtree(folder / "o.chute", ignore_errors=True)
                    (folder / "raw.bin").unlink(missing_ok=True)
            del blocks
            mbs = {k: nbytes / v / MB for k, v in best.items()}
            rows.append({
                "source": name, "cache": cache, "mb": nbytes / MB,
                "read_mbs": mbs["read"], "write_mbs": mbs["write"], "floor_mbs": mbs["floor"],
                "convert_mbs": mbs["convert"], "vs_read": best["read"] / best["convert"],
                "vs_floor": best["floor"] / best["convert"],
                "vs_bound": max(best["read"], best["write"]) / best["convert"],
                "peak_mb": peak / MB,
            })  # fmt: skip
    return rows


class PNGs(Dataset):
    """One PNG decode per ``__getitem__``, as a folder-of-images dataset does."""

    def __init__(self, n: int):
        rng = np.random.default_rng(1)
        ramp = np.linspace(0, 180, 224 * 224 * 3).reshape(224, 224, 3)
        self.blobs = []
        for _ in range(n):
            img = (ramp + rng.integers(0, 60, (224, 224, 3))).astype(np.uint8)
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="PNG")
            self.blobs.append(buf.getvalue())

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        return np.asarray(Image.open(io.BytesIO(self.blobs[i])).convert("RGB")), i


def bench_torch(folder: Path, n: int, reps: int) -> list[dict[str, Any]]:
    data = PNGs(n)
    dst = folder / "t.chute"

    def loop() -> None:
        for i in range(len(data)):
            data[i]

    def convert(workers: int) -> Callable[[], Any]:
        return lambda: chute.from_torch(data, dst, num_workers=workers, progress=False)

    cases = [("loop, 1 process", loop), ("from_torch, 0 workers", convert(0)),
             ("from_torch, 2 workers", convert(2))]  # fmt: skip
    best: dict[str, tuple[float, float, float]] = {}
    for _ in range(reps):
        for name, fn in cases:
            dt, mem, cpu = timed(fn)
            shutil.rmtree(dst, ignore_errors=True)
            old = best.get(name, (float("inf"), 0.0, float("inf")))
            best[name] = (min(old[0], dt), max(old[1], mem), min(old[2], cpu))
    loop_s = best["loop, 1 process"][0]
    return [
        {"case": k, "samples_s": n / dt, "vs_loop": loop_s / dt, "cpu_s": cpu, "peak_mb": mem / MB}
        for k, (dt, mem, cpu) in best.items()
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1/10 of the samples")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", default=str(RESULTS / "convert.json"))
    ap.add_argument("--dir", default=None, help="scratch folder (default: a temp dir)")
    args = ap.parse_args()
    scale = args.scale / (10 if args.quick else 1)
    n, n_png = int(100_000 * scale), int(2000 * scale)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        conv = bench_convert(Path(tmp), n, args.reps)
        torch_rows = bench_torch(Path(tmp), n_png, args.reps)
    print(f"\nconvert: {n} samples, {conv[0]['mb']:.0f} MB per source, best of {args.reps}")
    print(table(conv, [
        ("source", "source", "s"), ("cache", "cache", "s"), ("read_mbs", "read MB/s", ".0f"),
        ("write_mbs", "write MB/s", ".0f"), ("floor_mbs", "read+write MB/s", ".0f"),
        ("convert_mbs", "convert MB/s", ".0f"), ("vs_read", "convert/read", ".2f"),
        ("vs_floor", "convert/floor", ".2f"), ("vs_bound", "convert/bound", ".2f"),
        ("peak_mb", "peak MB", ".0f"),
    ]))  # fmt: skip
    print(f"\nfrom_torch: {n_png} PNG samples (224x224x3), best of {args.reps}")
    print(table(torch_rows, [
        ("case", "case", "s"), ("samples_s", "samples/s", ".0f"), ("vs_loop", "vs loop", ".2f"),
        ("cpu_s", "CPU s (all procs)", ".2f"),
        ("peak_mb", "peak MB", ".0f"),
    ]))  # fmt: skip
    path = write_json(args.json, {"convert": conv, "from_torch": torch_rows, "samples": n,
                                  "png_samples": n_png, "reps": args.reps,
                                  "batch_bytes": BATCH_BYTES})  # fmt: skip
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
