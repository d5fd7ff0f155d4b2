"""Vision pipelines beyond classification, side by side over the same real photos
(``_photos.py``): ``chute.Loader`` (2 worker threads, ``decode=``) against a torch
``DataLoader`` (2 worker processes) doing the same per sample with PIL and numpy (torchvision is
not installable next to torch 2.13 here), one shuffled epoch per round:

- **segmentation**: image + class mask (``chute.fields.Mask``; the peer reads a PNG per image),
  ``RandomResizedCrop(size)`` + flip, the mask following by nearest neighbour
  (``chute.Follow("image")``; the peer: PIL's ``resize(NEAREST, box=)``);
- **detection**: image + 1-8 boxes (xyxy; a ``chute.Ragged`` field, the peer's in memory),
  ``RandomResizedCrop(size)`` + flip, the boxes mapped into the crop by
  ``chute.transform_boxes`` in the Loader's ``transform=`` (its worker threads); the peer:
  numpy per sample, batches of lists;
- **randaugment**: ``RandomResizedCrop(size)`` + flip + ``RandAugment(2, 9)``; the peer:
  torchvision's ops for PIL images (``ImageOps``, ``ImageEnhance``, ``Image.transform``);
- **detection-lsj**: image + 1-8 boxes, ``ScaleJitter(size, (0.1, 2.0))`` (LSJ:
  resize by a random factor of the fitting scale, crop or pad to ``size``) + flip, the boxes
  through ``chute.Geometry`` and ``chute.transform_boxes`` as above; the peer: v2's
  ``ScaleJitter`` then its fixed-size crop / pad by hand (PIL's resize of the whole image,
  a crop, a paste on a canvas of the fill colour) and the boxes scaled, shifted, clipped
  and mirrored in numpy.

    python benchmarks/vision_tasks.py [--images 1000] [--batch-size 64] [--size 160]
        [--rounds 3] [--tasks NAME ...] [--json benchmarks/results/vision_tasks.json]

Each row reports its best round (rounds interleaved; the load average is printed), with the
columns of ``images.py``. Needs ``pip install 'chute[image]' scikit-image``.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import RESULTS, table, write_json
from _photos import photo_jpegs
from images import COLUMNS, du, measure, rrc_params, run_loader
from PIL import Image, ImageEnhance, ImageOps

import chute
from chute.image import jpeg_size
from chute.image.randaugment import OPS, magnitudes

NEAREST, BILINEAR = Image.Resampling.NEAREST, Image.Resampling.BILINEAR
TASKS = ["segmentation", "detection", "randaugment", "detection-lsj"]
FILL = (124, 116, 104)  # the padding colour of the scale jitter rows (ImageNet's mean)


def synthetic_mask(h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """A class map of a few rectangles (ids 1-20) on background 0."""
    m = np.zeros((h, w), np.uint8)
    for _ in range(int(rng.integers(2, 6))):
        y0, x0 = int(rng.integers(0, h - 1)), int(rng.integers(0, w - 1))
        y1, x1 = int(rng.integers(y0 + 1, h + 1)), int(rng.integers(x0 + 1, w + 1))
        m[y0:y1, x0:x1] = rng.integers(1, 21)
    return m


def synthetic_boxes(h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """1-8 xyxy boxes inside an ``h`` x ``w`` image, float32 (K, 4)."""
    k = int(rng.integers(1, 9))
    x0, y0 = rng.uniform(0, w * 0.8, k), rng.uniform(0, h * 0.8, k)
    x1, y1 = x0 + rng.uniform(4, w * 0.5, k), y0 + rng.uniform(4, h * 0.5, k)
    return np.stack([x0, y0, np.minimum(x1, w), np.minimum(y1, h)], 1).astype(np.float32)


# ------------------------------------------------------------ the DataLoader peers


class Task(torch.utils.data.Dataset):
    """PIL decode + RandomResizedCrop + flip, then what the task adds: its fields per sample."""

    def __init__(self, task: str, files: list[Path], extra: list[Any], size: int):
        self.task, self.files, self.extra, self.size = task, files, extra, size

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, Any]:
        im = Image.open(self.files[i]).convert("RGB")
        if self.task == "lsj":
            im, boxes = scale_jitter(im, self.extra[i], self.size)
            return torch.from_numpy(np.asarray(im).transpose(2, 0, 1).copy()), boxes
        box = rrc_params(im.height, im.width)
        flip = random.random() < 0.5
        out = (self.size, self.size)
        im = im.resize(out, BILINEAR, box=box)
        if flip:
            im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        other: Any = None
        if self.task == "segmentation":
            mask = Image.open(self.extra[i]).resize(out, NEAREST, box=box)
            if flip:
                mask = mask.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            other = torch.from_numpy(np.asarray(mask).copy())
        elif self.task == "detection":
            other = torch.from_numpy(boxes_in_crop(self.extra[i], box, self.size, flip))
        else:
            im = pil_rand_augment(im, 2, 9)
        return torch.from_numpy(np.asarray(im).transpose(2, 0, 1).copy()), other


def boxes_in_crop(b: np.ndarray, box: tuple[int, ...], size: int, flip: bool) -> np.ndarray:
    """xyxy boxes shifted into the crop ``box``, clipped, scaled to ``size`` and mirrored."""
    left, top, right, bottom = box
    x = np.clip(b[:, 0::2] - left, 0, right - left) * (size / (right - left))
    y = np.clip(b[:, 1::2] - top, 0, bottom - top) * (size / (bottom - top))
    if flip:
        x = size - x[:, ::-1]
    out = np.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], 1)
    return out[(out[:, 2] - out[:, 0] >= 1) & (out[:, 3] - out[:, 1] >= 1)]


def scale_jitter(
    im: Image.Image, boxes: np.ndarray, size: int, scale: tuple[float, float] = (0.1, 2.0)
) -> tuple[Image.Image, torch.Tensor]:
    """torchvision v2's ``ScaleJitter((size, size), scale)``, then a crop at a uniform offset
    where larger and a bottom-right pad with ``FILL`` where smaller, then a flip half the
    time, on a PIL image and its xyxy ``boxes`` (clipped; those under a pixel wide dropped)."""
    h, w = im.height, im.width
    s = min(size / h, size / w) * random.uniform(*scale)
    nh, nw = max(int(h * s), 1), max(int(w * s), 1)
    im = im.resize((nw, nh), BILINEAR)
    top, left = int(max(nh - size, 0) * random.random()), int(max(nw - size, 0) * random.random())
    ch, cw = min(nh, size), min(nw, size)
    canvas = Image.new("RGB", (size, size), FILL)
    canvas.paste(im.crop((left, top, left + cw, top + ch)))
    b = boxes * [nw / w, nh / h, nw / w, nh / h] - [left, top, left, top]
    b = np.clip(b, 0, [cw, ch, cw, ch])
    if random.random() < 0.5:
        canvas = canvas.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        b[:, [0, 2]] = size - b[:, [2, 0]]
    keep = (b[:, 2] - b[:, 0] >= 1) & (b[:, 3] - b[:, 1] >= 1)
    return canvas, torch.from_numpy(b[keep].astype(np.float32))


def pil_affine(im: Image.Image, m: tuple[float, ...]) -> Image.Image:
    return im.transform(im.size, Image.Transform.AFFINE, m, NEAREST, fillcolor=0)


PIL_OPS: dict[str, Callable[[Image.Image, float], Image.Image]] = {
    "Identity": lambda im, m: im,
    "ShearX": lambda im, m: pil_affine(im, (1, m, 0, 0, 1, 0)),
    "ShearY": lambda im, m: pil_affine(im, (1, 0, 0, m, 1, 0)),
    "TranslateX": lambda im, m: pil_affine(im, (1, 0, -int(m), 0, 1, 0)),
    "TranslateY": lambda im, m: pil_affine(im, (1, 0, 0, 0, 1, -int(m))),
    "Rotate": lambda im, m: im.rotate(m, NEAREST, fillcolor=0),
    "Brightness": lambda im, m: ImageEnhance.Brightness(im).enhance(1 + m),
    "Color": lambda im, m: ImageEnhance.Color(im).enhance(1 + m),
    "Contrast": lambda im, m: ImageEnhance.Contrast(im).enhance(1 + m),
    "Sharpness": lambda im, m: ImageEnhance.Sharpness(im).enhance(1 + m),
    "Posterize": lambda im, m: ImageOps.posterize(im, int(m)),
    "Solarize": lambda im, m: ImageOps.solarize(im, m),
    "AutoContrast": lambda im, m: ImageOps.autocontrast(im),
    "Equalize": lambda im, m: ImageOps.equalize(im),
}


def pil_rand_augment(im: Image.Image, num_ops: int, magnitude: int) -> Image.Image:
    """torchvision's ``RandAugment.forward`` on a PIL image (python's random)."""
    table = magnitudes(False, 31, im.height, im.width)[:, magnitude]
    for _ in range(num_ops):
        k = random.randrange(len(OPS))
        m = float(table[k])
        if 1 <= k <= 9 and random.random() < 0.5:  # ShearX to Sharpness take a sign
            m = -m
        im = PIL_OPS[OPS[k]](im, m)
    return im


def run_peer(ds: Task, batch_size: int) -> Iterator[int]:
    dl = torch.utils.data.DataLoader(
        ds, batch_size, shuffle=True, num_workers=2, collate_fn=collate
    )
    for x, _ in dl:
        yield len(x)


def collate(samples: list[tuple[torch.Tensor, Any]]) -> tuple[torch.Tensor, Any]:
    imgs, other = zip(*samples, strict=True)
    if other[0] is None or (other[0].ndim == 2 and other[0].shape[1] == 4):
        return torch.stack(imgs), list(other)  # no field, or boxes: a list per batch
    return torch.stack(imgs), torch.stack(other)


# ------------------------------------------------------------ chute


def boxes_in_frame(batch: dict[str, Any]) -> dict[str, Any]:
    """The Loader's ``transform=`` for detection: every box of the batch into its crop."""
    rb = batch["boxes"]
    counts = rb.offsets.diff()
    geo = batch["geo"].repeat_interleave(counts, 0)
    boxes, valid = chute.transform_boxes(rb.values.reshape(-1, 4), geo)
    return {**batch, "boxes": boxes, "valid": valid, "counts": counts}


