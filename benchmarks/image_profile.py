"""Where the time of a decoded image goes: simplejpeg's DCT-scaled decode, the crop (a copy,
for torch's resize), the resize (torch's antialiased bilinear for whole-pixel boxes, PIL's
``resize(box=...)`` for fractional ones), the copy into the batch (numpy's HWC -> CHW copy
with the flip in the strides; PIL's path pastes first), and everything else (Python, plan,
gather), for RandomResizedCrop(160) + flip over the benchmark's photos, one thread.

    python benchmarks/image_profile.py [--images 1000] [--size 160]
        [--json benchmarks/results/image_profile.json]

Each stage is timed per image with ``perf_counter`` around the same calls ``decode_planned``
makes; the "whole" rows time ``decode_planned`` itself and the Loader (1 thread) on the same
images, so "other" is what is neither decode, crop, resize nor copy. Needs scikit-image.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _common import RESULTS, table, write_json
from _photos import photo_folder
from PIL import Image

import chute
from chute.image import RandomHorizontalFlip, RandomResizedCrop, decode_planned, plan, scaled_boxes

STAGES = ("decode", "crop", "resize", "copy")


def stages(data: list[bytes], hw: np.ndarray, size: int) -> tuple[dict[str, float], float]:
    """Seconds per stage over all images (one pass), as decode_planned does them, and the
    share of images that torch resizes (whole-pixel boxes)."""
    import simplejpeg

    ops = [RandomResizedCrop(size), RandomHorizontalFlip()]
    p = plan(ops, hw[:, 0], hw[:, 1], np.arange(len(data)), 0, 1)
    dh, dw, boxes, whole = scaled_boxes(p, hw[:, 0], hw[:, 1])
    ibox = np.rint(boxes).astype(np.int64).tolist()
    out = np.ones((256, 3, size, size), np.uint8)  # a warm batch buffer, as the Loader's
    scratch = np.empty(int((dh * dw).max()) * 4, np.uint8)
    crops = np.empty(int((dh * dw).max()) * 3, np.uint8)
    hwc = np.empty((size, size, 4), np.uint8)
    raw = ("RGBX", 0, 1)
    paste = Image.core.map_buffer(hwc, (size, size), "raw", 0, raw).paste
    straight = hwc[:, :, :3].transpose(2, 0, 1)
    mirrored = hwc[:, ::-1, :3].transpose(2, 0, 1)
    rgb = np.empty((size, size, 3), np.uint8)  # torch's resize writes it channels last
    rgb_out = torch.from_numpy(rgb[None]).permute(0, 3, 1, 2)
    resize = torch._C._nn._upsample_bilinear2d_aa
    t = dict.fromkeys(STAGES, 0.0)
    clock = time.perf_counter
    for i, buf in enumerate(data):
        t0 = clock()
        mode = "RGB" if whole[i] else "RGBX"
        x = simplejpeg.decode_jpeg(
            buf, mode, min_height=int(dh[i]), min_width=int(dw[i]), buffer=scratch
        )
        t1 = clock()
        if whole[i]:
            x0, y0, x1, y1 = ibox[i]
            crop = crops[: (y1 - y0) * (x1 - x0) * 3].reshape(y1 - y0, x1 - x0, 3)
            np.copyto(crop, x[y0:y1, x0:x1])
            t2 = clock()
            chw = torch.from_numpy(crop).permute(2, 0, 1)[None]
            resize(chw, (size, size), False, None, out=rgb_out)
            t3 = clock()
            np.copyto(out[i % 256], (rgb[:, ::-1] if p.flips[i] else rgb).transpose(2, 0, 1))
        else:
            t2 = clock()
            im = Image.core.map_buffer(x, (x.shape[1], x.shape[0]), "raw", 0, raw)
            resized = im.resize((size, size), int(Image.Resampling.BILINEAR), boxes[i].tolist())
            t3 = clock()
            paste(resized, (0, 0, size, size))
            np.copyto(out[i % 256], mirrored if p.flips[i] else straight)
        t4 = clock()
        for k, (a, b) in zip(STAGES, ((t0, t1), (t1, t2), (t2, t3), (t3, t4)), strict=True):
            t[k] += b - a
    return t, float(whole.mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--size", type=int, default=160)
    ap.add_argument("--json", default=str(RESULTS / "image_profile.json"))
    args = ap.parse_args()
    n, size = args.images, args.size
    with tempfile.TemporaryDirectory() as tmp:
        root = photo_folder(Path(tmp) / "folder", n)
        ds = chute.open(chute.from_image_folder(root, Path(tmp) / "ds.chute", progress=False))
        enc = ds.gather(np.arange(n))["image"]
        data = [bytes(x.numpy()) for x in enc.tolist()]
        hw = enc.sizes.numpy().astype(np.int64)
        ops = [RandomResizedCrop(size), RandomHorizontalFlip()]
        best: dict[str, float] = {}
        for _ in range(3):  # best of 3: the machine is shared
            times, by_torch = stages(data, hw, size)
            for k, v in times.items():
                best[k] = min(best.get(k, 1e9), v)
            p = plan(ops, hw[:, 0], hw[:, 1], np.arange(n), 0, 1)
            out = np.empty((n, 3, size, size), np.uint8)
            t0 = time.perf_counter()
            decode_planned(enc, hw[:, 0], hw[:, 1], p, out)
            best["decode_planned"] = min(best.get("decode_planned", 1e9), time.perf_counter() - t0)
            loader = chute.Loader(ds, 256, num_workers=1, decode={"image": ops})
            t0 = time.perf_counter()
            for _b in loader:
                pass
            best["Loader, 1 thread"] = min(
                best.get("Loader, 1 thread", 1e9), time.perf_counter() - t0
            )
    parts = sum(best[k] for k in STAGES)
    rows = [
        {"stage": k, "us_per_image": 1e6 * best[k] / n, "share": best[k] / parts} for k in STAGES
    ]
    for k in ("decode_planned", "Loader, 1 thread"):
        rows.append(
            {
                "stage": f"whole: {k}",
                "us_per_image": 1e6 * best[k] / n,
                "share": best[k] / parts,
            }
        )
    print(
        table(
            rows,
            [
                ("stage", "", "s"),
                ("us_per_image", "us/image", ".0f"),
                ("share", "of the four stages", ".2f"),
            ],
        )
    )
    print(f"{by_torch:.0%} of the images resized by torch (whole-pixel boxes), the rest by PIL")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    result = {"images": n, "size": size, "torch_share": by_torch, "rows": rows}
    print(f"wrote {write_json(args.json, result)}")


if __name__ == "__main__":
    main()
