"""``chute demo``: the whole story in one command, on generated CIFAR-like data.

1. the old way: an HDF5 file (written as many projects do) loaded whole before step 1;
2. ``chute convert`` of that file, with a progress bar;
3. ``chute.open`` and the first batch, in milliseconds, from a cold page cache;
4. a short training run of a small CNN fed by ``chute.Loader`` (through ``chute.to_device``, a
   no-op on CPU): steps/s and the fraction of the time the loop waited on data;
5. a compact ``chute bench`` table, written to JSON and PNG too.

The images are learnable (a noisy class template each), so the loss visibly falls.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .bench.contenders.contender import files_under
from .bench.measure import evict
from .bench.report import plot, table
from .bench.run import run_bench
from .conversion import convert
from .device import to_device
from .errors import SchemaError, require
from .loader.loader import Loader
from .reader.opening import open as open_dataset

IMAGE = (32, 32, 3)
CLASSES = 10
SAMPLE_BYTES = int(np.prod(IMAGE)) + 8  # uint8 image + int64 label
DEFAULT_SIZE = 600e6
BATCH = 256


def _chunks(n: int, seed: int, rows: int = 8192) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(start, images, labels): each image is its class's smooth template plus uniform noise."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 65, (CLASSES, 4, 4, 3), dtype=np.uint8)
    templates = coarse.repeat(8, axis=1).repeat(8, axis=2)  # (10, 32, 32, 3) in [0, 64]
    for start in range(0, n, rows):
        b = min(rows, n - start)
        labels = rng.integers(0, CLASSES, b)
        noise = np.frombuffer(rng.bytes(b * SAMPLE_BYTES), np.uint8)[: b * (SAMPLE_BYTES - 8)]
        images = templates[labels] + (noise.reshape(b, *IMAGE) >> 1)  # <= 191: no overflow
        yield start, images, labels


def write_hdf5(path: Path, n: int, seed: int = 0) -> Path:
    """Save ``n`` CIFAR-like samples as ``images`` / ``labels`` in one HDF5 file, contiguous
    (``create_dataset`` without chunks: what ``f.create_dataset("images", data=x)`` does)."""
    h5py = require("h5py", "hdf5")
    with h5py.File(path, "w") as f:
        images = f.create_dataset("images", shape=(n, *IMAGE), dtype="uint8")
        labels = f.create_dataset("labels", shape=(n,), dtype="int64")
        for start, x, y in _chunks(n, seed):
            images[start : start + len(x)] = x
            labels[start : start + len(y)] = y
    return path


def small_cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 8 * 8, CLASSES),
    )


def train(ds: Any, seconds: float, workers: int, device: torch.device) -> dict[str, float]:
    """Train :func:`small_cnn` for up to ``seconds`` (at most one epoch); time the data waits."""
    torch.manual_seed(0)
    model = small_cnn().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = Loader(ds, BATCH, shuffle=True, seed=0, num_workers=workers)
    losses: list[float] = []
    wait = 0.0
    steps = 0
    t0 = time.perf_counter()
    it = iter(to_device(loader, device))
    while time.perf_counter() - t0 < seconds:
        tw = time.perf_counter()
        batch = next(it, None)
        wait += time.perf_counter() - tw
        if batch is None:
            break
        x = batch["image"].permute(0, 3, 1, 2).float().div_(255)  # NHWC uint8 -> NCHW float
        loss = torch.nn.functional.cross_entropy(model(x), batch["label"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        steps += 1
    elapsed = time.perf_counter() - t0
    del it
    loader.close()
    k = max(1, min(10, steps // 4))  # average a few steps at each end: one step is noisy
    return {
        "steps": steps,
        "seconds": elapsed,
        "steps_per_s": steps / elapsed,
        "samples_per_s": steps * BATCH / elapsed,
        "wait_fraction": wait / elapsed,
        "loss_first": float(np.mean(losses[:k])) if losses else float("nan"),
        "loss_last": float(np.mean(losses[-k:])) if losses else float("nan"),
    }


def run_demo(
    size: float = DEFAULT_SIZE,
    out: str | os.PathLike = "chute-demo",
    *,
    train_seconds: float = 20.0,
    bench_bytes: float = 32e6,
    workers: int = 2,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the demo (see the module docstring); returns its numbers, also in ``OUT/demo.json``
    beside ``bench.json`` and ``bench.png``. The HDF5 file and the dataset stay in ``out``
    (about twice ``size``); the last line says how much was written and how to delete it."""
    n = int(size // SAMPLE_BYTES)
    if n < BATCH:
        raise SchemaError(
            f"--size {size:,.0f} B is too small: need at least one batch "
            f"({BATCH} x {SAMPLE_BYTES} B)"
        )
    out = Path(out)
    fresh = not out.exists()  # only then is the whole folder the demo's to delete
    out.mkdir(parents=True, exist_ok=True)
    h5_path, ds_path = out / "cifar.h5", out / "cifar.chute"
    mb = n * SAMPLE_BYTES / 1e6
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    log(f"chute demo: {n:,} CIFAR-like images (32x32x3 uint8, int64 label; {mb:,.0f} MB) in {out}/")

    t = time.perf_counter()
    write_hdf5(h5_path, n)
    log(
        f"\n[0] generated and saved as HDF5 the way many projects do "
        f"(h5py create_dataset, contiguous): {h5_path}  ({time.perf_counter() - t:.1f} s)"
    )

    log("\n[1] the old way: load everything from HDF5 before step 1 (page cache emptied first)")
    h5py = require("h5py", "hdf5")
    evict([h5_path])
    t = time.perf_counter()
    with h5py.File(h5_path, "r") as f:
        images, labels = f["images"][:], f["labels"][:]
    old_s = time.perf_counter() - t
    log(
        f"    {old_s:.2f} s and {(images.nbytes + labels.nbytes) / 1e6:,.0f} MB of RAM before "
        "the first step, again in every process that needs it"
    )
    del images, labels

    log("\n[2] chute convert cifar.h5 cifar.chute")
    t = time.perf_counter()
    convert(h5_path, ds_path, fields={"images": "image", "labels": "label"}, overwrite=True)
    convert_s = time.perf_counter() - t
    log(f"    {convert_s:.1f} s, once (then reused by every run)")

    log("\n[3] chute.open + first batch (page cache emptied first)")
    evict(files_under(ds_path))
    t = time.perf_counter()
    ds = open_dataset(ds_path)
    open_ms = (time.perf_counter() - t) * 1e3
    loader = Loader(ds, BATCH, shuffle=True, seed=0, num_workers=workers)
    it = iter(loader)
    next(it)
    first_ms = (time.perf_counter() - t) * 1e3
    del it
    loader.close()
    log(
        f"    open {open_ms:.1f} ms (reads only the manifest), first shuffled batch of {BATCH} "
        f"in hand after {first_ms:.1f} ms; {first_ms / 1e3 / old_s:.1%} of the old way's wait"
    )

    log(
        f"\n[4] training a small CNN on {device.type} for up to {train_seconds:.0f} s, fed by "
        f"chute.Loader ({workers} worker threads) through chute.to_device"
    )
    stats = train(ds, train_seconds, workers, device)
    ds.close()
    log(
        f"    {stats['steps']} steps: {stats['steps_per_s']:.1f} steps/s, "
        f"{stats['samples_per_s']:,.0f} samples/s; waiting on data {stats['wait_fraction']:.1%} "
        f"of the time; loss {stats['loss_first']:.2f} -> {stats['loss_last']:.2f}"
    )

    log(
        f"\n[5] chute bench on {min(bench_bytes, n * SAMPLE_BYTES) / 1e6:,.0f} MB of it "
        f"(chute bench {ds_path} for the full comparison)"
    )
    report = run_bench(
        ds_path,
        max_bytes=bench_bytes,
        batch_size=BATCH,
        workers=workers,
        time_limit=5.0,
        work_dir=out,
        log=lambda s: None,
    )
    log(table(report))
    json_path = report.save_json(out / "bench.json")
    png_path = plot(report, out / "bench.png")
    summary = {
        "samples": n,
        "bytes": n * SAMPLE_BYTES,
        "old_way_s": old_s,
        "convert_s": convert_s,
        "open_ms": open_ms,
        "first_batch_ms": first_ms,
        "device": device.type,
        "train": stats,
        "bench_json": str(json_path),
        "bench_png": str(png_path),
    }
    (out / "demo.json").write_text(json.dumps(summary, indent=2) + "\n")
    log(f"\nplot: {png_path}\nJSON: {json_path} (bench), {out / 'demo.json'} (this demo)")
    log("\n" + cleanup_line(out, [h5_path, ds_path, json_path, png_path, out / "demo.json"], fresh))
    return summary


def cleanup_line(out: Path, written: list[Path], fresh: bool) -> str:
    """How much the demo left in ``out`` and how to delete it: the whole folder if the demo
    created it (``fresh``), else only the paths it ``written`` (the folder may hold more)."""
    nbytes = sum(f.stat().st_size for p in written for f in files_under(p))
    remove = " ".join(shlex.quote(str(p)) for p in ([out] if fresh else written))
    return (
        f"the demo wrote {nbytes / 1e6:,.0f} MB to {out}/ (mostly {written[0].name} and "
        f"{written[1].name}); delete it with: rm -r {remove}"
    )
