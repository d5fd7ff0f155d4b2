"""Mosaic through the Loader on real JPEGs: each output pixel of the image, of a mask of
per-pixel ids and of every instance plane, each box, each per-box label and each keypoint with
its visibility, checked against a plain numpy reference of YOLO's tiling on the same draws (the
centre and partners from ``chute.image.uniforms``, each image translated so that its corner
meets the centre, boxes shifted and clipped to the image's piece, degenerate ones dropped with
their rows, keypoints shifted unclipped and invisible outside their piece); the same mosaics
after a resume, others in the next epoch; refusals of what would be left behind."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("simplejpeg")
import torch
from _image_files import jpeg
from _reliability import record

import chute
from chute.errors import ArgumentError, ArgumentValueError, SchemaError
from chute.image import uniforms
from chute.image.mosaic import STREAM

Record = Callable[[str, Any], None]
N = 20
SEED = 3
OBJ = 100_000  # plane k of a sample's instance masks is its ids + k * OBJ
KP = 5  # keypoints per box


def _size(i: int) -> tuple[int, int]:
    return 30 + 5 * (i % 5), 52 - 3 * (i % 4)


def _ids(i: int) -> np.ndarray:
    """Sample ``i``'s mask: an id per pixel, unique across the dataset (never 0)."""
    h, w = _size(i)
    return (1 + i * 5000 + np.arange(h * w, dtype=np.int32)).reshape(h, w)


def _boxes(i: int) -> np.ndarray:
    h, w = _size(i)
    rng = np.random.default_rng(i)
    xy = np.sort(rng.uniform(0, [w, h], (2, 1 + i % 3, 2)), axis=0)
    return np.concatenate([xy[0], xy[1]], axis=1)


def _keypoints(i: int) -> np.ndarray:
    """Sample ``i``'s keypoints: KP (x, y, visibility) per box, some past the image's
    edges, visibility 0, 1 or 2 (COCO's)."""
    h, w = _size(i)
    rng = np.random.default_rng(1000 + i)
    n = len(_boxes(i))
    xy = rng.uniform(-4, [w + 4, h + 4], (n, KP, 2))
    return np.concatenate([xy, rng.integers(0, 3, (n, KP, 1))], axis=2).astype(np.float32)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("mosaic") / "d.chute"
    boxes = [_boxes(i) for i in range(N)]
    chute.write(
        dst,
        {
            "image": [jpeg(*_size(i), seed=i) for i in range(N)],
            "ids": [_ids(i) for i in range(N)],
            "inst": [np.stack([_ids(i) + k * OBJ for k in range(len(boxes[i]))]) for i in range(N)],
            "boxes": boxes,
            "labels": [10 * i + np.arange(len(b)) for i, b in enumerate(boxes)],
            "kps": [_keypoints(i) for i in range(N)],
        },
        schema={
            "image": chute.fields.Image(),
            "ids": chute.fields.Mask("int32"),
            "inst": chute.fields.Mask("int32", instances=True),
            "boxes": chute.Ragged("float64", (4,)),
            "labels": chute.Ragged("int64", ()),
            "kps": chute.Ragged("float32", (KP, 3)),
        },
        part_size=7,
    )
    return dst


DECODE = {
    "image": [chute.Resize(40), chute.RandomHorizontalFlip()],
    "ids": chute.Follow("image"),
    "inst": chute.Follow("image"),
    "geo": chute.Geometry("image"),
}


def _mosaic(**kw: Any) -> chute.Mosaic:
    return chute.Mosaic(
        boxes="boxes",
        geometry="geo",
        per_box=("labels", "inst"),
        keypoints=("kps",),
        masks=("ids", "inst"),
        mask_fill=-7,
        **kw,
    )


def _loader(path: Path, transform: Any = None, **kw: Any) -> chute.Loader:
    return chute.Loader(
        chute.open(path), 8, seed=SEED, num_workers=0, decode=DECODE, transform=transform, **kw
    )


