"""What follows an image through RandAugment's and TrivialAugmentWide's warps (ShearX/Y,
TranslateX/Y, Rotate), through the Loader on real JPEGs: masks and image followers against a
numpy nearest-neighbour warp with torchvision's inverse affine, Geometry's matrices, boxes and
keypoints against v2's formulas (``_warp_reference.py``), boxes and keypoints against where
the pixels went; and every decode op class either moves its followers or is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("simplejpeg")
pytest.importorskip("numba")
import torch
from _image_files import jpeg
from _projective_reference import maps, sample_nearest
from _warp_reference import (
    WARP_NAMES,
    boxes_through,
    forward_matrix,
    inverse_matrix,
    points_through,
    warp_nearest,
)

import chute
from chute.image import plan, resize_nearest, uniforms
from chute.image.augment import augment
from chute.image.ops import DECODE_OPS, MOVES, padded, placed
from chute.image.randaugment import OPS

N = 40
SEED = 7
RRC = chute.RandomResizedCrop((24, 32), scale=(0.2, 1.0))


def _size(i: int) -> tuple[int, int]:
    return 40 + 3 * (i % 5), 56 - 2 * (i % 4)


def _blocks(h: int, w: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 21, (h // 3 + 1, w // 2 + 1), dtype=np.uint8).repeat(3, 0).repeat(2, 1)


def stored_mask(i: int) -> np.ndarray:
    h, w = _size(i)
    return np.ascontiguousarray(_blocks(h, w, i)[:h, :w])


def stored_box(i: int) -> np.ndarray:
    """One box per sample, (1, 4) xyxy, for RandomIoUCrop."""
    h, w = _size(i)
    return np.array([[w / 4, h / 5, w * 2 / 3, h * 3 / 4]])


def stored_ids(i: int) -> np.ndarray:
    """Each stored pixel's own number, ``y * w + x``: where each one lands is readable."""
    h, w = _size(i)
    return np.arange(h * w, dtype=np.int32).reshape(h, w)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("warps") / "d.chute"
    chute.write(
        dst,
        {
            "image": [jpeg(*_size(i), seed=i) for i in range(N)],
            "copy": [jpeg(*_size(i), seed=i) for i in range(N)],
            "mask": [stored_mask(i) for i in range(N)],
            "ids": [stored_ids(i) for i in range(N)],
            "label": np.arange(N),
            "box": [stored_box(i) for i in range(N)],
        },
        schema={
            "image": chute.fields.Image(),
            "copy": chute.fields.Image(),
            "mask": chute.fields.Mask(),
            "ids": chute.fields.Mask("int32"),
            "label": chute.fields.Tensor((), "int64"),
            "box": chute.Ragged("float64", (4,)),
        },
        part_size=13,
    )
    return dst


def drawn(ops: list[Any], idx: np.ndarray, size: tuple[int, int]) -> list[list[tuple[str, float]]]:
    """Per sample, the (op name, signed magnitude) of each round the leader's augmentations
    drew: the same draws (stream = position in ``ops``) the image got."""
    rounds = []
    for k, op in enumerate(ops):
        if getattr(op, "moves", None) == "warp":
            rounds += op.rounds(uniforms(SEED, 0, idx, k, op.draws), *size)
    return [[(OPS[op[j]], float(mag[j])) for op, mag in rounds] for j in range(len(idx))]


def reference(plane: np.ndarray, rounds: list[tuple[str, float]], fill: int) -> tuple[Any, ...]:
    """``plane`` (already cropped, resized, flipped) through each warp round by the numpy
    reference, and the forward matrices Geometry should carry."""
    h, w = plane.shape
    mats = []
    for name, mag in rounds:
        if name not in WARP_NAMES:
            mats.append(np.array([[1.0, 0, 0], [0, 1.0, 0]]))
            continue
        plane = warp_nearest(plane, inverse_matrix(name, mag, h, w), fill)
        mats.append(forward_matrix(name, mag, h, w))
    return plane, np.array(mats).reshape(len(rounds), 2, 3)


