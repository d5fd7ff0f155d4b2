"""Fields tied to an image's plan (decode={"mask": chute.Follow("image")}, chute.Geometry) and
chute.transform_boxes: masks exact against PIL's nearest resize for every op order, the same
crop as the image, boxes against v2-style reference maths and against drawn masks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("simplejpeg")
import torch
from _image_files import jpeg
from PIL import Image

import chute
from chute.image import plan

N = 23
RRC = chute.RandomResizedCrop((24, 32), scale=(0.1, 1.0))
ORDERS = {
    "flip-rrc": [chute.RandomHorizontalFlip(), RRC],
    "rrc-flip": [RRC, chute.RandomHorizontalFlip()],
    "center": [chute.CenterCrop(20, ratio=0.8), chute.RandomHorizontalFlip(0.7)],
    "resize": [chute.Resize((30, 18)), chute.RandomHorizontalFlip()],
}


def _sizes() -> list[tuple[int, int]]:
    return [(40 + 7 * (i % 5), 90 - 5 * (i % 7)) for i in range(N)]


def _mask(h: int, w: int, seed: int) -> np.ndarray:
    """Class ids in blocks of random sizes: edges everywhere a resize could blend."""
    rng = np.random.default_rng(seed)
    return (
        rng.integers(0, 21, (h // 3 + 1, w // 2 + 1), dtype=np.uint8)
        .repeat(3, 0)
        .repeat(2, 1)[:h, :w]
        .copy()
    )


@pytest.fixture(scope="module")
def seg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("seg") / "d.chute"
    sizes = _sizes()
    chute.write(
        dst,
        {
            "image": [jpeg(h, w, seed=i) for i, (h, w) in enumerate(sizes)],
            "copy": [jpeg(h, w, seed=i) for i, (h, w) in enumerate(sizes)],
            "mask": [_mask(h, w, i) for i, (h, w) in enumerate(sizes)],
            "wide": [_mask(h, w, i).astype(np.uint16) * 3000 for i, (h, w) in enumerate(sizes)],
            "label": np.arange(N),
        },
        schema={
            "image": chute.fields.Image(),
            "copy": chute.fields.Image(),
            "mask": chute.fields.Mask(),
            "wide": chute.fields.Mask("uint16"),
            "label": chute.fields.Tensor((), "int64"),
        },
        part_size=10,
    )
    return dst


def pil_nearest(mask: np.ndarray, box: np.ndarray, size: tuple[int, int], flip: bool) -> np.ndarray:
    out = np.asarray(
        Image.fromarray(mask).resize(size[::-1], Image.Resampling.NEAREST, box=box.tolist())
    )
    return out[:, ::-1] if flip else out


@pytest.mark.parametrize("order", list(ORDERS))
def test_masks_follow_the_image_exactly(seg: Path, order: str) -> None:
    ds = chute.open(seg)
    ops = ORDERS[order]
    loader = chute.Loader(
        ds,
        6,
        seed=5,
        num_workers=2,
        decode={
            "image": ops,
            "copy": chute.Follow("image"),
            "mask": chute.Follow("image"),
            "wide": chute.Follow("image"),
            "geo": chute.Geometry("image"),
        },
    )
    seen = 0
    for b in loader:
        idx = b["label"].numpy()
        sizes = ds.gather(idx)["image"].sizes.numpy()
        p = plan(ops, sizes[:, 0], sizes[:, 1], idx, seed=5, epoch=0)
        np.testing.assert_array_equal(b["geo"].numpy()[:, :4], p.boxes)
        np.testing.assert_array_equal(b["geo"].numpy()[:, 6], p.flips)
        assert (b["geo"].numpy()[:, 4:6] == p.size).all()
        # The other image follows pixel for pixel: one plan for both.
        assert torch.equal(b["copy"], b["image"])
        assert b["mask"].dtype == torch.uint8 and b["mask"].shape[1:] == p.size
        assert b["wide"].dtype == torch.uint16
        for j, i in enumerate(idx):
            want = pil_nearest(_mask(*_sizes()[i], int(i)), p.boxes[j], p.size, bool(p.flips[j]))
            np.testing.assert_array_equal(b["mask"][j].numpy(), want, err_msg=f"sample {i}")
            np.testing.assert_array_equal(b["wide"][j].numpy(), want.astype(np.uint16) * 3000)
        seen += len(idx)
    assert seen == N


def test_follow_resumes_exactly_and_differs_across_epochs(seg: Path) -> None:
    decode = {"image": ORDERS["flip-rrc"], "mask": chute.Follow("image")}

    def make() -> chute.Loader:
        return chute.Loader(chute.open(seg), 4, seed=2, num_workers=2, decode=decode)

    loader = make()
    loader.set_epoch(1)
    full = [b["mask"].clone() for b in loader]
    loader = make()
    loader.set_epoch(1)
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    rest = [b["mask"].clone() for b in resumed]
    assert all(torch.equal(a, b) for a, b in zip(full[2:], rest, strict=True))
    loader.set_epoch(2)
    assert not all(torch.equal(a, b["mask"]) for a, b in zip(full, loader, strict=True))


def test_follow_errors(tmp_path: Path, seg: Path) -> None:
    ds = chute.open(seg)
    with pytest.raises(chute.ArgumentError, match="must have its own decode ops"):
        chute.Loader(ds, 4, decode={"mask": chute.Follow("image")})
    with pytest.raises(chute.SchemaError, match=r"'label'.*image or mask"):
        chute.Loader(ds, 4, decode={"image": [RRC], "label": chute.Follow("image")})
    with pytest.raises(chute.SchemaError, match="name the geometry field differently"):
        chute.Loader(ds, 4, decode={"image": [RRC], "mask": chute.Geometry("image")})
    with pytest.raises(chute.ArgumentError, match="field name"):
        chute.Follow(3)  # type: ignore[arg-type]
    bad = tmp_path / "bad.chute"
    chute.write(
        bad,
        {
            "image": [jpeg(40, 50)] * 4,
            "mask": [np.zeros((40, 50), np.uint8)] * 3 + [np.zeros((4, 5), np.uint8)],
        },
        schema={"image": chute.fields.Image(), "mask": chute.fields.Mask()},
    )
    loader = chute.Loader(
        chute.open(bad), 4, decode={"image": [RRC], "mask": chute.Follow("image")}
    )
    with pytest.raises(chute.FormatError, match=r"'mask'.*sample 3 is \(4, 5\).*\(40, 50\)"):
        next(iter(loader))


def reference_boxes(boxes: np.ndarray, g: np.ndarray) -> np.ndarray:
    """torchvision.transforms.v2's box maths, one box at a time in plain python: crop
    (shift, clamp to the crop), resize (scale), horizontal flip (x -> W - x, swapped)."""
    left, top, right, bottom, oh, ow, flip = g[:7].tolist()
    out = []
    for x1, y1, x2, y2 in boxes.tolist():
        cw, ch = right - left, bottom - top
        x1, x2 = (min(max(x - left, 0.0), cw) * ow / cw for x in (x1, x2))
        y1, y2 = (min(max(y - top, 0.0), ch) * oh / ch for y in (y1, y2))
        if flip:
            x1, x2 = ow - x2, ow - x1
        out.append([x1, y1, x2, y2])
    return np.array(out)


def test_transform_boxes_matches_the_reference_in_every_format() -> None:
    rng = np.random.default_rng(0)
    ops = ORDERS["rrc-flip"]
    heights, widths = rng.integers(30, 90, 16), rng.integers(30, 90, 16)
    p = plan(ops, heights, widths, np.arange(16), seed=1)
    g = np.concatenate(
        [p.boxes, np.tile(p.size, (16, 1)), p.flips[:, None].astype(np.float64), p.boxes], axis=1
    )
    xy = np.sort(rng.uniform(0, 90, (16, 5, 2, 2)), axis=2)  # (B, K, corner, xy)
    boxes = xy.transpose(0, 1, 3, 2).reshape(16, 5, 4)[..., [0, 2, 1, 3]]
    got, valid = chute.transform_boxes(boxes, g)
    want = np.stack([reference_boxes(boxes[i], g[i]) for i in range(16)])
    np.testing.assert_allclose(got.numpy(), want, atol=1e-9)
    wh = want[..., 2:] - want[..., :2]
    np.testing.assert_array_equal(valid.numpy(), (wh >= 1).all(-1))
    assert 0 < valid.sum() < valid.numel()  # some cut away by the crops, most kept
    xywh = np.concatenate([boxes[..., :2], boxes[..., 2:] - boxes[..., :2]], -1)
    got_wh, _ = chute.transform_boxes(xywh, g, format="xywh")
    np.testing.assert_allclose(got_wh.numpy(), np.concatenate([want[..., :2], wh], -1), atol=1e-9)
    cxcy = np.concatenate(
        [(boxes[..., :2] + boxes[..., 2:]) / 2, boxes[..., 2:] - boxes[..., :2]], -1
    )
    got_c, _ = chute.transform_boxes(cxcy, g, format="cxcywh")
    np.testing.assert_allclose(got_c.numpy()[..., 2:], wh, atol=1e-9)
    one, _ = chute.transform_boxes(boxes[3], g[3])  # one sample: (K, 4) with (11,)
    np.testing.assert_allclose(one.numpy(), want[3], atol=1e-9)
    points = boxes[..., :2]
    pts, inside = chute.transform_points(points, g)
    as_boxes = np.concatenate([points, points], -1)  # a point is an empty box
    want_pts = np.stack([reference_boxes(as_boxes[i], g[i]) for i in range(16)])[..., :2]
    want_pts[..., 0] -= g[:, 6:7]  # but a pixel centre: v2 flips it to W - 1 - x
    assert 0 < inside.sum() < inside.numel()
    np.testing.assert_allclose(pts.numpy()[inside.numpy()], want_pts[inside.numpy()], atol=1e-9)
    with pytest.raises(chute.ArgumentError, match="format"):
        chute.transform_boxes(boxes, g, format="yxyx")


def test_transformed_boxes_bound_the_drawn_box_in_the_decoded_mask(tmp_path: Path) -> None:
    """A box drawn into a mask and decoded with Follow lands where transform_boxes says."""
    n, h, w = 12, 64, 80
    boxes = np.array([[10 + i, 8 + 2 * i, 50 + i, 40 + i] for i in range(n)], np.float64)
    masks = []
    for x1, y1, x2, y2 in boxes.astype(int):
        m = np.zeros((h, w), np.uint8)
        m[y1:y2, x1:x2] = 1
        masks.append(m)
    dst = tmp_path / "det.chute"
    chute.write(
        dst,
        {"image": [jpeg(h, w, seed=i) for i in range(n)], "mask": masks, "box": boxes},
        schema={
            "image": chute.fields.Image(),
            "mask": chute.fields.Mask(),
            "box": chute.fields.Tensor((4,), "float64"),
        },
    )
    decode = {
        "image": [chute.RandomResizedCrop(48, scale=(0.3, 1.0)), chute.RandomHorizontalFlip()],
        "mask": chute.Follow("image"),
        "geo": chute.Geometry("image"),
    }
    (b,) = list(chute.Loader(chute.open(dst), n, shuffle=False, decode=decode))
    got, valid = chute.transform_boxes(b["box"], b["geo"])
    for j in range(n):
        ys, xs = np.nonzero(b["mask"][j].numpy())
        if not valid[j]:
            assert len(xs) <= 48  # at most a sliver survives
            continue
        drawn = np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
        np.testing.assert_allclose(drawn, got[j].numpy(), atol=1.0)


def test_views_decode_the_same_image_with_their_own_draws(seg: Path) -> None:
    ds = chute.open(seg)
    glob = [chute.RandomResizedCrop(24, scale=(0.4, 1.0)), chute.RandomHorizontalFlip()]
    local = [chute.RandomResizedCrop(12, scale=(0.05, 0.4)), chute.RandomHorizontalFlip()]
    decode = {
        "image": glob,
        "global_2": chute.View("image", glob),
        "local_1": chute.View("image", [*local, chute.ColorJitter(0.4, 0.4, 0.4, 0.1)]),
        "local_2": chute.View("image", local),
        "mask": chute.Follow("local_2"),
        "geo": chute.Geometry("global_2"),
    }
    loader = chute.Loader(ds, 6, seed=3, num_workers=2, decode=decode)
    assert loader.dataset.schema["local_1"] == chute.fields.Tensor((3, 12, 12), "uint8")
    seen = 0
    for b in loader:
        idx = b["label"].numpy()
        assert b["image"].shape[1:] == b["global_2"].shape[1:] == (3, 24, 24)
        assert b["local_1"].shape[1:] == b["local_2"].shape[1:] == (3, 12, 12)
        assert not torch.equal(b["image"], b["global_2"])  # same ops, other draws
        sizes = ds.gather(idx)["image"].sizes.numpy()
        for name, ops in (("global_2", glob), ("local_2", local)):
            # a view is its field decoded with its own ops at its own seed
            seed = chute.image.follow.view_seed(3, name)
            want = np.empty(tuple(b[name].shape), np.uint8)
            enc = ds.gather(idx)["image"]
            chute.image.decode_batch(enc, sizes[:, 0], sizes[:, 1], ops, idx, seed, 0, want)
            np.testing.assert_array_equal(want, b[name].numpy(), err_msg=name)
        p = plan(glob, sizes[:, 0], sizes[:, 1], idx, chute.image.follow.view_seed(3, "global_2"))
        np.testing.assert_array_equal(b["geo"].numpy()[:, :4], p.boxes)
        p = plan(local, sizes[:, 0], sizes[:, 1], idx, chute.image.follow.view_seed(3, "local_2"))
        for j, i in enumerate(idx):
            want = pil_nearest(_mask(*_sizes()[i], int(i)), p.boxes[j], p.size, bool(p.flips[j]))
            np.testing.assert_array_equal(b["mask"][j].numpy(), want, err_msg=f"sample {i}")
        seen += len(idx)
    assert seen == N
    one = loader.dataset[4]
    assert one["local_1"].shape == (3, 12, 12) and one["image"].shape == (3, 24, 24)


def test_views_alone_resume_exactly(seg: Path) -> None:
    decode = {"a": chute.View("image", [RRC]), "b": chute.View("copy", ORDERS["flip-rrc"])}

    def make() -> chute.Loader:
        return chute.Loader(chute.open(seg), 4, seed=2, num_workers=2, decode=decode)

    full = [(b["a"].clone(), b["b"].clone()) for b in make()]
    loader = make()
    it = iter(loader)
    next(it)
    resumed = make()
    resumed.load_state_dict(loader.state_dict())
    rest = [(b["a"], b["b"]) for b in resumed]
    assert len(rest) == len(full) - 1
    for (a, b), (c, d) in zip(full[1:], rest, strict=True):
        assert torch.equal(a, c) and torch.equal(b, d)


def test_view_errors(seg: Path) -> None:
    ds = chute.open(seg)
    with pytest.raises(chute.SchemaError, match="name the view field differently"):
        chute.Loader(ds, 4, decode={"mask": chute.View("image", [RRC])})
    with pytest.raises(chute.SchemaError, match=r"\{'v': View\('label', \.\.\.\)\}.*image fields"):
        chute.Loader(ds, 4, decode={"v": chute.View("label", [RRC])})
    with pytest.raises(chute.SchemaError, match=r"\{'v': View\('nope', .*\)\}: no field 'nope'"):
        chute.Loader(ds, 4, decode={"v": chute.View("nope", [RRC])})
    with pytest.raises(chute.ArgumentError, match="field name"):
        chute.View(None, [RRC])  # type: ignore[arg-type]
    with pytest.raises(chute.ArgumentError):
        chute.Loader(ds, 4, decode={"v": chute.View("image", [])})