def _reference(before: dict[str, Any], idx: np.ndarray, m: chute.Mosaic, epoch: int) -> dict:
    """YOLO's tiling of batch ``before`` (the Loader's batch without the transform) on the
    draws of (SEED, epoch, idx), written out pixel by pixel in numpy."""
    img, ids = before["image"].numpy(), before["ids"].numpy()
    b, _, h, w = img.shape
    oh, ow = (h, w) if m.size is None else m.size
    u = uniforms(SEED, epoch, idx, STREAM, 6)
    lo, hi = m.center
    ys, xs = np.mgrid[0:oh, 0:ow]
    boxes, valid = chute.transform_boxes(torch.cat(list(before["boxes"])), _rows(before))
    counts = [len(v) for v in before["boxes"]]
    first = np.concatenate([[0], np.cumsum(counts)])
    kps = torch.cat(list(before["kps"])).numpy().astype(np.float64)
    kxy = chute.transform_points(kps[..., :2], _rows(before)[:, None])[0].numpy()
    keys = ("image", "ids", "boxes", "labels", "inst", "kps", "hidden")
    out: dict[str, list[Any]] = {k: [] for k in keys}
    for j in range(b):
        cx = int(np.floor(ow * (lo + (hi - lo) * u[j, 1])))
        cy = int(np.floor(oh * (lo + (hi - lo) * u[j, 2])))
        partners = [(j + 1 + int(np.floor(v * (b - 1)))) % b for v in u[j, 3:]]
        if u[j, 0] < m.p:
            tiles = list(
                zip(
                    [j, *partners],
                    [(cx - w, cy - h), (cx, cy - h), (cx - w, cy), (cx, cy)],
                    strict=True,
                )
            )
        else:
            tiles = [(j, (0, 0))]
        o_img = np.empty((3, oh, ow), np.uint8)
        o_img[:] = np.array(m.fill if isinstance(m.fill, tuple) else (m.fill,) * 3)[:, None, None]
        o_ids = np.full((oh, ow), m.mask_fill, np.int32)
        o_boxes, o_labels, o_inst, o_kps = [], [], [], []
        for s, (ox, oy) in tiles:
            inside = (xs >= ox) & (xs < ox + w) & (ys >= oy) & (ys < oy + h)
            sy, sx = (ys - oy)[inside], (xs - ox)[inside]
            o_img[:, inside] = img[s][:, sy, sx]
            o_ids[inside] = ids[s][sy, sx]
            for k in range(counts[s]):
                x0, y0, x1, y1 = boxes[first[s] + k].tolist()
                x0, x1 = (min(max(v + ox, max(ox, 0)), min(ox + w, ow)) for v in (x0, x1))
                y0, y1 = (min(max(v + oy, max(oy, 0)), min(oy + h, oh)) for v in (y0, y1))
                if valid[first[s] + k] and x1 - x0 >= 1 and y1 - y0 >= 1:
                    o_boxes.append([x0, y0, x1, y1])
                    o_labels.append(int(before["labels"][s][k]))
                    plane = np.zeros((oh, ow), np.int32)
                    plane[inside] = before["inst"][s][k].numpy()[sy, sx]
                    o_inst.append(plane)
                    pts = []
                    for (x, y), v in zip(kxy[first[s] + k], kps[first[s] + k, :, 2], strict=True):
                        x, y = x + ox, y + oy  # on the piece's pixel centres, or invisible
                        seen = max(ox, 0) <= x <= min(ox + w, ow) - 1
                        seen = seen and max(oy, 0) <= y <= min(oy + h, oh) - 1
                        pts.append([x, y, v if seen else 0.0])
                        out["hidden"] += [1] if v and not seen else []
                    o_kps.append(pts)
        out["image"].append(o_img)
        out["ids"].append(o_ids)
        out["boxes"].append(np.array(o_boxes, np.float64).reshape(-1, 4))
        out["labels"].append(np.array(o_labels, np.int64))
        out["inst"].append(np.array(o_inst, np.int32).reshape(-1, oh, ow))
        out["kps"].append(np.array(o_kps, np.float64).reshape(-1, KP, 3))
    return out


def _rows(batch: dict[str, Any]) -> torch.Tensor:
    counts = torch.tensor([len(v) for v in batch["boxes"]])
    return batch["geo"].repeat_interleave(counts, 0)


