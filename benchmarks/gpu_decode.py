"""JPEG decode on the GPU (``device="cuda"``: nvjpeg in ``chute.to_device``) against the CPU
path (decode in the Loader's threads), side by side in one run.

    python benchmarks/gpu_decode.py [--images 2000] [--threads 8] [--json PATH]

An ImageFolder of real photographs (``_photos.py``; needs scikit-image), converted with
``chute.from_image_folder``; RandomResizedCrop(160) + flip, batch 256, one shuffled epoch
after a warm one, each ending on the GPU (``to_device``, synchronized):

* ``cpu threads``: ``decode={"image": ops}``, ``--threads`` loader threads;
* ``nvjpeg``: ``decode={"image": ops with device="cuda"}``: the threads only plan, and
  ``to_device`` decodes each batch with nvjpeg and crops/resizes/flips with torch.

Reports images/s, first batch s, and the pixels' mean absolute difference between the two
(the same crops; nvjpeg's IDCT and torch's resize differ from libjpeg-turbo's and PIL's by a
few levels). Without CUDA or torchvision it says it skipped and writes JSON saying so.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _common import RESULTS, table, write_json

import chute

COLUMNS = [
    ("row", "row", ""),
    ("images_per_s", "images/s", ",.0f"),
    ("first_batch_s", "first batch s", ".2f"),
]


def epoch(loader: Any, e: int, device: str) -> tuple[float, float, int]:
    """(seconds, first batch seconds, images) of epoch ``e`` through ``to_device``."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    loader.set_epoch(e)
    t = time.perf_counter()
    first, n = 0.0, 0
    for b in chute.to_device(loader, device):
        if not n:
            sync()
            first = time.perf_counter() - t
        n += len(b["label"])
    sync()
    return time.perf_counter() - t, first, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--json", type=Path, default=RESULTS / "gpu_decode.json")
    ap.add_argument("--device", default="cuda", help="'cpu': a dry run of the same pipeline")
    args = ap.parse_args()
    dev = args.device
    why = ""
    if dev == "cpu":
        pass
    elif not torch.cuda.is_available():
        why = "no CUDA device"
    else:
        try:
            import torchvision.io  # noqa: F401
        except (ImportError, RuntimeError, OSError) as exc:
            why = f"no torchvision for this torch ({exc})"
    if why:
        print(f"skipped: {why}")
        write_json(args.json, {"skipped": why})
        return
    from _photos import photo_folder

    ops = [chute.RandomResizedCrop(160), chute.RandomHorizontalFlip()]
    on_gpu = [chute.RandomResizedCrop(160, device=dev), chute.RandomHorizontalFlip()]
    with tempfile.TemporaryDirectory() as tmp:
        root = photo_folder(Path(tmp) / "folder", args.images)
        ds = chute.open(chute.from_image_folder(root, Path(tmp) / "d.chute", progress=False))
        rows = []
        for name, decode, threads in [
            (f"cpu, {args.threads} threads", ops, args.threads),
            (f"device={dev!r} (nvjpeg on cuda), 2 threads plan", on_gpu, 2),
        ]:
            loader = chute.Loader(ds, 256, decode={"image": decode}, num_workers=threads)
            epoch(loader, 0, dev)  # warm: page cache, CUDA context, nvjpeg handles
            seconds, first, n = epoch(loader, 1, dev)
            rows.append(
                {"row": name, "images_per_s": n / seconds, "first_batch_s": first, "images": n}
            )
        a = next(iter(chute.to_device(chute.Loader(ds, 256, decode={"image": ops}), dev)))
        b = next(iter(chute.to_device(chute.Loader(ds, 256, decode={"image": on_gpu}), dev)))
        diff = (a["image"].float() - b["image"].float()).abs().mean().item()
    ratio = rows[1]["images_per_s"] / rows[0]["images_per_s"]
    print(f"{torch.cuda.get_device_name(0) if dev == 'cuda' else 'cpu'}, torch {torch.__version__}")
    print(table(rows, COLUMNS))
    print(f"nvjpeg / cpu threads: {ratio:.2f}x images/s; mean |cpu - nvjpeg| pixels: {diff:.2f}")
    path = write_json(
        args.json, {"rows": rows, "nvjpeg_vs_cpu": ratio, "mean_abs_pixel_diff": diff}
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
