"""What each batch augmentation costs next to the decode it follows: one batch of real photo
JPEGs (``_photos.py``) decoded with ``RandomResizedCrop(size)`` + flip by
``chute.image.decode_batch``, then each augmentation timed on a copy of that decoded uint8
batch, both on one thread (``torch.set_num_threads(1)``, as in the loader's worker threads).

Per-sample ops (``decode=`` lists) run through ``chute.image.augment.augment`` with every
sample augmented (``p=1``, the worst case); MixUp / CutMix / Mosaic through their ``apply``
(Mosaic also with a uint8 mask, one to three boxes per image and their labels). The
``follower`` rows are what a field tied to the image costs on top: a uint8 segmentation
mask (``Follow("image", fill=255)``) and a second image (``Follow("image")``) moved by the
warps RandAugment / TrivialAugmentWide / RandomAffine / RandomPerspective drew for the
image (``chute.image.follow.follow_warps``), and the ``Geometry`` rows' matrices
(``warp_matrices``). The ``recipe`` rows are the detection ops
(``chute.image.placing``, and ``CenterCrop`` to a wide size, which pads most photos): the
same batch decoded with the recipe in place of ``RandomResizedCrop`` + flip to the same
size, its cost the extra decode time over that plain decode's (negative: the recipe decodes
less, e.g. at a smaller DCT scale); the two run alternately ``--rounds`` times and the row
gives the median of the rounds' ratios. Each other row is the best of ``--rounds`` (the
machine is shared; the load average is printed) and its cost is ``augment ms / decode ms``
of the same batch.

    python benchmarks/augment_cost.py [--images 256] [--size 160] [--rounds 5] [--kornia]
        [--recipes] [--json benchmarks/results/augment_cost.json]

``--kornia`` adds a column: Kornia's batched augmentation of the same name on the same batch
(converted to float in [0, 1] and back to uint8, as a uint8 pipeline has to), timed alike
(``pip install kornia``; it runs with the pinned torch).

Needs ``pip install 'chute[image]' scikit-image``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from _common import RESULTS, table, write_json
from _photos import photo_jpegs

import chute
from chute.image import decode_batch, decode_planned, jpeg_size
from chute.image.augment import augment
from chute.image.follow import follow_warps, warp_matrices

COLUMNS = [
    ("name", "augmentation", "s"),
    ("ms", "ms/batch", ".1f"),
    ("cost_pct", "% of decode", ".0f"),
]
KORNIA_COLUMNS = [
    ("kornia_pct", "Kornia % of decode", ".0f"),
    ("kornia_x", "Kornia / chute", ".1f"),
]


def augmentations() -> dict[str, Any]:
    """Each augmentation as a user writes it (every per-sample op applied to every sample)."""
    ops: dict[str, Any] = {
        "ColorJitter(0.4, 0.4, 0.4)": chute.ColorJitter(0.4, 0.4, 0.4),
        "ColorJitter(hue=0.1)": chute.ColorJitter(hue=0.1),
        "ColorJitter(0.4, 0.4, 0.4, 0.1)": chute.ColorJitter(0.4, 0.4, 0.4, 0.1),
        "Grayscale(p=1)": chute.Grayscale(p=1.0),
        "GaussianBlur(9)": chute.GaussianBlur(9),
        "RandomErasing(p=1)": chute.RandomErasing(p=1.0),
        "RandAugment(2, 9)": chute.RandAugment(2, 9),
        "TrivialAugmentWide()": chute.TrivialAugmentWide(),
        "RandomAffine(15, (0.1, 0.1), (0.8, 1.2), 10)": chute.RandomAffine(
            15, translate=(0.1, 0.1), scale=(0.8, 1.2), shear=10
        ),
        "RandomRotation(30)": chute.RandomRotation(30),
        "RandomPerspective(0.5, p=1)": chute.RandomPerspective(0.5, p=1.0),
        "MixUp(10)": chute.MixUp(10),
        "CutMix(10)": chute.CutMix(10),
        "Mosaic()": chute.Mosaic(),
        "Mosaic(): mask + boxes + labels": chute.Mosaic(
            boxes="boxes", per_box=("labels",), masks=("mask",)
        ),
    }
    return ops


def followers() -> dict[str, tuple[Any, str]]:
    """What follows the image through its warps: (the leader's augmentation, the follower)."""
    return {
        "RandAugment(2, 9): mask follower": (chute.RandAugment(2, 9), "mask"),
        "RandAugment(2, 9): image follower": (chute.RandAugment(2, 9), "image"),
        "RandAugment(2, 9): Geometry matrices": (chute.RandAugment(2, 9), "geometry"),
        "TrivialAugmentWide(): mask follower": (chute.TrivialAugmentWide(), "mask"),
        "TrivialAugmentWide(): image follower": (chute.TrivialAugmentWide(), "image"),
        "RandomAffine(15): mask follower": (chute.RandomAffine(15, scale=(0.8, 1.2)), "mask"),
        "RandomPerspective(p=1): mask follower": (chute.RandomPerspective(p=1.0), "mask"),
        "RandomPerspective(p=1): Geometry matrices": (chute.RandomPerspective(p=1.0), "geometry"),
    }


def recipes(size: int) -> dict[str, list[Any]]:
    """The detection ops, each decoding the batch in place of RandomResizedCrop + flip."""
    flip = chute.RandomHorizontalFlip()
    return {
        "recipe: RandomCrop(padding=16)": [chute.RandomCrop(size, 16, True), flip],
        "recipe: ResizePad (letterbox)": [chute.ResizePad(size, center=True), flip],
        "recipe: ScaleJitter (LSJ)": [chute.ScaleJitter(size), flip],
        "recipe: ZoomOut + Resize": [chute.ZoomOut(p=1.0), chute.Resize(size), flip],
        "recipe: RandomIoUCrop + Resize": [chute.RandomIoUCrop(), chute.Resize(size), flip],
        "recipe: CenterCrop((size, 2 size)), padded": [chute.CenterCrop((size, 2 * size)), flip],
    }


def kornia_peers() -> dict[str, Any]:
    """Kornia's counterparts of :func:`augmentations`, every sample augmented."""
    import kornia.augmentation as K

    return {
        "ColorJitter(0.4, 0.4, 0.4)": K.ColorJitter(0.4, 0.4, 0.4, p=1.0),
        "ColorJitter(hue=0.1)": K.ColorJitter(hue=0.1, p=1.0),
        "ColorJitter(0.4, 0.4, 0.4, 0.1)": K.ColorJitter(0.4, 0.4, 0.4, 0.1, p=1.0),
        "Grayscale(p=1)": K.RandomGrayscale(p=1.0),
        "GaussianBlur(9)": K.RandomGaussianBlur((9, 9), (0.1, 2.0), p=1.0),
        "RandomErasing(p=1)": K.RandomErasing(p=1.0),
        "RandAugment(2, 9)": K.auto.RandAugment(n=2, m=9),
        "TrivialAugmentWide()": K.auto.TrivialAugment(),
    }


def on_uint8(aug: Any, x: torch.Tensor) -> torch.Tensor:
    """Kornia's ``aug`` on the uint8 batch ``x``: to float in [0, 1] and back, rounded."""
    return aug(x.float().div_(255)).mul_(255).add_(0.5).clamp_(0, 255).to(torch.uint8)


def timed(fn: Callable[[], Any], rounds: int) -> float:
    """Best wall time of ``rounds`` calls, in seconds."""
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


class Batch:
    """One batch of ``images`` photo JPEGs, its decode (``RandomResizedCrop(size)`` + flip by
    ``decode_batch``) and the decoded uint8 batch that each augmentation is timed on."""

    def __init__(self, images: int, size: int):
        jpegs = photo_jpegs(images)
        hw = np.array([jpeg_size(j) for j in jpegs], np.int64)
        self.idx = np.arange(images)
        crop = [chute.RandomResizedCrop(size), chute.RandomHorizontalFlip()]
        out = np.empty((images, 3, size, size), np.uint8)
        self.decode = lambda: decode_batch(jpegs, hw[:, 0], hw[:, 1], crop, self.idx, 0, 0, out)
        self.decode()
        rng = np.random.default_rng(1)  # one to three boxes per photo, for RandomIoUCrop
        xy = [np.sort(rng.uniform(0, [w, h], (2, 1 + i % 3, 2)), 0) for i, (h, w) in enumerate(hw)]
        boxes = {"boxes": [np.concatenate([a[0], a[1]], 1) for a in xy]}

        self.plan = lambda ops: chute.image.plan(ops, hw[:, 0], hw[:, 1], self.idx, 0, 0, boxes)
        outs: dict[tuple[int, int], np.ndarray] = {}

        def recipe(ops: list[Any]) -> None:
            p = self.plan(ops)
            if p.size not in outs:
                outs[p.size] = np.empty((images, 3, *p.size), np.uint8)
            decode_planned(jpegs, hw[:, 0], hw[:, 1], p, outs[p.size], self.idx)

        self.recipe = recipe
        self.decoded = torch.from_numpy(out.copy())
        self.work = self.decoded.clone()
        self.labels = torch.from_numpy(self.idx % 10)
        rng = np.random.default_rng(0)  # a segmentation mask of 21 classes, in blocks
        blocks = rng.integers(0, 21, (images, size // 8, size // 8), dtype=np.uint8)
        self.mask = np.ascontiguousarray(blocks.repeat(8, 1).repeat(8, 2))
        self.mask_work = self.mask.copy()
        self.size = (size, size)
        decoded = [
            np.concatenate([a[0], a[1]], 1) * size / [w, h, w, h]
            for a, (h, w) in zip(xy, hw, strict=True)
        ]
        self.targets = {  # the boxes in the decoded frame, a class label per box
            "boxes": chute.RaggedBatch(
                torch.from_numpy(np.concatenate(decoded)),
                torch.from_numpy(np.cumsum([0] + [len(b) for b in decoded])),
            ),
            "labels": [torch.arange(len(b)) for b in decoded],
        }

    def recipe_cost(self, ops: list[Any], rounds: int) -> tuple[float, float]:
        """The recipe's decode of the batch and the plain one (RandomResizedCrop + flip to the
        recipe's size) run alternately ``rounds`` times: the median recipe time (s) and the
        median of the rounds' extra time over the plain decode's, in percent."""
        plain = [chute.RandomResizedCrop(self.plan(ops).size), chute.RandomHorizontalFlip()]
        self.recipe(ops)  # its output buffer
        self.recipe(plain)
        times, pct = [], []
        for _ in range(rounds):
            s = timed(lambda: self.recipe(ops), 1)
            d = timed(lambda: self.recipe(plain), 1)
            times.append(s)
            pct.append(100 * (s - d) / d)
        return float(np.median(times)), float(np.median(pct))

    def follow(self, op: Any, follower: str) -> None:
        """The leader's ``op``'s warps applied to a fresh copy of a follower (a mask, an
        image) or written as Geometry's matrices."""
        if follower == "geometry":
            warp_matrices([op], self.idx, 0, 0, self.size)
        elif follower == "mask":
            self.mask_work[...] = self.mask
            follow_warps([op], self.mask_work, self.idx, 0, 0, 255)
        else:
            self.work.copy_(self.decoded)
            follow_warps([op], self.work.numpy(), self.idx, 0, 0)

    def augment(self, op: Any) -> None:
        """``op`` on a fresh copy of the decoded batch (the copy is timed too: ~1%)."""
        self.work.copy_(self.decoded)
        if isinstance(op, chute.Mosaic) and op.boxes is not None:  # with its targets
            targets = {"mask": torch.from_numpy(self.mask), **self.targets}
            op.apply({"image": self.work, **targets}, self.idx, 0, 0)
        elif isinstance(op, chute.BatchTransform):
            op.apply({"image": self.work, "label": self.labels}, self.idx, 0, 0)
        else:
            augment([op], self.work, self.idx, 0, 0)

    def cost_pct(self, op: Any, rounds: int) -> float:
        """``op``'s best time over the decode's best time, in percent, measured side by side."""
        self.augment(op)  # compiles its kernels, if any
        decode_s = timed(self.decode, rounds)
        return 100 * timed(lambda: self.augment(op), rounds) / decode_s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--size", type=int, default=160)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--kornia", action="store_true", help="add Kornia's augmentations")
    p.add_argument("--recipes", action="store_true", help="only the detection recipes' rows")
    p.add_argument("--json", default=str(RESULTS / "augment_cost.json"))
    args = p.parse_args()
    peers = kornia_peers() if args.kornia else {}
    torch.set_num_threads(1)
    load = [os.getloadavg()[0]]
    batch = Batch(args.images, args.size)
    decode_s = timed(batch.decode, args.rounds)
    rows = [{"name": "decode + RandomResizedCrop + flip", "ms": 1e3 * decode_s, "cost_pct": 100.0}]
    for name, op in ({} if args.recipes else augmentations()).items():
        batch.augment(op)  # compiles its kernels, if any
        s = timed(lambda op=op: batch.augment(op), args.rounds)
        rows.append({"name": name, "ms": 1e3 * s, "cost_pct": 100 * s / decode_s})
        if name in peers:
            k = timed(lambda aug=peers[name]: on_uint8(aug, batch.decoded), args.rounds)
            rows[-1].update(kornia_pct=100 * k / decode_s, kornia_x=k / s)
        load.append(os.getloadavg()[0])
    for name, (op, follower) in ({} if args.recipes else followers()).items():
        batch.follow(op, follower)  # compiles its kernels, if any
        s = timed(lambda op=op, f=follower: batch.follow(op, f), args.rounds)
        rows.append({"name": name, "ms": 1e3 * s, "cost_pct": 100 * s / decode_s})
        load.append(os.getloadavg()[0])
    for name, ops in recipes(args.size).items():
        s, pct = batch.recipe_cost(ops, args.rounds)
        rows.append({"name": name, "ms": 1e3 * s, "cost_pct": pct})
        load.append(os.getloadavg()[0])
    print(table(rows, COLUMNS + (KORNIA_COLUMNS if peers else [])))
    print(
        f"{args.images} photo JPEGs to {args.size}x{args.size}, one thread, best of "
        f"{args.rounds} (recipes: the median of {args.rounds} rounds alternating with the "
        f"plain decode); load average {min(load):.1f}-{max(load):.1f} on {os.cpu_count()} CPUs"
    )
    path = write_json(
        args.json,
        {
            "images": args.images,
            "size": args.size,
            "rounds": args.rounds,
            "load_average": load,
            "decode_ms": 1e3 * decode_s,
            "rows": rows,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
