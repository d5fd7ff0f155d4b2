"""Detection and segmentation recipes through the Loader on real JPEGs: RandomCrop(padding=),
CenterCrop larger than the image, ResizePad, ScaleJitter, ZoomOut and RandomIoUCrop, alone
and composed. Each sample's mask is checked pixel for pixel against an independent numpy
pipeline of torchvision v2's steps (its parameter formulas on the same draws, then resize
by nearest at pixel centres in integer arithmetic, pad with the fill, crop); instance masks
plane by plane; boxes against v2's formulas; the image's padding is the fill colour."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("simplejpeg")
pytest.importorskip("numba")
import torch
from _image_files import jpeg
from _warp_reference import boxes_through

import chute
from chute.image import uniforms

N = 24
SEED = 5
FILL = (11, 22, 33)
OBJ = 100_000  # instance k of a sample is its ids mask + k * OBJ


def _size(i: int) -> tuple[int, int]:
    return 30 + 5 * (i % 5), 52 - 3 * (i % 4)


def _ids(i: int) -> np.ndarray:
    h, w = _size(i)
    return np.arange(h * w, dtype=np.int32).reshape(h, w)


def _inst(i: int) -> np.ndarray:
    """Sample ``i``'s instance masks: ``i % 3`` planes (0 included), plane k ids + k * OBJ."""
    return np.stack([_ids(i) + k * OBJ for k in range(i % 3)]) if i % 3 else _ids(i)[None][:0]


def _boxes(i: int) -> np.ndarray:
    h, w = _size(i)
    rng = np.random.default_rng(i)
    xy = np.sort(rng.uniform(0, [w, h], (2, 1 + i % 3, 2)), axis=0)
    return np.concatenate([xy[0], xy[1]], axis=1)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("det") / "d.chute"
    chute.write(
        dst,
        {
            "image": [jpeg(*_size(i), seed=i) for i in range(N)],
            "ids": [_ids(i) for i in range(N)],
            "inst": [_inst(i) for i in range(N)],
            "boxes": [_boxes(i) for i in range(N)],
            "label": np.arange(N),
        },
        schema={
            "image": chute.fields.Image(),
            "ids": chute.fields.Mask("int32"),
            "inst": chute.fields.Mask("int32", instances=True),
            "boxes": chute.Ragged("float64", (4,)),
            "label": chute.fields.Tensor((), "int64"),
        },
        part_size=9,
    )
    return dst


# ------------------------------------------------ v2's steps, from its parameter formulas


def _resize_int(h: int, w: int, short: int) -> tuple[int, int]:
    """torchvision ``Resize(int)``: the shorter side to ``short``, the other truncated."""
    return (short, int(short * w / h)) if h <= w else (int(short * h / w), short)


def _iou_crop(op: Any, h: int, w: int, boxes: np.ndarray, u: Any) -> tuple[int, int, int, int]:
    """v2's ``RandomIoUCrop._get_params`` as a plain loop: ``u(start, k)`` are the draws."""
    per = 1 + 4 * op.trials
    for r in range(100):
        d = u(r * per, per)
        iou = op.sampler_options[int(d[0] * len(op.sampler_options))]
        if iou >= 1.0:
            return 0, 0, w, h
        for t in range(op.trials):
            r0, r1, a, b = d[1 + 4 * t : 5 + 4 * t]
            nw = int(w * (op.min_scale + (op.max_scale - op.min_scale) * r0))
            nh = int(h * (op.min_scale + (op.max_scale - op.min_scale) * r1))
            if nh == 0 or not op.min_aspect_ratio <= nw / nh <= op.max_aspect_ratio:
                continue
            left, top = int((w - nw) * a), int((h - nh) * b)
            if nw == 0:
                continue
            ious = []
            for x1, y1, x2, y2 in boxes.tolist():
                cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
                if left < cx < left + nw and top < cy < top + nh:
                    iw = max(0.0, min(x2, left + nw) - max(x1, left))
                    ih = max(0.0, min(y2, top + nh) - max(y1, top))
                    ious.append(iw * ih / ((x2 - x1) * (y2 - y1) + nw * nh - iw * ih))
            if ious and max(ious) >= iou:
                return left, top, left + nw, top + nh
    return 0, 0, w, h


