"""Conversion from the formats training data arrives in (Parquet, JSONL, WebDataset shards of
real photos) and a shuffled read of the result, chute side by side with the tools users would
otherwise use, in one run.

    python benchmarks/convert_sources.py            # 50k token rows, 2000 photos
    python benchmarks/convert_sources.py --quick    # 1/10 of that: a smoke run
    python benchmarks/convert_sources.py --litdata /path/to/venv/bin/python --json out.json

Sources, the same rows in each table format: ``tokens`` (list<int32>, 0-400 ids, mean 200)
and ``text`` (a short string): a Parquet file (zstd, row groups of 10k rows) and a JSONL
file. Images: JPEG quality 90 crops of real photos (``_photos.py``) with a ``cls`` label and a
``txt`` caption, in 4 WebDataset ``.tar`` shards, and the same JPEGs as a Hugging Face dataset
saved to disk (an ``Image()`` column and a ``ClassLabel``; left out without ``datasets``).

1. chute alone, ``chute.convert`` with 0, 1 and 2 reader threads: "rows/s" and "MB/s" count
   the source's bytes on disk per second; "out/in" is the converted dataset's bytes over the
   source's (for the photos: the image bytes stored over the JPEG bytes of the source, 1.00
   when every JPEG is kept byte for byte). Peak memory is the anonymous PSS above the
   baseline.
2. Conversion, chute (2 threads) vs the peers (``_source_peers.py`` says how each is called):
   the parquet token rows with LitData ``optimize`` (2 processes) and Hugging Face
   ``Dataset.from_parquet(...).save_to_disk(...)``; the photo shards with LitData
   ``optimize``. "chute x" is chute's rows/s over the peer's. LitData runs in a child process
   of ``--litdata PYTHON`` (an environment with litdata; it reuses this one's packages): its
   rows say "not run" and why when none is given or litdata does not import there.
3. A shuffled epoch of the token rows, batch 256, 2 workers, tokens padded with 0: the chute
   dataset in a ``chute.Loader``, the Hugging Face dataset (``load_from_disk``,
   ``with_format("torch")``) in a torch ``DataLoader``, and ``webdataset`` over the same rows
   written as ``.tar`` shards (a 1000-sample shuffle buffer). "chute x" as above.

Best of ``--reps`` (reads interleaved). The 1-minute load average is printed before and after
each part (the machine may be shared). Prints tables and writes JSON (``--json``, default
benchmarks/results/convert_sources.json). Never asserts on time.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _common import RESULTS, peak_pss, table, write_json
from _photos import photo_jpegs
from _source_peers import (
    chute_convert,
    chute_epoch,
    hf_convert,
    hf_epoch,
    litdata_convert,
    wds_epoch,
    write_token_shards,
)

MB = 1e6
IMAGE_FIELD = {"webdataset": "jpg", "hf-images": "image"}  # the photo sources' image field


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


def make_shards(folder: Path, jpegs: list[bytes], shards: int = 4) -> Path:
    out = folder / "shards"
    out.mkdir()
    n = len(jpegs)
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
    return out


def make_hf_images(folder: Path, jpegs: list[bytes]) -> Path | None:
    """The photos as a Hugging Face dataset saved to disk (an ``Image()`` column holding each
    JPEG's bytes, a ``ClassLabel`` label), or None without ``datasets``."""
    try:
        import datasets
    except ImportError:
        return None
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=10)}
    )
    images = [{"bytes": j, "path": None} for j in jpegs]
    labels = [i % 10 for i in range(len(jpegs))]
    ds = datasets.Dataset.from_dict({"image": images, "label": labels}, features=features)
    ds.save_to_disk(str(folder / "hf-photos"))
    return folder / "hf-photos"


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def timed_convert(src: Path, dst: Path, reps: int, **options: Any) -> tuple[float, float]:
    """(best seconds, peak anonymous MB) of ``chute.convert(src, dst, **options)``."""
    best, peak = float("inf"), 0.0
    for _ in range(reps):
        with peak_pss() as mem:
            best = min(best, chute_convert(src, dst, **options))
        peak = max(peak, (mem.peak_anon - mem.baseline_anon) / MB)
    return best, peak


