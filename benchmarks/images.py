"""Encoded images, one shuffled epoch of RandomResizedCrop(160) + horizontal flip, batch 256,
side by side in one run over the same ImageFolder of real photos (``_photos.py``):

- plain torch ``DataLoader`` over the folder, PIL decode + the same crop/flip written in PIL
  (torchvision is not installable next to torch 2.13 here), 0 and 2 worker processes;
- the bare decode + crop + resize loop (simplejpeg DCT-scaled decode, then chute's resizers:
  a crop + torch's antialiased resize written channels last, as ``decode_planned`` calls it,
  for whole-pixel boxes, PIL ``resize(box=)`` for the others; no batch, no output copy), 1
  and 2 threads: the ceiling;
- ``chute.image.decode_planned`` called directly over ``chute.from_image_folder``'s dataset
  (gathered with ``ds.gather``, so read from the page cache), 1 and 2 threads (each batch
  split in two);
- ``chute.Loader(ds, 256, decode={"image": [RandomResizedCrop(160),
  RandomHorizontalFlip()]})``, 1 and 2 worker threads: what a user runs.

- FFCV 1.0.2, ``RandomResizedCropRGBImageDecoder`` + flip, 2 threads, over a ``.beton``
  written from the same folder: run by ``_ffcv_epochs.py`` in the Python of a separate venv
  (``--ffcv-python``, default ``$FFCV_PYTHON``; FFCV needs numpy<2, numba, opencv and
  libturbojpeg), one process kept across rounds; its first batch is the first epoch's
  (numba's compile included). Skipped, with the reason, when that Python is missing.

    python benchmarks/images.py [--images 2000] [--batch-size 256] [--size 160] [--rounds 4]
        [--ffcv-python /work/ffcv-venv/bin/python] [--json benchmarks/results/images.json]
        [--plot docs/images.png]

The machine is shared: every row runs once per round, rounds interleaved, and each row
reports its best round (the load average is printed). Columns: images/s over the epoch,
first batch s (from the start of the epoch), disk MB (what the row reads: the JPEG folder or
the chute dataset), peak PSS MB of the process tree above the baseline, CPU ms per image
(user + system, this process and its DataLoader workers: the fair measure on a busy machine).
Needs
``pip install 'chute[image]' scikit-image`` (and matplotlib for ``--plot``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import RESULTS, peak_pss, table, write_json
from _photos import photo_folder
from PIL import Image

import chute
from chute import from_image_folder
from chute.image import (
    RandomHorizontalFlip,
    RandomResizedCrop,
    decode_planned,
    plan,
    plan_slice,
    scaled_boxes,
)
from chute.sources.image_folder import ImageFolder

COLUMNS = [
    ("name", "", "s"),
    ("images_per_s", "images/s", ",.0f"),
    ("first_batch_s", "first batch s", ".3f"),
    ("disk_mb", "disk MB", ".1f"),
    ("peak_pss_mb", "peak PSS MB", ".1f"),
    ("cpu_ms_per_image", "CPU ms/image", ".2f"),
]


def cpu_seconds() -> float:
    """User + system CPU of this process and its waited-for children (DataLoader workers)."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


# ------------------------------------------------------------ plain DataLoader + PIL


class PILFolder(torch.utils.data.Dataset):
    """What a user writes without torchvision: PIL decode, RandomResizedCrop + flip in PIL."""

    def __init__(self, files: list[tuple[Path, int]], size: int):
        self.files, self.size = files, size

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        path, label = self.files[i]
        im = Image.open(path).convert("RGB")
        box = rrc_params(im.height, im.width)
        im = im.resize((self.size, self.size), Image.Resampling.BILINEAR, box=box)
        if random.random() < 0.5:
            im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.asarray(im).transpose(2, 0, 1).copy()), label