def v2_steps(ops: list[Any], i: int) -> tuple[list[tuple], bool]:
    """Sample ``i``'s steps under v2's formulas: ("resize", h, w), ("pad", l, t, r, b),
    ("crop", top, left, h, w), with ``boxes`` followed into each frame; and the flip."""
    h, w = _size(i)
    boxes = _boxes(i)
    steps: list[tuple] = []
    flip = False
    for k, op in enumerate(ops):

        def u(start: int, n: int, k: int = k) -> np.ndarray:
            return uniforms(SEED, 0, np.array([i]), k, n, start)[0]

        name = type(op).__name__
        if name == "RandomHorizontalFlip":
            flip ^= bool(u(0, 1)[0] < op.p)
            continue
        new: list[tuple] = []
        if name == "Resize":
            new = [("resize", *op.out_size)]
        elif name == "CenterCrop":
            oh, ow = op.out_size
            rh, rw = _resize_int(h, w, int(min(oh, ow) / op.ratio))
            new = [("resize", rh, rw)]
            if ow > rw or oh > rh:
                pl, pt = (ow - rw) // 2 if ow > rw else 0, (oh - rh) // 2 if oh > rh else 0
                pr, pb = (ow - rw + 1) // 2 if ow > rw else 0, (oh - rh + 1) // 2 if oh > rh else 0
                new.append(("pad", pl, pt, pr, pb))
                rh, rw = rh + pt + pb, rw + pl + pr
            new.append(("crop", round((rh - oh) / 2), round((rw - ow) / 2), oh, ow))
        elif name == "RandomCrop":
            oh, ow = op.out_size
            p = op.padding
            pl, pt, pr, pb = (p,) * 4 if isinstance(p, int) else p
            ph, pw = h + pt + pb, w + pl + pr
            if op.pad_if_needed and ph < oh:
                pt, pb, ph = pt + oh - ph, pb + oh - ph, ph + 2 * (oh - ph)
            if op.pad_if_needed and pw < ow:
                pl, pr, pw = pl + ow - pw, pr + ow - pw, pw + 2 * (ow - pw)
            d = u(0, 2)
            top, left = int(d[0] * (ph - oh + 1)), int(d[1] * (pw - ow + 1))
            new = [("pad", pl, pt, pr, pb), ("crop", top, left, oh, ow)]
        elif name == "ResizePad":
            oh, ow = op.out_size
            if op.shorter is not None and max(_resize_int(h, w, op.shorter)) <= oh == ow:
                nh, nw = _resize_int(h, w, op.shorter)
            elif h * ow >= w * oh:
                nh, nw = oh, int(oh * w / h)
            else:
                nh, nw = int(ow * h / w), ow
            top = (oh - nh) // 2 if op.center else 0
            left = (ow - nw) // 2 if op.center else 0
            new = [("resize", nh, nw), ("pad", left, top, ow - nw - left, oh - nh - top)]
        elif name == "ScaleJitter":
            oh, ow = op.out_size
            d = u(0, 3)
            s = min(oh / h, ow / w) * (op.scale[0] + (op.scale[1] - op.scale[0]) * d[0])
            nh, nw = int(h * s), int(w * s)
            top, left = int(max(nh - oh, 0) * d[1]), int(max(nw - ow, 0) * d[2])
            ch, cw = min(nh, oh), min(nw, ow)
            new = [("resize", nh, nw), ("crop", top, left, ch, cw), ("pad", 0, 0, ow - cw, oh - ch)]
        elif name == "ZoomOut":
            d = u(0, 4)
            if d[0] < op.p:
                r = op.side_range[0] + (op.side_range[1] - op.side_range[0]) * d[1]
                cw, ch = int(w * r), int(h * r)
                left, top = int((cw - w) * d[2]), int((ch - h) * d[3])
                new = [("pad", left, top, cw - w - left, ch - h - top)]
        elif name == "RandomIoUCrop":
            x1, y1, x2, y2 = _iou_crop(op, h, w, boxes, u)
            new = [("crop", y1, x1, y2 - y1, x2 - x1)]
        else:
            continue  # an augmentation: moves nothing here
        for step in new:
            if step[0] == "resize":
                boxes = boxes * ([step[2] / w, step[1] / h] * 2)
                h, w = step[1], step[2]
            elif step[0] == "pad":
                boxes = boxes + [step[1], step[2]] * 2
                h, w = h + step[2] + step[4], w + step[1] + step[3]
            else:
                boxes = boxes - [step[2], step[1]] * 2
                h, w = step[3], step[4]
        steps += new
    return steps, flip


