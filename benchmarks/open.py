"""Opening does not grow with the data's size (at a fixed number of files); to_memory() reads
at file-read speed.

    python benchmarks/open.py [--dir /tmp] [--small-gb 0.2] [--large-gb 2] [--repeats 5]

Writes two datasets of the same schema (a 3x64x64 uint8 image, an int64 label and a ragged
int32 token field), one ~10x larger than the other, then measures, side by side in one run:

  * ``open`` then ``first batch``: ``chute.open(path)``, then ``gather`` of 256 random samples,
    with the files evicted from the page cache first (cold) and with all of them in it (warm).
    Target: large / small ~ 1 (open reads the manifest and stats each file; a batch touches 256
    samples wherever they lie). A cold first batch is 256 random disk reads, so its time is the
    disk's.
  * ``to_memory()`` against ``np.fromfile`` of the same files (the bytes a plain sequential read
    must move), cold and warm. Reported as throughput; target: to_memory >= 0.8x fromfile.

Each repeat runs the contenders in alternating order and the table reports medians. Prints a
table and writes JSON (``--json``, default benchmarks/results/open.json). Never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import chute

IMAGE = (3, 64, 64)
SCHEMA = {
    "image": chute.fields.Tensor(IMAGE, "uint8"),
    "label": chute.fields.Tensor((), "int64"),
    "tokens": chute.Ragged("int32"),
}
MEAN_TOKENS = 32
SAMPLE_BYTES = int(np.prod(IMAGE)) + 8 + 8 + 4 * MEAN_TOKENS  # image, label, offset, tokens
BATCH = 256
STEPS = ("open", "first batch")
CHUNK = 4096


def write_dataset(path: Path, n: int) -> float:
    """Write ``n`` samples of SCHEMA in chunks (bounded memory); returns seconds taken."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (CHUNK, *IMAGE), dtype=np.uint8)
    tokens = rng.integers(0, 50_000, CHUNK * 2 * MEAN_TOKENS, dtype=np.int32)
    t0 = time.perf_counter()
    with chute.Writer(path, SCHEMA, overwrite=True) as w:
        for start in range(0, n, CHUNK):
            k = min(CHUNK, n - start)
            lengths = rng.integers(0, 2 * MEAN_TOKENS + 1, k)
            ends = np.cumsum(lengths)
            images[:, 0, 0, 0] = np.arange(start, start + CHUNK) % 256  # samples differ
            w.extend(
                {
                    "image": images[:k],
                    "label": np.arange(start, start + k),
                    "tokens": [tokens[e - m : e] for e, m in zip(ends, lengths, strict=True)],
                }
            )
    return time.perf_counter() - t0


def data_files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*.npy"))