def rrc_params(h: int, w: int, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)) -> tuple[int, ...]:
    """torchvision's RandomResizedCrop.get_params (python's random), as a PIL box."""
    lr = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = h * w * random.uniform(*scale)
        aspect = math.exp(random.uniform(*lr))
        cw, ch = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < cw <= w and 0 < ch <= h:
            top, left = random.randint(0, h - ch), random.randint(0, w - cw)
            return (left, top, left + cw, top + ch)
    side = min(h, w)
    return ((w - side) // 2, (h - side) // 2, (w + side) // 2, (h + side) // 2)


def run_dataloader(files, size, batch_size, workers) -> Iterator[int]:
    dl = torch.utils.data.DataLoader(
        PILFolder(files, size), batch_size, shuffle=True, num_workers=workers
    )
    for x, _ in dl:
        yield len(x)


# ------------------------------------------------------------ bare loop and chute


def run_bare(data: list[bytes], hw: np.ndarray, size: int, threads: int) -> Iterator[int]:
    """The ceiling: decode (DCT-scaled) + crop + resize per image, nothing else: the resizers
    chute uses (torch's for whole-pixel boxes, after a crop; PIL's box resize for the others),
    no batch written, no plan, no gather."""
    import simplejpeg

    ops = [RandomResizedCrop(size), RandomHorizontalFlip()]
    p = plan(ops, hw[:, 0], hw[:, 1], np.arange(len(data)))
    dh, dw, fboxes, exact = scaled_boxes(p, hw[:, 0], hw[:, 1])
    whole, boxes, ibox = exact.tolist(), fboxes.tolist(), np.rint(fboxes).astype(int).tolist()
    # torch's antialiased resize as chute calls it: written channels last (out=), its
    # kernel's own layout (interpolate's planar output costs it a repacking pass)
    resize = torch._C._nn._upsample_bilinear2d_aa

    def work(a: int, b: int) -> int:
        rgb = torch.empty((1, size, size, 3), dtype=torch.uint8).permute(0, 3, 1, 2)
        for i in range(a, b):
            if whole[i]:
                x = simplejpeg.decode_jpeg(data[i], "RGB", min_height=dh[i], min_width=dw[i])
                x0, y0, x1, y1 = ibox[i]
                crop = torch.from_numpy(np.ascontiguousarray(x[y0:y1, x0:x1]))
                resize(crop.permute(2, 0, 1)[None], (size, size), False, None, out=rgb)
            else:
                x = simplejpeg.decode_jpeg(data[i], "RGBX", min_height=dh[i], min_width=dw[i])
                im = Image.frombuffer("RGBX", (x.shape[1], x.shape[0]), x, "raw", "RGBX", 0, 1)
                im.resize((size, size), Image.Resampling.BILINEAR, box=boxes[i])
        return b - a

    chunk = 256
    with ThreadPoolExecutor(threads) as ex:
        for a in range(0, len(data), chunk * threads):
            cuts = [(s, min(s + chunk, len(data))) for s in range(a, a + chunk * threads, chunk)]
            yield sum(ex.map(lambda c: work(*c), [c for c in cuts if c[0] < c[1]]))


def run_chute(path: Path, size: int, batch_size: int, threads: int, epoch: int) -> Iterator[int]:
    ds = chute.open(path)
    order = np.random.default_rng(epoch).permutation(len(ds))
    ops = [RandomResizedCrop(size), RandomHorizontalFlip()]
    out = np.empty((batch_size, 3, size, size), np.uint8)
    with ThreadPoolExecutor(threads) as ex:
        for a in range(0, len(ds), batch_size):
            idx = order[a : a + batch_size]
            enc = ds.gather(idx)["image"]
            h, w = enc.heights.numpy(), enc.widths.numpy()
            p = plan(ops, h, w, idx, seed=0, epoch=epoch)
            bufs = chute.image.as_buffers(enc)
            n = len(idx)
            cuts = np.linspace(0, n, threads + 1).astype(int)
            jobs = [
                ex.submit(
                    decode_planned,
                    bufs[s:e],
                    h[s:e],
                    w[s:e],
                    plan_slice(p, s, e),
                    out[s:e],
                    idx[s:e],
                )
                for s, e in itertools.pairwise(cuts)
            ]
            for j in jobs:
                j.result()
            batch = torch.from_numpy(out[:n])
            yield len(batch)


def run_loader(loader: chute.Loader, epoch: int) -> Iterator[int]:
    """What a user writes: chute.Loader with decode=, one epoch. The Loader is made once per
    row and reused round after round, as in training: its buffer pool is warm after the first
    epoch (a new Loader faults in a fresh 20 MB batch buffer for each of its first batches)."""
    loader.set_epoch(epoch)
    for batch in loader:
        yield len(batch["image"])


def measure(name: str, make: Callable[[], Iterator[int]], disk_mb: float, n: int) -> dict[str, Any]:
    with peak_pss() as mem:
        cpu0 = cpu_seconds()
        t0 = time.perf_counter()
        first = None
        count = 0
        for k in make():
            count += k
            if first is None:
                first = time.perf_counter() - t0
        dt = time.perf_counter() - t0
    cpu = cpu_seconds() - cpu0  # the memory sampler's thread adds a little to every row
    assert count == n, (name, count, n)
    return {
        "name": name,
        "images_per_s": n / dt,
        "first_batch_s": first,
        "disk_mb": disk_mb,
        "peak_pss_mb": (mem.peak - mem.baseline) / 1e6,
        "seconds": dt,
        "cpu_ms_per_image": 1e3 * cpu / n,
    }


class FFCV:
    """The FFCV row: ``_ffcv_epochs.py`` in FFCV's own venv, one epoch per request."""

    def __init__(self, python: str, folder: Path, beton: Path, bs: int, size: int, threads: int):
        script = Path(__file__).with_name("_ffcv_epochs.py")
        cmd = [python, str(script), str(folder), str(beton), "--batch-size", str(bs)]
        cmd += ["--size", str(size), "--threads", str(threads)]
        self.log = open(beton.with_suffix(".log"), "w")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True
        )
        self.ready = self._reply()
        self.first_cold: float | None = None

    def _reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.log.flush()
            tail = Path(self.log.name).read_text()[-2000:]
            raise RuntimeError(f"FFCV's process ended: {tail}")
        return json.loads(line)

    def epoch(self, name: str, n: int, epoch: int) -> dict[str, Any]:
        assert self.proc.stdin is not None
        with peak_pss() as mem:
            self.proc.stdin.write(f"epoch {epoch}\n")
            self.proc.stdin.flush()
            r = self._reply()
        assert r["images"] == n, (r, n)
        if self.first_cold is None:  # the first epoch: numba compiles the pipeline
            self.first_cold = r["first_batch_s"]
        return {
            "name": name,
            "images_per_s": n / r["seconds"],
            "first_batch_s": self.first_cold,
            "first_batch_warm_s": r["first_batch_s"],
            "disk_mb": self.ready["disk_mb"],
            "peak_pss_mb": (mem.peak - mem.baseline) / 1e6,
            "seconds": r["seconds"],
            "cpu_ms_per_image": 1e3 * r["cpu_s"] / n,
        }

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(60)
        self.log.close()