def run_steps(
    plane: np.ndarray, steps: list[tuple], flip: bool, fill: int, tie: int = 0
) -> np.ndarray:
    """``plane`` through the steps: resize by nearest at pixel centres (PIL's NEAREST, in
    integer arithmetic: output pixel ``x`` reads ``floor((2x + 1) * in / (2 * out))``; with
    ``tie=1`` a centre exactly on a pixel edge reads the pixel before it), pad with
    ``fill``, crop (an area outside the frame would be v2's error)."""
    for step in steps:
        h, w = plane.shape
        if step[0] == "resize":
            oh, ow = step[1:]
            rows = ((2 * np.arange(oh) + 1) * h - tie) // (2 * oh)
            cols = ((2 * np.arange(ow) + 1) * w - tie) // (2 * ow)
            plane = plane[rows][:, cols]
        elif step[0] == "pad":
            left, top, right, bottom = step[1:]
            out = np.full((h + top + bottom, w + left + right), fill, plane.dtype)
            out[top : top + h, left : left + w] = plane
            plane = out
        else:
            top, left, ch, cw = step[1:]
            assert top >= 0 and left >= 0 and top + ch <= h and left + cw <= w, step
            plane = plane[top : top + ch, left : left + cw]
    return plane[:, ::-1] if flip else plane


