"""The ragged / bytes gather: speed and peak memory, the old flat-index take, numpy's segmented
copies and the compiled one.

    python benchmarks/ragged_gather.py [--dir /tmp] [--repeats 7]

The old gather built ``np.arange(total) + np.repeat(...)`` (16 bytes of int64
index per stored value) and gathered a batch over several parts twice. The new one computes the
batch's offsets, allocates one output and copies each sample's slice into it
(:mod:`chute.columns.segments`): one compiled loop when numba is installed, else numpy (slice by
slice, or for tiny samples one ``take`` with an int32 index). Side by side in one run, on warm
files, for each case: ``old`` (the previous code, kept here as the reference), ``slices`` and
``index`` (numpy's copy forced onto each strategy), ``numpy`` (the strategy numpy's copy picks,
:data:`chute.columns.segments.TINY_SAMPLE_VALUES`), ``new`` (what the gather runs: the compiled
copy when numba is installed), all on the same pieces of the batch, and ``ds.gather`` (the
whole call: index checks, file recheck, tensors). Reports the median time and the tracemalloc
peak over the batch's bytes. Prints a table and writes JSON (``--json``, default
benchmarks/results/ragged_gather.json). Never asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import RESULTS, table, write_json

import chute
from chute.columns import gather as g
from chute.columns import segments as seg

# (case, dtype, mean values per sample, samples in the batch, part_size)
CASES = [
    ("bytes 100KB", "uint8", 100_000, 256, None),
    ("bytes 100KB, 4 parts", "uint8", 100_000, 256, 64),
    ("tokens 4", "int32", 4, 1024, None),
    ("tokens 16", "int32", 16, 1024, None),
    ("tokens 64", "int32", 64, 1024, None),
    ("tokens 256", "int32", 256, 1024, None),
    ("tokens 16, 4 parts", "int32", 16, 1024, 256),
    ("tokens 1024", "int32", 1024, 256, None),
]


def old_var_take(
    values: np.ndarray, offsets: np.ndarray, idx: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The previous ragged take (checks left out): one flat int64 index over the batch."""
    starts = offsets[idx]
    lengths = offsets[idx + 1] - starts
    batch_offsets = np.zeros(len(idx) + 1, np.int64)
    np.cumsum(lengths, out=batch_offsets[1:])
    flat = np.arange(int(batch_offsets[-1]), dtype=np.int64)
    flat += np.repeat(starts - batch_offsets[:-1], lengths)
    return np.take(values, flat, axis=0, mode="clip"), batch_offsets


def old_gather(ds: chute.Dataset, name: str, idx: np.ndarray) -> chute.RaggedBatch:
    """The previous gather_var: each part's take, then (several parts) a second take over
    their concatenation to restore the batch's order; a RaggedBatch of tensors."""
    pieces = ds._pieces(name, ds._split(idx))  # a benchmark of the internals
    if len(pieces) == 1 and pieces[0].pos is None:
        values, offsets = old_var_take(pieces[0].arrays["values"], pieces[0].arrays["offsets"], idx)
    else:
        vals, offs, order = [], [np.zeros(1, np.int64)], []
        for piece in pieces:
            v, o = old_var_take(piece.arrays["values"], piece.arrays["offsets"], piece.local)
            offs.append(o[1:] + offs[-1][-1])
            vals.append(v)
            order.append(piece.pos)
        inverse = np.empty(len(idx), np.int64)
        inverse[np.concatenate(order)] = np.arange(len(idx))
        values, offsets = old_var_take(np.concatenate(vals), np.concatenate(offs), inverse)
    return chute.RaggedBatch(torch.from_numpy(values), torch.from_numpy(offsets))


def new_gather(ds: chute.Dataset, name: str, idx: np.ndarray) -> Any:
    """The new data path, at the same level as :func:`old_gather` (no index check, no file
    recheck): ``gather_var`` on the batch's pieces."""
    pieces, f = ds._pieces(name, ds._split(idx)), ds.schema[name]
    return g.gather_var(pieces, f.dtype, f.inner_shape, len(idx))  # type: ignore[union-attr]


def numpy_copy(threshold: int) -> Callable[[chute.Dataset, str, np.ndarray], Any]:
    """:func:`new_gather` with numpy's segmented copy (no compiled kernel), its threshold set
    to ``threshold``."""

    def run(ds: chute.Dataset, name: str, idx: np.ndarray) -> Any:
        before = seg.TINY_SAMPLE_VALUES, seg.kernels
        seg.TINY_SAMPLE_VALUES, seg.kernels = threshold, lambda: None  # type: ignore[assignment]
        try:
            return new_gather(ds, name, idx)
        finally:
            seg.TINY_SAMPLE_VALUES, seg.kernels = before  # type: ignore[assignment]

    return run


CONTENDERS: dict[str, Callable[[chute.Dataset, str, np.ndarray], Any]] = {
    "old": old_gather,
    "slices": numpy_copy(0),
    "index": numpy_copy(1 << 62),
    "numpy": numpy_copy(seg.TINY_SAMPLE_VALUES),
    "new": new_gather,
    "ds.gather": lambda ds, name, idx: ds.gather(idx)[name],  # + index checks, file recheck
}


def measure(fn: Callable[[], Any], repeats: int) -> tuple[float, int]:
    """(median seconds, tracemalloc peak bytes of one call)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    tracemalloc.start()
    try:
        fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return statistics.median(times), peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", default=str(RESULTS / "ragged_gather.json"))
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for case, dtype, mean, batch, part_size in CASES:
            n = 4 * batch
            lengths = rng.integers(mean // 2, mean + mean // 2 + 1, n)
            samples = [np.full(k, i % 100, dtype) for i, k in enumerate(lengths)]
            path = Path(tmp) / f"{len(rows)}.chute"
            data: Any = [s.tobytes() for s in samples] if dtype == "uint8" else samples
            chute.write(path, {"v": data}, part_size=part_size)
            ds = chute.open(path)
            idx = rng.permutation(n)[:batch]
            want = np.concatenate([samples[i] for i in idx]).view(np.uint8)
            nbytes = want.nbytes
            row: dict[str, Any] = {"case": case, "batch_mb": nbytes / 1e6}
            for name, fn in CONTENDERS.items():
                got = fn(ds, "v", idx)
                assert np.array_equal(got.values.numpy().view(np.uint8), want), (case, name)
                assert [len(x) for x in got] == [len(samples[i]) for i in idx], (case, name)
                s, peak = measure(lambda fn=fn, ds=ds, idx=idx: fn(ds, "v", idx), args.repeats)
                row[f"{name}_ms"] = s * 1e3
                row[f"{name}_peak"] = peak / nbytes
            row["speedup"] = row["old_ms"] / row["new_ms"]
            rows.append(row)
            print(case, f"{row['speedup']:.1f}x", flush=True)
    columns = [("case", "case", ""), ("batch_mb", "batch MB", ".2f")]
    for name in CONTENDERS:
        columns += [(f"{name}_ms", f"{name} ms", ".3f"), (f"{name}_peak", "peak/x", ".1f")]
    columns.append(("speedup", "old/new", ".1f"))
    print(table(rows, columns))
    kernel = "compiled (numba)" if seg.kernels() else "numpy (no numba)"
    print(f"new: {kernel}; TINY_SAMPLE_VALUES = {seg.TINY_SAMPLE_VALUES} (numpy's choice)")
    print("peak/x: tracemalloc peak / batch bytes")
    print("wrote", write_json(args.json, {"rows": rows, "tiny": seg.TINY_SAMPLE_VALUES}))


if __name__ == "__main__":
    main()