WARPING = {
    "RandAugment(2, 20)": chute.RandAugment(2, 20),
    "RandAugment(1, 30)": chute.RandAugment(1, 30),
    "TrivialAugmentWide()": chute.TrivialAugmentWide(),
}


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("aug", list(WARPING))
def test_followers_move_with_every_warp(data: Path, aug: str, workers: int) -> None:
    ds = chute.open(data)
    ops = [RRC, chute.RandomHorizontalFlip(), WARPING[aug]]
    decode = {
        "image": ops,
        "copy": chute.Follow("image"),
        "mask": chute.Follow("image", fill=255),
        "ids": chute.Follow("image", fill=-1),
        "geo": chute.Geometry("image"),
    }
    loader = chute.Loader(ds, 8, seed=SEED, num_workers=workers, decode=decode)
    rng = np.random.default_rng(0)
    warped = moved = 0
    for b in loader:
        idx = b["label"].numpy()
        sizes = ds.gather(idx)["image"].sizes.numpy()
        p = plan(ops, sizes[:, 0], sizes[:, 1], idx, seed=SEED)
        rounds = drawn(ops, idx, p.size)
        geo = b["geo"].numpy()
        assert geo.shape == (len(idx), 11 + 9 * len(rounds[0]))
        plain = np.empty((len(idx), 3, *p.size), np.uint8)  # decoded, no augmentation
        enc = ds.gather(idx)["image"]
        chute.image.decode_batch(enc, sizes[:, 0], sizes[:, 1], ops[:2], idx, SEED, 0, plain)
        for j, i in enumerate(idx.tolist()):
            names = {name for name, _ in rounds[j]}
            cropped = [
                resize_nearest(src(i), p.boxes[j], bool(p.flips[j]), np.empty(p.size, src(i).dtype))
                for src in (stored_mask, stored_ids)
            ]
            mask, mats = reference(cropped[0], rounds[j], 255)
            ids, _ = reference(cropped[1], rounds[j], -1)
            why = f"sample {i}, rounds {rounds[j]}"
            np.testing.assert_array_equal(b["mask"][j].numpy(), mask, err_msg=why)
            np.testing.assert_array_equal(b["ids"][j].numpy(), ids, err_msg=why)
            got = geo[j, 11:].reshape(-1, 3, 3)
            np.testing.assert_array_equal(got[:, 2], np.tile([0.0, 0.0, 1.0], (len(got), 1)))
            np.testing.assert_allclose(got[:, :2], mats, atol=1e-9)
            if names & set(WARP_NAMES):
                warped += 1
                moved += not np.array_equal(b["mask"][j].numpy(), cropped[0])
            if names <= {*WARP_NAMES, "Identity"}:  # only moved: the copy is the image
                assert torch.equal(b["copy"][j], b["image"][j]), f"sample {i}"
            elif len(rounds[j]) == 1:  # a colour op alone: the copy stays as decoded
                assert np.array_equal(b["copy"][j].numpy(), plain[j]), f"sample {i}"
            # boxes and keypoints: v2's formulas, round by round
            h, w = _size(i)
            xy = np.sort(rng.uniform(-5, [w + 5, h + 5], (2, 3, 2)), axis=0)  # (corner, K, xy)
            boxes = np.concatenate([xy[0], xy[1]], axis=1)
            got, valid = chute.transform_boxes(boxes, geo[j])
            want = boxes_through(boxes, geo[j])
            np.testing.assert_allclose(got.numpy(), want, atol=1e-9)
            wh = want[:, 2:] - want[:, :2]
            np.testing.assert_array_equal(valid.numpy(), (wh >= 1).all(1))
            pts = rng.uniform(0, [w, h], (5, 2))
            got_p, inside = chute.transform_points(pts, geo[j])
            want_p = points_through(pts, geo[j])
            np.testing.assert_allclose(got_p.numpy(), want_p, atol=1e-9)
            oh, ow = p.size
            want_in = (want_p >= 0).all(1) & (want_p[:, 0] <= ow - 1) & (want_p[:, 1] <= oh - 1)
            np.testing.assert_array_equal(inside.numpy(), want_in)
    assert warped > 5 and moved >= warped - 1  # the warps happened and moved the masks


def test_boxes_bound_where_their_pixels_went(data: Path) -> None:
    """A box's stored pixels, followed through crop, flip and warps by their numbers (the
    ``ids`` mask), lie in the box transform_boxes gives (within the 1 px of nearest
    sampling); the box is the enclosing one, so for a rotation it may be larger."""
    ds = chute.open(data)
    ops = [RRC, chute.RandomHorizontalFlip(), chute.RandAugment(2, 25)]
    decode = {"image": ops, "ids": chute.Follow("image", fill=-1), "geo": chute.Geometry("image")}
    rng = np.random.default_rng(1)
    checked = 0
    for b in chute.Loader(ds, 10, seed=SEED, decode=decode):
        for j, i in enumerate(b["label"].tolist()):
            h, w = _size(i)
            x1, x2 = np.sort(rng.integers(0, w + 1, 2))
            y1, y2 = np.sort(rng.integers(0, h + 1, 2))
            (box,), (valid,) = chute.transform_boxes([[x1, y1, x2 + 1, y2 + 1]], b["geo"][j])
            ids = b["ids"][j].numpy()
            sx, sy = ids % w, ids // w
            ys, xs = np.nonzero((ids >= 0) & (sx >= x1) & (sx <= x2) & (sy >= y1) & (sy <= y2))
            if not len(xs):
                continue
            assert valid or len(xs) < 3
            lo, hi = box.numpy()[:2] - 1, box.numpy()[2:] + 1
            assert xs.min() >= lo[0] and xs.max() + 1 <= hi[0], f"sample {i}"
            assert ys.min() >= lo[1] and ys.max() + 1 <= hi[1], f"sample {i}"
            checked += 1
    assert checked > N // 2