def _check_ids(got: np.ndarray, i: int, steps: list[tuple], flip: bool) -> None:
    """``got`` (sample ``i``'s ids mask) is the steps' output: the same padding, and each
    pixel the stored row and column the steps read (a centre exactly on a stored pixel's
    edge may read either side: PIL's float box, one axis at a time)."""
    h, w = _size(i)
    rows, cols = np.mgrid[0:h, 0:w].astype(np.int32)
    want = run_steps(_ids(i), steps, flip, -1)
    why = f"sample {i}: {steps} {flip}"
    np.testing.assert_array_equal(got < 0, want < 0, err_msg=why)
    for axis, plane, at in ((0, rows, got // w), (1, cols, got % w)):
        a, b = (run_steps(plane, steps, flip, -1, tie=t) for t in (0, 1))
        ok = (got < 0) | (at == a) | (at == b)
        assert ok.all(), f"{why}: axis {axis} at {np.argwhere(~ok)[:3].tolist()}"
    assert (got == want).mean() > 0.8, why  # ties are the exception


RECIPES = {
    "RandomCrop(32, padding=4)": [chute.RandomCrop(32, padding=4, fill=FILL)],
    "RandomCrop pad_if_needed": [
        chute.RandomCrop((40, 56), padding=(2, 1, 3, 0), pad_if_needed=True, fill=FILL),
        chute.RandomHorizontalFlip(),
    ],
    "CenterCrop larger": [chute.CenterCrop((24, 32), ratio=0.8), chute.RandomHorizontalFlip()],
    "ResizePad": [chute.ResizePad(48, fill=FILL), chute.RandomHorizontalFlip()],
    "ResizePad(center)": [chute.ResizePad((40, 64), center=True, fill=FILL)],
    "ResizePad(shorter)": [chute.ResizePad(64, shorter=36, fill=FILL)],
    "ScaleJitter": [chute.ScaleJitter(48, (0.3, 2.0), fill=FILL), chute.RandomHorizontalFlip()],
    "ZoomOut + Resize": [chute.ZoomOut((1.0, 3.0), p=0.7, fill=FILL), chute.Resize((36, 44))],
    "IoUCrop + Resize": [chute.RandomIoUCrop(), chute.Resize(40)],
    "SSD": [
        chute.ZoomOut(fill=FILL),
        chute.RandomIoUCrop(),
        chute.Resize(40),
        chute.RandomHorizontalFlip(),
    ],
    "IoUCrop + ResizePad": [
        chute.RandomIoUCrop(min_scale=0.5),
        chute.ResizePad(40, center=True, fill=FILL),
    ],
}


def _fill_of(ops: list[Any]) -> tuple[int, int, int]:
    fills = [getattr(op, "fill", 0) for op in ops if hasattr(op, "fill")]
    f = fills[0] if fills else 0
    return f if isinstance(f, tuple) else (f, f, f)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_every_follower_moves_as_v2s_steps(data: Path, recipe: str, workers: int) -> None:
    ops = RECIPES[recipe]
    decode = {
        "image": ops,
        "ids": chute.Follow("image", fill=-1),
        "inst": chute.Follow("image", fill=-1),
        "geo": chute.Geometry("image"),
    }
    loader = chute.Loader(chute.open(data), 7, seed=SEED, num_workers=workers, decode=decode)
    padded = seen = 0
    for b in loader:
        for j, i in enumerate(b["label"].tolist()):
            steps, flip = v2_steps(ops, i)
            got = b["ids"][j].numpy()
            _check_ids(got, i, steps, flip)
            planes = b["inst"][j].numpy()  # each instance moved as the 2-D mask
            assert planes.shape == (i % 3, *got.shape)
            for k, plane in enumerate(planes):
                np.testing.assert_array_equal(plane, np.where(got < 0, -1, got + k * OBJ))
            # the image's padding is the fill colour, exactly where the mask's is
            pad = got < 0
            image = b["image"][j].numpy()
            for c in range(3):
                assert (image[c][pad] == _fill_of(ops)[c]).all(), f"sample {i}"
            padded += pad.any()
            seen += 1
            # boxes: v2's, followed through the same steps
            h, w = _size(i)
            boxes = _boxes(i)
            got_b, valid = chute.transform_boxes(boxes, b["geo"][j])
            np.testing.assert_allclose(
                got_b.numpy(), boxes_through(boxes, b["geo"][j].numpy()), atol=1e-9
            )
            ref = _boxes_v2(boxes, steps, flip, h, w)
            np.testing.assert_allclose(got_b.numpy(), ref, atol=1e-6, err_msg=f"sample {i}")
            wh = ref[:, 2:] - ref[:, :2]
            np.testing.assert_array_equal(valid.numpy(), (wh >= 1).all(1))
    assert seen == N
    if any(isinstance(op, (chute.ZoomOut, chute.RandomCrop)) for op in ops) or recipe in (
        "ResizePad",
        "ScaleJitter",
    ):
        assert padded > 0


def _boxes_v2(boxes: np.ndarray, steps: list[tuple], flip: bool, h: int, w: int) -> np.ndarray:
    """v2's boxes through the steps: resize scales, pad shifts, crop shifts then clips to the
    new frame (v2 clamps boxes to the canvas after every crop)."""
    b = boxes.astype(np.float64).copy()
    for step in steps:
        if step[0] == "resize":
            b *= [step[2] / w, step[1] / h] * 2
            h, w = step[1], step[2]
        elif step[0] == "pad":
            b += [step[1], step[2]] * 2
            h, w = h + step[2] + step[4], w + step[1] + step[3]
        else:
            b -= [step[2], step[1]] * 2
            h, w = step[3], step[4]
            b = np.clip(b, 0, [w, h, w, h])
    if flip:
        b[:, [0, 2]] = w - b[:, [2, 0]]
    return b


def test_center_crop_larger_than_the_resized_image_pads_as_v2(tmp_path: Path) -> None:
    """``CenterCrop((24, 32), ratio=0.8)`` of a 52x50 image: resized to 31x30, the crop 2
    columns wider: v2 pads one zero column on each side."""
    dst = tmp_path / "c.chute"
    ids = np.arange(52 * 50, dtype=np.int32).reshape(52, 50)
    chute.write(
        dst,
        {"image": [jpeg(52, 50)], "ids": [ids]},
        schema={"image": chute.fields.Image(), "ids": chute.fields.Mask("int32")},
    )
    decode = {
        "image": [chute.CenterCrop((24, 32), ratio=0.8)],
        "ids": chute.Follow("image", fill=-1),
    }
    (b,) = list(chute.Loader(chute.open(dst), 1, decode=decode))
    got = b["ids"][0].numpy()
    want = run_steps(
        ids, [("resize", 31, 30), ("pad", 1, 0, 1, 0), ("crop", 4, 0, 24, 32)], False, -1
    )
    np.testing.assert_array_equal(got, want)
    assert (got[:, [0, -1]] == -1).all() and (got[:, 1:-1] >= 0).all()
    assert (b["image"][0, :, :, [0, -1]] == 0).all()


def test_random_crop_is_the_cifar_recipe(tmp_path: Path) -> None:
    """``RandomCrop(32, padding=4)`` on 32x32 images: every offset in [-4, 4], each drawn."""
    dst = tmp_path / "c.chute"
    n = 200
    chute.write(
        dst,
        {"image": [jpeg(32, 32, seed=i % 3) for i in range(n)], "label": np.arange(n)},
        schema={"image": chute.fields.Image(), "label": chute.fields.Tensor((), "int64")},
    )
    decode = {"image": [chute.RandomCrop(32, padding=4)], "geo": chute.Geometry("image")}
    geo = torch.cat([b["geo"] for b in chute.Loader(chute.open(dst), 50, decode=decode)])
    assert set(geo[:, 0].tolist()) == set(range(-4, 5)) == set(geo[:, 1].tolist())
    np.testing.assert_array_equal(geo[:, 2] - geo[:, 0], 32)


def test_iou_crop_holds_a_box_centre_and_drops_the_others_with_centre(data: Path) -> None:
    ops = [chute.RandomIoUCrop(), chute.Resize(40)]
    decode = {"image": ops, "geo": chute.Geometry("image")}
    cropped = 0
    for b in chute.Loader(chute.open(data), 8, seed=SEED, decode=decode):
        for j, i in enumerate(b["label"].tolist()):
            left, top, right, bottom = b["geo"][j, 7:11].tolist()
            boxes = _boxes(i)
            cx, cy = boxes[:, 0::2].mean(1), boxes[:, 1::2].mean(1)
            inside = (left < cx) & (cx < right) & (top < cy) & (cy < bottom)
            h, w = _size(i)
            if (left, top, right, bottom) != (0, 0, w, h):
                cropped += 1
                assert inside.any()
            _, kept = chute.transform_boxes(boxes, b["geo"][j], centre=True)
            _, valid = chute.transform_boxes(boxes, b["geo"][j])
            np.testing.assert_array_equal(kept.numpy(), valid.numpy() & inside)
    assert cropped > N // 3


def test_decode_op_refusals(data: Path, tmp_path: Path) -> None:
    ds = chute.open(data)
    with pytest.raises(chute.ArgumentError, match="ZoomOut must come before Resize"):
        chute.Loader(ds, 4, decode={"image": [chute.Resize(32), chute.ZoomOut()]})
    with pytest.raises(chute.ArgumentError, match="one fill"):
        chute.Loader(ds, 4, decode={"image": [chute.ZoomOut(fill=3), chute.ResizePad(32)]})
    with pytest.raises(chute.ArgumentError, match="fill must be a level"):
        chute.ZoomOut(fill=(1, 2))
    with pytest.raises(chute.SchemaError, match="field 'gt'"):
        next(
            iter(
                chute.Loader(ds, 4, decode={"image": [chute.RandomIoUCrop("gt"), chute.Resize(9)]})
            )
        )
    with pytest.raises(chute.ArgumentValueError, match="smaller than the crop"):
        next(iter(chute.Loader(ds, 4, decode={"image": [chute.RandomCrop(60)]})))
    with pytest.raises(chute.ArgumentValueError, match="side_range"):
        chute.ZoomOut((0.5, 2.0))


def test_instance_masks_store_any_count_and_follow_warps(data: Path, tmp_path: Path) -> None:
    """(N, H, W) per sample, N = 0 included, read back exactly; through RandAugment's warps
    each plane moves exactly as the 2-D mask of the same sample."""
    ds = chute.open(data)
    for i in range(5):
        np.testing.assert_array_equal(
            np.asarray(ds[i]["inst"]),
            _inst(i),
        )
    assert ds.schema["inst"] == chute.fields.Mask("int32", instances=True)
    ops = [
        chute.RandomResizedCrop((24, 32)),
        chute.RandomHorizontalFlip(),
        chute.RandAugment(2, 25),
    ]
    decode = {
        "image": ops,
        "ids": chute.Follow("image", fill=-1),
        "inst": chute.Follow("image", fill=-1),
    }
    warped = 0
    for workers in (0, 2):
        for b in chute.Loader(ds, 6, seed=SEED, num_workers=workers, decode=decode):
            assert isinstance(b["inst"], chute.RaggedBatch)
            for j in range(len(b["label"])):
                got = b["ids"][j].numpy()
                warped += (got == -1).any()
                for k, plane in enumerate(b["inst"][j].numpy()):
                    np.testing.assert_array_equal(plane, np.where(got < 0, -1, got + k * OBJ))
    assert warped > 3
    with pytest.raises(chute.SchemaError, match="does not match"):
        m = [np.zeros((2, 3, 4), np.uint8)]
        chute.write(tmp_path / "m.chute", {"m": m}, schema={"m": chute.fields.Mask()})