def _check(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert np.array_equal(got["image"].numpy(), np.stack(want["image"]))
    assert np.array_equal(got["ids"].numpy(), np.stack(want["ids"]))
    assert "geo" not in got  # the plan no longer describes the images
    for j in range(len(want["boxes"])):
        assert np.allclose(got["boxes"][j].numpy(), want["boxes"][j], rtol=0, atol=1e-9)
        assert np.array_equal(got["labels"][j].numpy(), want["labels"][j])
        assert np.array_equal(got["inst"][j].numpy(), want["inst"][j])
        assert got["kps"][j].dtype == torch.float64
        assert np.allclose(got["kps"][j].numpy(), want["kps"][j], rtol=0, atol=1e-9)


@pytest.mark.parametrize(
    "kw",
    [{}, {"p": 0.5, "center": (0.0, 1.0)}, {"size": (80, 80), "center": (0.3, 0.7), "fill": 9}],
    ids=["tiled", "half-untiled", "canvas"],
)
def test_every_pixel_box_and_plane_matches_the_reference(data: Path, kw: dict) -> None:
    m = _mosaic(**kw)
    for epoch in (0, 1):
        plain, tiled = _loader(data), _loader(data, m)
        plain.set_epoch(epoch)
        tiled.set_epoch(epoch)
        plan = plain.order.plan()
        seen, shown, hidden = 0, 0, 0
        for k, (before, after) in enumerate(zip(plain, tiled, strict=True)):
            want = _reference(before, np.asarray(plan[k]), m, epoch)
            _check(after, want)
            seen += sum(len(v) for v in after["boxes"])
            shown += int((torch.cat(list(after["kps"]))[..., 2] > 0).sum())
            hidden += len(want["hidden"])  # visible points that left their piece
        assert seen  # some boxes survive the tiling
        assert shown and hidden  # some points stay visible, some are hidden by the tiling


def test_pieces_tile_the_output_and_partners_come_from_the_batch(data: Path) -> None:
    """With the output the images' size, every output pixel is some sample's pixel (no
    fill): the ids of a mosaic come from four samples of its batch, sample j's own at the
    top left."""
    for after, idx in zip(_loader(data, _mosaic()), _loader(data).order.plan(), strict=True):
        ids = after["ids"].numpy()
        assert (ids != -7).all()
        owners = (ids - 1) // 5000  # the dataset index each id comes from
        for j in range(len(ids)):
            assert set(np.unique(owners[j])) <= set(np.asarray(idx).tolist())
            assert owners[j, 0, 0] == idx[j]


def test_resume_tiles_the_same_mosaics_and_the_next_epoch_others(data: Path) -> None:
    def make() -> chute.Loader:
        return chute.Loader(
            chute.open(data), 4, seed=SEED, num_workers=2, decode=DECODE, transform=_mosaic()
        )

    loader = make()
    loader.set_epoch(1)
    full = [(b["image"].clone(), [v.clone() for v in b["boxes"]]) for b in loader]
    loader = make()
    loader.set_epoch(1)
    it = iter(loader)
    next(it), next(it)
    resumed = make()
    resumed.load_state_dict(loader.state_dict())
    rest = [(b["image"], list(b["boxes"])) for b in resumed]
    assert len(rest) == len(full) - 2
    for (a, ab), (b, bb) in zip(full[2:], rest, strict=True):
        assert torch.equal(a, b)
        assert all(torch.equal(x, y) for x, y in zip(ab, bb, strict=True))
    loader.set_epoch(2)
    assert not all(torch.equal(a, b["image"]) for (a, _), b in zip(full, loader, strict=True))


def test_what_would_be_left_behind_is_refused(data: Path, record_property: Record) -> None:
    outcomes: Counter = Counter()
    batch = next(iter(_loader(data)))
    idx = np.arange(len(batch["image"]))
    cases = [
        (chute.Mosaic(boxes="boxes", geometry="geo", masks=("ids",)), ArgumentError, "'inst'"),
        (
            chute.Mosaic(
                boxes="boxes", geometry="geo", per_box=("labels", "ids"), masks=("ids", "inst")
            ),
            SchemaError,
            "'ids' is in per_box and masks",
        ),
        (
            chute.Mosaic(boxes="nope", geometry="geo", masks=("ids", "inst")),
            SchemaError,
            "no field 'nope'",
        ),
        (chute.Mosaic(masks=("boxes",)), SchemaError, "mask field 'boxes'"),
        (
            chute.Mosaic(boxes="boxes", geometry="geo", per_box=("kps",), masks=("ids", "inst")),
            ArgumentError,
            r"per_box field 'kps' has float rows of shape \(5, 3\), which look like points",
        ),
    ]
    bad_batch = {**batch, "ids": batch["ids"][:, :5]}  # not the images' size
    for m, exc, match in cases:
        with pytest.raises(exc, match=match):
            m.apply(dict(batch), idx, 0, 0)
        outcomes[exc.__name__] += 1
    with pytest.raises(SchemaError, match="mask field 'ids'"):
        _mosaic().apply(bad_batch, idx, 0, 0)
    with pytest.raises(SchemaError, match="4 indices for 8 images"):
        _mosaic().apply(dict(batch), idx[:4], 0, 0)
    extra = [torch.cat([v, v[:1]]) for v in batch["labels"]]  # a row more than boxes
    with pytest.raises(SchemaError, match=r"'labels' has \d+ rows .* a per_box field needs one"):
        _mosaic(p=0.0).apply({**batch, "labels": extra}, idx, 0, 0)
    flat = [v[..., :2] for v in batch["kps"]]  # no visibility column
    with pytest.raises(SchemaError, match=r"keypoint field 'kps' must hold \(K, 3\)"):
        _mosaic().apply({**batch, "kps": flat}, idx, 0, 0)
    outcomes["SchemaError"] += 4
    for kw in (
        {"p": 1.5},
        {"center": (0.8, 0.2)},
        {"center": (-0.1, 0.5)},
        {"size": 0},
        {"fill": 300},
        {"min_size": -1.0},
        {"per_box": ("labels",)},
        {"keypoints": ("kps",)},
        {"boxes": "boxes", "keypoints": ("kps",), "per_box": ("kps",)},
        {"masks": (3,)},
    ):
        with pytest.raises((ArgumentError, ArgumentValueError)) as info:
            chute.Mosaic(**kw)
        outcomes[type(info.value).__name__] += 1
    record(
        record_property,
        "image: Mosaic would leave a field behind",
        "a mask or instance field of the images' size not in masks=, a per_box field with "
        "other rows than boxes, keypoints in per_box (carried unmoved) or without a visibility "
        "column, a missing field, a mask of another size, indices that do not fit; bad "
        "parameters (p, center, size, fill, min_size, per_box or keypoints without boxes, a "
        "field in keypoints and per_box)",
        len(cases) + 14,
        outcomes,
    )