def test_keypoints_are_pixel_centres_a_flip_maps_x_to_w_minus_1_minus_x(tmp_path: Path) -> None:
    """At scale 1, a keypoint on a stored pixel's centre lands on the centre of the output
    pixel holding that stored pixel: exactly through flips and translations (v2's
    ``W - 1 - x``; ``W - x`` would be a pixel off), within a pixel through shears and
    rotations (nearest sampling, and v2 rotating keypoints about ``(W/2, H/2)``)."""
    h, w, n = 30, 44, 24
    dst = tmp_path / "k.chute"
    chute.write(
        dst,
        {
            "image": [jpeg(h, w, seed=i) for i in range(n)],
            "ids": [np.arange(h * w, dtype=np.int32).reshape(h, w)] * n,
        },
        schema={"image": chute.fields.Image(), "ids": chute.fields.Mask("int32")},
    )
    ops = [chute.Resize((h, w)), chute.RandomHorizontalFlip(1.0), chute.RandAugment(1, 30)]
    decode = {"image": ops, "ids": chute.Follow("image", fill=-1), "geo": chute.Geometry("image")}
    (b,) = list(chute.Loader(chute.open(dst), n, shuffle=False, seed=SEED, decode=decode))
    gy, gx = np.mgrid[2 : h - 2 : 3, 2 : w - 2 : 3]
    pts = np.stack([gx.ravel(), gy.ravel()], 1).astype(np.float64)
    rounds = drawn(ops, np.arange(n), (h, w))
    exact = 0
    for j in range(n):
        got, inside = chute.transform_points(pts, b["geo"][j])
        ids = b["ids"][j].numpy()
        ((name, _),) = rounds[j]
        tol = 0.0 if name not in ("ShearX", "ShearY", "Rotate") else 1.5
        exact += tol == 0
        for (x, y), (px, py), ok in zip(pts, got.numpy(), inside.numpy(), strict=True):
            where = np.argwhere(ids == int(y) * w + int(x))
            if not ok or not len(where):
                continue
            (oy, ox), *_ = where
            assert abs(ox - px) <= tol and abs(oy - py) <= tol, (j, name, (x, y))
        if name == "Identity":
            np.testing.assert_array_equal(got.numpy()[:, 0], w - 1 - pts[:, 0])
    assert exact >= 5


# ---------------------------------------------------------------- every op class


def _examples() -> dict[type, Any]:
    return {
        chute.RandomResizedCrop: RRC,
        chute.CenterCrop: chute.CenterCrop(24, ratio=0.8),
        chute.Resize: chute.Resize((24, 32)),
        chute.RandomCrop: chute.RandomCrop((24, 32), padding=3, pad_if_needed=True),
        chute.ResizePad: chute.ResizePad((24, 32), center=True),
        chute.ScaleJitter: chute.ScaleJitter((24, 32)),
        chute.ZoomOut: chute.ZoomOut(),
        chute.RandomIoUCrop: chute.RandomIoUCrop("box"),
        chute.RandomHorizontalFlip: chute.RandomHorizontalFlip(),
        chute.ColorJitter: chute.ColorJitter(0.4, 0.4, 0.4, 0.1),
        chute.Grayscale: chute.Grayscale(1.0),
        chute.GaussianBlur: chute.GaussianBlur(5),
        chute.RandomErasing: chute.RandomErasing(1.0, value=77),
        chute.RandAugment: chute.RandAugment(2, 20),
        chute.TrivialAugmentWide: chute.TrivialAugmentWide(),
        chute.RandomAffine: chute.RandomAffine(20, translate=(0.1, 0.1), fill=9),
        chute.RandomRotation: chute.RandomRotation(30),
        chute.RandomPerspective: chute.RandomPerspective(0.5, p=0.8),
    }