def bench(folder: Path, n_rows: int, n_images: int, reps: int) -> list[dict[str, Any]]:
    rows = []
    sources = make_tables(folder, n_rows)
    jpegs = photo_jpegs(n_images)
    jpeg_bytes = sum(len(j) for j in jpegs)
    cases = [(k, p, n_rows) for k, p in sources.items()]
    cases.append(("webdataset", make_shards(folder, jpegs), n_images))
    hf_photos = make_hf_images(folder, jpegs)
    if hf_photos is not None:
        cases.append(("hf-images", hf_photos, n_images))
    for kind, src, n in cases:
        src_bytes = folder_bytes(src) if src.is_dir() else src.stat().st_size
        for workers in (0, 1, 2):
            dst = folder / f"{kind}-{workers}.chute"
            seconds, peak = timed_convert(src, dst, reps, workers=workers)
            if kind in IMAGE_FIELD:
                values = f"{IMAGE_FIELD[kind]}.values.npy"
                stored = sum(
                    (p / values).stat().st_size
                    for p in [dst, *dst.glob("part-*")]
                    if (p / values).exists()
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


def speed_row(
    source: str, tool: str, rows: int, seconds: float | None, chute_s: float, why: str = ""
) -> dict[str, Any]:
    """One row of a comparison: rows/s and chute's rows/s over it (the peer's seconds over
    chute's), or why it was not run."""
    if seconds is None:
        return {"source": source, "tool": tool, "rows": rows, "not_run": why}
    return {
        "source": source,
        "tool": tool,
        "rows": rows,
        "rows_s": rows / seconds,
        "chute_x": seconds / chute_s,
    }


def compare_convert(
    folder: Path, chute_rows: list[dict[str, Any]], reps: int, litdata: str | None
) -> list[dict[str, Any]]:
    """chute (2 threads, from ``chute_rows``) vs LitData optimize and HF save_to_disk."""
    out = []
    for kind, src in (("parquet", folder / "tok.parquet"), ("webdataset", folder / "shards")):
        mine = next(r for r in chute_rows if r["source"] == kind and r["workers"] == 2)
        n, chute_s = mine["rows"], mine["rows"] / mine["rows_s"]
        out.append(speed_row(kind, "chute convert, 2 threads", n, chute_s, chute_s))
        done = litdata_convert(litdata, kind, src, folder / f"litdata-{kind}", reps)
        tool, seconds = "LitData optimize, 2 processes", done.get("seconds")
        out.append(speed_row(kind, tool, n, seconds, chute_s, done.get("skipped", "")))
        if kind == "parquet":
            seconds = min(hf_convert(src, folder / "hf") for _ in range(reps))
            out.append(speed_row(kind, "HF from_parquet + save_to_disk", n, seconds, chute_s))
        print(f"  {kind}: compared", flush=True)
    return out


def compare_read(folder: Path, reps: int) -> list[dict[str, Any]]:
    """A shuffled epoch of the token rows: chute.Loader vs HF datasets vs webdataset."""
    urls = write_token_shards(folder / "tok.parquet", folder / "tok-shards")
    readers = {
        "chute Loader": lambda: chute_epoch(folder / "parquet-2.chute"),
        "HF load_from_disk + DataLoader": lambda: hf_epoch(folder / "hf"),
        "webdataset + DataLoader": lambda: wds_epoch(urls),
    }
    best: dict[str, tuple[int, float]] = {}
    for _ in range(reps):  # interleaved: each reader sees the same machine load
        for name, read in readers.items():
            rows, seconds = read()
            best[name] = min(best.get(name, (rows, float("inf"))), (rows, seconds))
            print(f"  {name}: {rows / seconds:,.0f} rows/s", flush=True)
    chute_s = best["chute Loader"][1]
    return [speed_row("parquet", name, n, s, chute_s) for name, (n, s) in best.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1/10 of the rows and photos")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--litdata", default=None, help="a Python that has litdata (else not run)")
    ap.add_argument("--json", default=str(RESULTS / "convert_sources.json"))
    ap.add_argument("--dir", default=None, help="scratch folder (default: a temp dir)")
    args = ap.parse_args()
    scale = args.scale / (10 if args.quick else 1)
    n_rows, n_images = int(50_000 * scale), int(2000 * scale)
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        rows = bench(Path(tmp), n_rows, n_images, args.reps)
        load.append(os.getloadavg()[0])
        converts = compare_convert(Path(tmp), rows, args.reps, args.litdata)
        load.append(os.getloadavg()[0])
        reads = compare_read(Path(tmp), args.reps)
        load.append(os.getloadavg()[0])
    loads = " -> ".join(f"{x:.1f}" for x in load)
    print(f"\n{n_rows} token rows, {n_images} photos, best of {args.reps}, {os.cpu_count()} CPUs")
    print(f"1-minute load average before and after each part: {loads}")
    print(table(rows, [
        ("source", "source", "s"), ("workers", "threads", "d"), ("source_mb", "source MB", ".1f"),
        ("rows_s", "rows/s", ",.0f"), ("mb_s", "MB/s", ".1f"), ("out_in", "out/in", ".2f"),
        ("peak_mb", "peak MB", ".0f"),
    ]))  # fmt: skip
    speed = [("source", "source", "s"), ("tool", "tool", "s"), ("rows_s", "rows/s", ",.0f"),
             ("chute_x", "chute x", ".2f"), ("not_run", "not run", "s")]  # fmt: skip
    print("\nConversion (photos/s for webdataset)\n" + table(converts, speed))
    print("\nShuffled epoch, batch 256, 2 workers\n" + table(reads, speed[:4]))
    payload = {
        "rows": rows,
        "convert": converts,
        "read": reads,
        "token_rows": n_rows,
        "photos": n_images,
        "load_average": load,
    }
    print(f"\nwrote {write_json(args.json, payload)}")


if __name__ == "__main__":
    main()