def start_ffcv(python: str | None, *args: Any) -> tuple[FFCV | None, str]:
    """FFCV's runner, or None and why not."""
    if not python:
        return None, "not run: no --ffcv-python / $FFCV_PYTHON (a venv with ffcv==1.0.2)"
    if not Path(python).exists():
        return None, f"not run: {python} does not exist"
    try:
        f = FFCV(python, *args)
    except (OSError, RuntimeError, ValueError) as exc:
        return None, f"not run: {exc}"
    r = f.ready
    return f, f"ffcv {r['ffcv']}, numpy {r['numpy']}, .beton written in {r['write_s']:.1f} s"


def du(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


ROWS = {
    "DataLoader 0": "torch DataLoader + PIL, 0 workers",
    "DataLoader 2": "torch DataLoader + PIL, 2 workers",
    "FFCV 2": "FFCV 1.0.2 RandomResizedCropRGBImageDecoder, 2 threads",
    "bare 1": "bare decode+crop+resize, 1 thread",
    "bare 2": "bare decode+crop+resize, 2 threads",
    "direct 1": "chute decode_planned, 1 thread",
    "direct 2": "chute decode_planned, 2 threads",
    "Loader 1": "chute.Loader decode=, 1 thread",
    "Loader 2": "chute.Loader decode=, 2 threads",
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--size", type=int, default=160)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--work-dir", default=None)
    p.add_argument("--ffcv-python", default=os.environ.get("FFCV_PYTHON"))
    p.add_argument("--json", default=str(RESULTS / "images.json"))
    p.add_argument("--plot", default=None, help="write a bar chart here (e.g. docs/images.png)")
    args = p.parse_args()
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(dir=args.work_dir) as tmp:
        root = photo_folder(Path(tmp) / "folder", args.images)
        t = time.perf_counter()
        ds_path = from_image_folder(root, Path(tmp) / "ds.chute", progress=False)
        convert_s = time.perf_counter() - t
        files = [(root / rel, label) for rel, label in ImageFolder(root).files]
        ds = chute.open(ds_path)
        enc = ds.gather(np.arange(len(ds)))["image"]
        data = [bytes(memoryview(x.numpy())) for x in enc.tolist()]
        hw = enc.sizes.numpy().astype(np.int64)
        folder_mb, ds_mb = du(root), du(ds_path)
        n, bs, size = args.images, args.batch_size, args.size
        for f, _ in files:  # page cache warm for every row
            f.read_bytes()
        runs: dict[str, tuple[Callable[[int], Iterator[int]], float]] = {
            "DataLoader 0": (lambda e: run_dataloader(files, size, bs, 0), folder_mb),
            "DataLoader 2": (lambda e: run_dataloader(files, size, bs, 2), folder_mb),
            "bare 1": (lambda e: run_bare(data, hw, size, 1), ds_mb),
            "bare 2": (lambda e: run_bare(data, hw, size, 2), ds_mb),
            "direct 1": (lambda e: run_chute(ds_path, size, bs, 1, e), ds_mb),
            "direct 2": (lambda e: run_chute(ds_path, size, bs, 2, e), ds_mb),
            "Loader 1": (lambda e: run_loader(loaders[1], e), ds_mb),
            "Loader 2": (lambda e: run_loader(loaders[2], e), ds_mb),
        }
        ops = [chute.RandomResizedCrop(size), chute.RandomHorizontalFlip()]
        loaders = {
            t: chute.Loader(chute.open(ds_path), bs, num_workers=t, decode={"image": ops})
            for t in (1, 2)
        }
        ffcv, ffcv_note = start_ffcv(args.ffcv_python, root, Path(tmp) / "ffcv.beton", bs, size, 2)
        print(f"FFCV: {ffcv_note}", file=sys.stderr)
        best: dict[str, dict[str, Any]] = {}
        for epoch in range(args.rounds):
            for key in ROWS:
                if key == "FFCV 2":
                    if ffcv is None:
                        continue
                    row = ffcv.epoch(ROWS[key], n, epoch)
                else:
                    make, mb = runs[key]
                    row = measure(ROWS[key], lambda m=make, e=epoch: m(e), mb, n)
                if key not in best or row["images_per_s"] > best[key]["images_per_s"]:
                    best[key] = row
            load.append(os.getloadavg()[0])
        if ffcv is not None:
            ffcv.close()
    rows = [best[k] for k in ROWS if k in best]
    by = {k: best[k]["images_per_s"] for k in best}
    ratios = {
        "bare 2 threads / 1 thread": by["bare 2"] / by["bare 1"],
        "Loader 2 threads / 1 thread": by["Loader 2"] / by["Loader 1"],
        "Loader / bare, 1 thread": by["Loader 1"] / by["bare 1"],
        "Loader / bare, 2 threads": by["Loader 2"] / by["bare 2"],
        "decode_planned / bare, 1 thread": by["direct 1"] / by["bare 1"],
        "decode_planned / bare, 2 threads": by["direct 2"] / by["bare 2"],
        "Loader 2 threads / DataLoader 2 workers": by["Loader 2"] / by["DataLoader 2"],
        "Loader 2 threads / DataLoader 0 workers": by["Loader 2"] / by["DataLoader 0"],
    }
    if "FFCV 2" in by:
        ratios["Loader 2 threads / FFCV 2 threads"] = by["Loader 2"] / by["FFCV 2"]
    cpu = {k: best[k]["cpu_ms_per_image"] for k in best}
    ratios["CPU per image, Loader / bare, 1 thread"] = cpu["Loader 1"] / cpu["bare 1"]
    ratios["CPU per image, Loader / bare, 2 threads"] = cpu["Loader 2"] / cpu["bare 2"]
    print(table(rows, COLUMNS))
    print(
        f"{n} photos, folder {folder_mb:.1f} MB, chute dataset {ds_mb:.1f} MB "
        f"({ds_mb / folder_mb:.3f}x), from_image_folder {convert_s:.1f} s; FFCV: {ffcv_note}; "
        f"best of {args.rounds} rounds; load average {min(load):.1f}-{max(load):.1f} on "
        f"{os.cpu_count()} CPUs"
    )
    for k, v in ratios.items():
        print(f"  {k}: {v:.2f}x")
    path = write_json(
        args.json,
        {
            "images": n,
            "batch_size": bs,
            "size": size,
            "rounds": args.rounds,
            "load_average": load,
            "convert_s": convert_s,
            "folder_mb": folder_mb,
            "dataset_mb": ds_mb,
            "rows": rows,
            "ratios": ratios,
            "ffcv": ffcv_note,
        },
    )
    print(f"wrote {path}")
    if args.plot:
        plot(rows, args.plot, f"{n} photos, RandomResizedCrop({size}) + flip, batch {bs}")


def plot(rows: list[dict[str, Any]], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["name"] for r in rows]
    rates = [r["images_per_s"] for r in rows]
    colors = [
        "#999999"
        if "DataLoader" in n
        else "#8172b3"
        if "FFCV" in n
        else "#4c72b0"
        if "bare" in n
        else "#dd8452"
        for n in names
    ]
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.barh(names[::-1], rates[::-1], color=colors[::-1])
    for y, v in enumerate(rates[::-1]):
        ax.text(v, y, f" {v:,.0f}", va="center", fontsize=8)
    ax.set_xlabel("images/s (best of the rounds)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