def evict(path: Path) -> None:
    """Drop the dataset's pages from the OS page cache (no root needed: POSIX_FADV_DONTNEED)."""
    for file in [path / "chute.json", *data_files(path)]:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def cache(path: Path) -> None:
    """Read every file of the dataset once, so that it is all in the OS page cache."""
    buf = bytearray(64 << 20)
    for file in data_files(path):
        with open(file, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def timed(fn: Callable[[], object], before: Callable[[], None] | None = None) -> float:
    """Seconds of ``fn()``; freeing its result (e.g. unmapping) is not counted."""
    if before is not None:
        before()
    t0 = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - t0
    del result
    return seconds


def open_then_batch(path: Path, indices: np.ndarray) -> tuple[float, float]:
    """Seconds of ``chute.open`` and of the first ``gather`` after it."""
    t0 = time.perf_counter()
    ds = chute.open(path)
    t1 = time.perf_counter()
    batch = ds.gather(indices)
    t2 = time.perf_counter()
    del batch, ds  # unmapping happens here, outside the timed region
    return t1 - t0, t2 - t1


def from_file(path: Path) -> Callable[[], object]:
    files = data_files(path)
    return lambda: [np.fromfile(f, np.uint8) for f in files]


def to_memory(path: Path) -> Callable[[], object]:
    return lambda: chute.open(path).to_memory()


def median_ms(times: list[float]) -> float:
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="where to write the datasets (a temp dir)")
    parser.add_argument("--small-gb", type=float, default=0.2)
    parser.add_argument("--large-gb", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", default=str(Path(__file__).parent / "results" / "open.json"))
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="chute-open-", dir=args.dir))
    sizes = {"small": args.small_gb, "large": args.large_gb}
    try:
        paths, info = {}, {}
        for name, gb in sizes.items():
            n = int(gb * 1e9 / SAMPLE_BYTES)
            paths[name] = root / f"{name}.chute"
            seconds = write_dataset(paths[name], n)
            nbytes = chute.open(paths[name]).nbytes
            info[name] = {"samples": n, "bytes": nbytes, "write_s": seconds}
            print(f"wrote {name}: {n} samples, {nbytes / 1e9:.2f} GB in {seconds:.1f} s")

        rng = np.random.default_rng(1)
        # opened[name][state] = [(open seconds, first batch seconds), ...]
        opened: dict[str, dict[str, list[tuple[float, float]]]] = {
            name: {"cold": [], "warm": []} for name in sizes
        }
        loaded: dict[str, dict[str, list[float]]] = {
            f"{name}/{how}": {"cold": [], "warm": []}
            for name in sizes
            for how in ("to_memory", "fromfile")
        }
        # Two phases, so that reading gigabytes into RAM does not disturb the millisecond
        # timings; in each, the contenders alternate order and one untimed round warms up.
        for r in range(-1, args.repeats):
            order = list(sizes) if r % 2 == 0 else list(reversed(sizes))
            for name in order:
                idx = rng.integers(0, info[name]["samples"], BATCH)
                evict(paths[name])
                cold = open_then_batch(paths[name], idx)
                cache(paths[name])
                warm = open_then_batch(paths[name], idx)
                if r >= 0:
                    opened[name]["cold"].append(cold)
                    opened[name]["warm"].append(warm)
        for r in range(-1, args.repeats):
            for name in sizes:
                hows = ("to_memory", "fromfile") if r % 2 == 0 else ("fromfile", "to_memory")
                for how in hows:
                    fn = to_memory(paths[name]) if how == "to_memory" else from_file(paths[name])
                    cold = timed(fn, lambda p=paths[name]: evict(p))
                    warm = timed(fn)
                    if r >= 0:
                        loaded[f"{name}/{how}"]["cold"].append(cold)
                        loaded[f"{name}/{how}"]["warm"].append(warm)

        columns = [(c, k, what) for c in ("cold", "warm") for k, what in enumerate(STEPS)]
        ms = {
            name: {
                f"{c}_{what}_ms": median_ms([t[k] for t in opened[name][c]])
                for c, k, what in columns
            }
            for name in sizes
        }
        print(f"\nchute.open, then gather of {BATCH} random samples (median of {args.repeats}, ms)")
        print(f"{'dataset':<12} {'GB':>5} " + " ".join(f"{c + ' ' + w:>17}" for c, _, w in columns))
        for name in sizes:
            cells = " ".join(f"{v:>17.2f}" for v in ms[name].values())
            print(f"{name:<12} {info[name]['bytes'] / 1e9:>5.2f} {cells}")
        ratio = {key: ms["large"][key] / ms["small"][key] for key in ms["large"]}
        print(f"{'large/small':<18} " + " ".join(f"{v:>17.2f}" for v in ratio.values()))
        print("(target ~1; a cold first batch is 256 random disk reads: the disk's latency)")
        rows = [{"dataset": name, **info[name], **ms[name]} for name in sizes]

        print("\nread everything into RAM: to_memory() vs np.fromfile of the same files (GB/s)")
        print(f"{'dataset':<8} {'cache':<5} {'to_memory':>10} {'fromfile':>10} {'ratio':>7}")
        reads = []
        for name in sizes:
            for state in ("cold", "warm"):
                gbps = {
                    how: info[name]["bytes"]
                    / 1e9
                    / statistics.median(loaded[f"{name}/{how}"][state])
                    for how in ("to_memory", "fromfile")
                }
                share = gbps["to_memory"] / gbps["fromfile"]
                print(
                    f"{name:<8} {state:<5} {gbps['to_memory']:>10.2f} {gbps['fromfile']:>10.2f} "
                    f"{share:>6.2f}x"
                )
                reads.append({"dataset": name, "cache": state, **gbps, "ratio": share})
        print("(ratio = to_memory / fromfile throughput; target >= 0.8x)")

        result = {
            "benchmark": "open",
            "machine": {
                "platform": platform.platform(),
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "numpy": np.__version__,
                "chute": chute.__version__,
            },
            "batch": BATCH,
            "repeats": args.repeats,
            "open_then_first_batch": rows,
            "ratio_large_over_small": ratio,
            "to_memory_vs_fromfile": reads,
            "raw_seconds": {"open": opened, "read": loaded},
        }
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
        print(f"\nwrote {out}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