def _no_pixel_moves(op: Any) -> None:
    """An op that says it moves no pixel: mirroring its input mirrors its output (the same
    draws), or, for erasing, each pixel keeps its value or takes the erase value."""
    rng = np.random.default_rng(3)
    x = torch.from_numpy(rng.integers(0, 256, (6, 3, 24, 32), dtype=np.uint8))
    a, m = x.clone(), x.flip(-1).contiguous()
    augment([op], a, np.arange(6), 1, 0)
    augment([op], m, np.arange(6), 1, 0)
    if isinstance(op, chute.RandomErasing):
        assert ((a == x) | (a == int(op.value))).all() and not torch.equal(a, x)
    else:
        assert torch.equal(m, a.flip(-1)) and not torch.equal(a, x)


@pytest.mark.parametrize("cls", DECODE_OPS, ids=lambda c: c.__name__)
def test_every_decode_op_moves_its_followers_or_is_refused(data: Path, cls: type) -> None:
    examples = _examples()
    assert set(examples) == set(DECODE_OPS), "a new decode op needs a case here"
    op = examples[cls]
    assert op.moves in MOVES
    ds = chute.open(data)
    if isinstance(op, (chute.ZoomOut, chute.RandomIoUCrop)):  # frame ops: a size after them
        ops = [op, chute.Resize((24, 32))]
    else:
        ops = [op] if op.moves == "plan" and hasattr(op, "out_size") else [RRC, op]
    decode = {"image": ops, "ids": chute.Follow("image", fill=-1), "geo": chute.Geometry("image")}
    (b,) = list(chute.Loader(ds, N, shuffle=False, seed=SEED, decode=decode))
    idx = np.arange(N)
    sizes = ds.gather(idx)["image"].sizes.numpy()
    targets = {"box": [stored_box(i) for i in range(N)]}
    p = plan(ops, sizes[:, 0], sizes[:, 1], idx, seed=SEED, targets=targets)
    own = hasattr(op, "warp")  # a map per sample (_projective_reference), not RandAugment's
    u = uniforms(SEED, 0, idx, len(ops) - 1, op.draws)
    rounds = [[]] * N if own else drawn(ops, idx, p.size)
    assert b["geo"].shape == (N, 11 + 9 * (own or len(rounds[0])))
    moved = 0
    pad, dest = padded(p), placed(p)
    for j in range(N):
        extra = {"inner": p.inner[j], "dest": dest[j], "fill": -1} if pad[j] else {}
        ids = resize_nearest(
            stored_ids(j), p.boxes[j], bool(p.flips[j]), np.empty(p.size, np.int32), **extra
        )
        want, _ = reference(ids, rounds[j], -1)
        if own and (m := maps(op, u[j], *p.size)) is not None:
            want = sample_nearest(ids, m[1], -1)
        got = b["ids"][j].numpy()
        np.testing.assert_array_equal(got, want, err_msg=f"{cls.__name__}: sample {j}")
        moved += not np.array_equal(got, ids)
    assert (moved > 0) == (op.moves == "warp")
    if op.moves == "none":
        _no_pixel_moves(op)


def test_an_op_that_does_not_say_how_followers_move_is_refused(data: Path) -> None:
    class Wobble(chute.ColorJitter):  # moves pixels its own way, says nothing of followers
        moves = "wobble"

    ds = chute.open(data)
    for name, tie in (("mask", chute.Follow("image")), ("geo", chute.Geometry("image"))):
        with pytest.raises(chute.ArgumentError, match=r"Wobble.*left behind"):
            chute.Loader(ds, 4, decode={"image": [RRC, Wobble()], name: tie})
    next(iter(chute.Loader(ds, 4, decode={"image": [RRC, Wobble(0.1)]})))  # alone: no follower


@pytest.mark.parametrize("mix", [chute.MixUp(N), chute.CutMix(N)], ids=lambda m: type(m).__name__)
def test_mixing_a_batch_with_a_mask_is_refused(data: Path, mix: Any) -> None:
    """MixUp / CutMix move image pixels between samples and cannot mix class ids: a mask
    that follows the image is refused, naming it (v2 refuses masks too)."""
    ds = chute.open(data)
    decode = {"image": [RRC], "mask": chute.Follow("image")}
    with pytest.raises(chute.ArgumentError, match=r"field 'mask' \(4, 24, 32\) is a mask"):
        next(iter(chute.Loader(ds, 4, decode=decode, transform=mix)))
    next(iter(chute.Loader(ds, 4, decode={"image": [RRC]}, transform=mix)))  # no mask: mixed