def write_datasets(tmp: Path, n: int) -> dict[str, Any]:
    """The photos as a JPEG folder (+ PNG masks) for the peers and as chute datasets."""
    rng = np.random.default_rng(0)
    jpegs = photo_jpegs(n)
    sizes = [jpeg_size(j) for j in jpegs]
    masks = [synthetic_mask(h, w, rng) for h, w in sizes]
    boxes = [synthetic_boxes(h, w, rng) for h, w in sizes]
    (tmp / "jpg").mkdir()
    (tmp / "png").mkdir()
    files, pngs = [], []
    for i, (j, m) in enumerate(zip(jpegs, masks, strict=True)):
        files.append(tmp / "jpg" / f"{i:05d}.jpg")
        files[-1].write_bytes(j)
        buf = io.BytesIO()
        Image.fromarray(m).save(buf, "PNG")
        pngs.append(tmp / "png" / f"{i:05d}.png")
        pngs[-1].write_bytes(buf.getvalue())
    image = chute.fields.Image()
    chute.write(tmp / "seg.chute", {"image": jpegs, "mask": masks},
                schema={"image": image, "mask": chute.fields.Mask()})  # fmt: skip
    chute.write(tmp / "det.chute", {"image": jpegs, "boxes": boxes},
                schema={"image": image, "boxes": chute.Ragged("float32", (4,))})  # fmt: skip
    chute.write(tmp / "cls.chute", {"image": jpegs}, schema={"image": image})
    return {"files": files, "pngs": pngs, "boxes": boxes}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--images", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--size", type=int, default=160)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tasks", nargs="+", choices=TASKS, default=TASKS, help="the rows to run")
    p.add_argument("--json", default=str(RESULTS / "vision_tasks.json"))
    args = p.parse_args()
    n, bs, size = args.images, args.batch_size, args.size
    load = [os.getloadavg()[0]]
    crop = [chute.RandomResizedCrop(size), chute.RandomHorizontalFlip()]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        data = write_datasets(tmp, n)
        peers = {
            "segmentation": Task("segmentation", data["files"], data["pngs"], size),
            "detection": Task("detection", data["files"], data["boxes"], size),
            "randaugment": Task("randaugment", data["files"], [], size),
            "detection-lsj": Task("lsj", data["files"], data["boxes"], size),
        }
        loaders = {
            "segmentation": chute.Loader(chute.open(tmp / "seg.chute"), bs, num_workers=2,
                                         decode={"image": crop, "mask": chute.Follow("image")}),
            "detection": chute.Loader(chute.open(tmp / "det.chute"), bs, num_workers=2,
                                      decode={"image": crop, "geo": chute.Geometry("image")},
                                      transform=boxes_in_frame),
            "randaugment": chute.Loader(chute.open(tmp / "cls.chute"), bs, num_workers=2,
                                        decode={"image": [*crop, chute.RandAugment(2, 9)]}),
            "detection-lsj": chute.Loader(
                chute.open(tmp / "det.chute"), bs, num_workers=2, transform=boxes_in_frame,
                decode={"image": [chute.ScaleJitter(size, fill=FILL), crop[1]],
                        "geo": chute.Geometry("image")}),
        }  # fmt: skip
        disk = {
            "peer": du(tmp / "jpg") + du(tmp / "png"),
            **{t: du(tmp / f"{t[:3]}.chute") for t in ("segmentation", "detection")},
            "randaugment": du(tmp / "cls.chute"),
            "detection-lsj": du(tmp / "det.chute"),
        }
        best: dict[str, dict[str, Any]] = {}
        for epoch in range(args.rounds):
            for task in args.tasks:
                rows = {
                    f"{task}: DataLoader 2": lambda t=task: run_peer(peers[t], bs),
                    f"{task}: Loader 2": lambda t=task, e=epoch: run_loader(loaders[t], e),
                }
                for name, make in rows.items():
                    mb = disk["peer"] if "DataLoader" in name else disk[task]
                    row = measure(name, make, mb, n)
                    if name not in best or row["images_per_s"] > best[name]["images_per_s"]:
                        best[name] = row
            load.append(os.getloadavg()[0])
    rows = list(best.values())
    by = {k: r["images_per_s"] for k, r in best.items()}
    cpu = {k: r["cpu_ms_per_image"] for k, r in best.items()}
    ratios = {t: by[f"{t}: Loader 2"] / by[f"{t}: DataLoader 2"] for t in args.tasks}
    cpu_ratios = {t: cpu[f"{t}: DataLoader 2"] / cpu[f"{t}: Loader 2"] for t in args.tasks}
    print(table(rows, COLUMNS))
    print(
        f"{n} photos, batch {bs}, {size}x{size}, best of {args.rounds} rounds; load average "
        f"{min(load):.1f}-{max(load):.1f} on {os.cpu_count()} CPUs"
    )
    for t, v in ratios.items():
        print(
            f"  {t}: Loader 2 threads / DataLoader 2 workers {v:.2f}x images/s, "
            f"{cpu_ratios[t]:.2f}x less CPU per image"
        )
    path = write_json(
        args.json,
        {
            "images": n,
            "batch_size": bs,
            "size": size,
            "rounds": args.rounds,
            "load_average": load,
            "rows": rows,
            "ratios": ratios,
            "cpu_ratios": cpu_ratios,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
