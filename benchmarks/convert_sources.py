"""Conversion throughput from the formats training data arrives in: Parquet, JSONL and
WebDataset shards of real photos, with 0, 1 and 2 reader threads, in one run.

    python benchmarks/convert_sources.py            # 50k token rows, 2000 photos
    python benchmarks/convert_sources.py --quick    # 1/10 of that: a smoke run
    python benchmarks/convert_sources.py --scale 4 --reps 3 --json out.json

Sources, the same rows in each table format: ``tokens`` (list<int32>, 0-400 ids, mean 200)
and ``text`` (a short string): a Parquet file (zstd, row groups of 10k rows) and a JSONL
file. Images: JPEG quality 90 crops of real photos (``_photos.py``) with a ``cls`` label and a
``txt`` caption, in 4 WebDataset ``.tar`` shards. "rows/s" and "MB/s" count the source's
bytes on disk per second of ``chute.convert``; "out/in" is the converted dataset's bytes over
the source's (for the shards: the image bytes stored over the JPEG bytes in the shards, 1.00
when every JPEG is kept byte for byte). Peak memory is the anonymous PSS above the baseline.
Best of ``--reps``. LitData ``optimize``, Hugging Face ``datasets`` and ``webdataset`` readers
are not measured here: none of them is a dependency of chute or its benchmarks.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _common import RESULTS, peak_pss, table, write_json
from _photos import photo_jpegs

import chute

MB = 1e6


def make_tables(folder: Path, n: int) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    lens = rng.integers(0, 401, n)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    values = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
    tokens = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
    t = pa.table({"tokens": tokens, "text": [f"document {i} of the corpus" for i in range(n)]})
    pq.write_table(t, folder / "tok.parquet", row_group_size=10_000, compression="zstd")
    with open(folder / "tok.jsonl", "w") as f:
        for a, b, i in zip(offsets[:-1], offsets[1:], range(n), strict=True):
            row = {"tokens": values[a:b].tolist(), "text": f"document {i} of the corpus"}
            f.write(json.dumps(row) + "\n")
    return {"parquet": folder / "tok.parquet", "jsonl": folder / "tok.jsonl"}


def make_shards(folder: Path, n: int, shards: int = 4) -> tuple[Path, int]:
    out = folder / "shards"
    out.mkdir()
    jpegs = photo_jpegs(n)
    per = -(-n // shards)
    for s in range(shards):
        with tarfile.open(out / f"train-{s:03d}.tar", "w") as tar:
            for i in range(s * per, min(n, (s + 1) * per)):
                for ext, data in (
                    ("jpg", jpegs[i]),
                    ("cls", str(i % 10).encode()),
                    ("txt", f"photo {i}".encode()),
                ):
                    info = tarfile.TarInfo(f"{i:06d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return out, sum(len(j) for j in jpegs)


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def timed_convert(src: Path, dst: Path, reps: int, **options: Any) -> tuple[float, float]:
    """(best seconds, peak anonymous MB) of ``chute.convert(src, dst, **options)``."""
    best, peak = float("inf"), 0.0
    for _ in range(reps):
        with peak_pss() as mem:
            t0 = time.perf_counter()
            chute.convert(src, dst, overwrite=True, progress=False, **options)
            best = min(best, time.perf_counter() - t0)
        peak = max(peak, (mem.peak_anon - mem.baseline_anon) / MB)
    return best, peak


def bench(folder: Path, n_rows: int, n_images: int, reps: int) -> list[dict[str, Any]]:
    rows = []
    sources = make_tables(folder, n_rows)
    shards, jpeg_bytes = make_shards(folder, n_images)
    cases = [(k, p, n_rows) for k, p in sources.items()] + [("webdataset", shards, n_images)]
    for kind, src, n in cases:
        src_bytes = folder_bytes(src) if src.is_dir() else src.stat().st_size
        for workers in (0, 1, 2):
            dst = folder / f"{kind}-{workers}.chute"
            seconds, peak = timed_convert(src, dst, reps, workers=workers)
            if kind == "webdataset":
                stored = sum(
                    (p / "jpg.values.npy").stat().st_size
                    for p in [dst, *dst.glob("part-*")]
                    if (p / "jpg.values.npy").exists()
                )
                ratio = stored / jpeg_bytes  # .npy headers: a few hundred bytes per file
            else:
                ratio = folder_bytes(dst) / src_bytes
            rows.append(
                {
                    "source": kind,
                    "workers": workers,
                    "rows": n,
                    "source_mb": src_bytes / MB,
                    "rows_s": n / seconds,
                    "mb_s": src_bytes / MB / seconds,
                    "out_in": ratio,
                    "peak_mb": peak,
                }
            )
            print(f"  {kind} workers={workers}: {n / seconds:,.0f} rows/s", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1/10 of the rows and photos")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json", default=str(RESULTS / "convert_sources.json"))
    ap.add_argument("--dir", default=None, help="scratch folder (default: a temp dir)")
    args = ap.parse_args()
    scale = args.scale / (10 if args.quick else 1)
    n_rows, n_images = int(50_000 * scale), int(2000 * scale)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        rows = bench(Path(tmp), n_rows, n_images, args.reps)
    print(f"\n{n_rows} token rows, {n_images} photos, best of {args.reps}, {os.cpu_count()} CPUs")
    print(table(rows, [
        ("source", "source", "s"), ("workers", "threads", "d"), ("source_mb", "source MB", ".1f"),
        ("rows_s", "rows/s", ",.0f"), ("mb_s", "MB/s", ".1f"), ("out_in", "out/in", ".2f"),
        ("peak_mb", "peak MB", ".0f"),
    ]))  # fmt: skip
    path = write_json(args.json, {"rows": rows, "token_rows": n_rows, "photos": n_images})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
