"""RandomAffine, RandomRotation and RandomPerspective through the Loader on real JPEGs: the
image, a mask and an instance mask against a numpy nearest sampler through v2's inverse map on
the same draws (``_projective_reference.py``); Geometry's matrices, boxes and keypoints
against v2's formulas; argument checks; the same draws each epoch, new ones the next; threads
and worker processes giving the same batches."""

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
from _warp_reference import boxes_through, points_through

import chute
from chute.image import plan, resize_nearest, uniforms

N = 24
SEED = 11
SIZE = (24, 32)
OPS = {
    "affine": chute.RandomAffine(
        30, translate=(0.2, 0.1), scale=(0.7, 1.3), shear=(-10, 10, -5, 5), fill=7
    ),
    "affine_centre": chute.RandomAffine((-90, 90), center=(3.0, 20.5)),
    "rotation": chute.RandomRotation(40, fill=200),
    "perspective": chute.RandomPerspective(0.6, p=0.75, fill=33),
}


def _size(i: int) -> tuple[int, int]:
    return 30 + 3 * (i % 5), 44 - 2 * (i % 4)


def stored_ids(i: int) -> np.ndarray:
    h, w = _size(i)
    return np.arange(h * w, dtype=np.int32).reshape(h, w)


def stored_inst(i: int) -> np.ndarray:
    h, w = _size(i)
    k = 1 + i % 3
    planes = np.zeros((k, h, w), np.int32)
    for j in range(k):
        planes[j, 2 + 3 * j : 12 + 3 * j, 4 + 5 * j : 20 + 4 * j] = 1 + j
    return planes


def stored_box(i: int) -> np.ndarray:
    h, w = _size(i)
    return np.array([[w / 5, h / 6, w * 2 / 3, h * 3 / 4], [2.0, 3.0, 9.0, 11.0]])


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("affine") / "d.chute"
    chute.write(
        dst,
        {
            "image": [jpeg(*_size(i), seed=i) for i in range(N)],
            "ids": [stored_ids(i) for i in range(N)],
            "inst": [stored_inst(i) for i in range(N)],
            "label": np.arange(N),
        },
        schema={
            "image": chute.fields.Image(),
            "ids": chute.fields.Mask("int32"),
            "inst": chute.fields.Mask("int32", instances=True),
            "label": chute.fields.Tensor((), "int64"),
        },
        part_size=7,
    )
    return dst


def _decode(op: Any) -> dict[str, Any]:
    return {
        "image": [chute.Resize(SIZE), op],
        "ids": chute.Follow("image", fill=-1),
        "inst": chute.Follow("image", fill=255),
        "geo": chute.Geometry("image"),
    }


@pytest.mark.parametrize("name", OPS)
def test_image_masks_and_geometry_against_v2(data: Path, name: str) -> None:
    op = OPS[name]
    ds = chute.open(data)
    (b,) = list(chute.Loader(ds, N, shuffle=False, seed=SEED, decode=_decode(op)))
    idx = np.arange(N)
    sizes = ds.gather(idx)["image"].sizes.numpy()
    p = plan([chute.Resize(SIZE), op], sizes[:, 0], sizes[:, 1], idx, seed=SEED)
    plain = np.empty((N, 3, *SIZE), np.uint8)
    chute.image.decode_batch(
        ds.gather(idx)["image"], sizes[:, 0], sizes[:, 1], [chute.Resize(SIZE)], idx, SEED, 0, plain
    )
    u = uniforms(SEED, 0, idx, 1, op.draws)
    geo = b["geo"].numpy()
    assert geo.shape == (N, 11 + 9)
    moved = 0
    for j in range(N):
        got = maps(op, u[j], *SIZE)
        fwd, inv = (np.eye(3), np.eye(3)) if got is None else got
        why = f"{name}: sample {j}"
        np.testing.assert_allclose(geo[j, 11:].reshape(3, 3), fwd, rtol=1e-12, atol=1e-9)
        want = sample_nearest(plain[j], inv, op.fill)
        np.testing.assert_array_equal(b["image"][j].numpy(), want, err_msg=why)
        ids = resize_nearest(stored_ids(j), p.boxes[j], False, np.empty(SIZE, np.int32))
        np.testing.assert_array_equal(b["ids"][j].numpy(), sample_nearest(ids, inv, -1), why)
        planes = np.stack(
            [resize_nearest(m, p.boxes[j], False, np.empty(SIZE, np.int32)) for m in stored_inst(j)]
        )
        np.testing.assert_array_equal(b["inst"][j].numpy(), sample_nearest(planes, inv, 255), why)
        moved += not np.array_equal(b["ids"][j].numpy(), ids)
        boxes, valid = chute.transform_boxes(stored_box(j), geo[j])
        np.testing.assert_allclose(boxes.numpy(), boxes_through(stored_box(j), geo[j]), atol=1e-9)
        w = boxes.numpy()
        assert np.array_equal(valid.numpy(), (w[:, 2] - w[:, 0] >= 1) & (w[:, 3] - w[:, 1] >= 1))
        pts = stored_box(j).reshape(-1, 2)
        got_pts, _ = chute.transform_points(pts, geo[j])
        np.testing.assert_allclose(got_pts.numpy(), points_through(pts, geo[j]), atol=1e-9)
    assert moved >= N // 2


def test_boxes_follow_the_pixels(data: Path) -> None:
    """A box round each stored pixel id, through transform_boxes, holds where that id went."""
    ds = chute.open(data)
    op = chute.RandomPerspective(0.5, p=1.0)
    (b,) = list(chute.Loader(ds, N, shuffle=False, seed=SEED, decode=_decode(op)))
    hits = 0
    for j in range(N):
        h, w = _size(j)
        ids, geo = b["ids"][j].numpy(), b["geo"][j].numpy()
        for x, y in ((x, y) for x in range(w // 4, w, w // 4) for y in range(h // 4, h, h // 4)):
            where = np.argwhere(ids == y * w + x)
            box, _ = chute.transform_boxes([x, y, x + 1, y + 1], geo)
            for oy, ox in where:
                hits += 1
                x1, y1, x2, y2 = box.numpy()
                assert x1 - 1 <= ox <= x2 and y1 - 1 <= oy <= y2, (j, x, y)
    assert hits > N


def test_arguments_are_checked() -> None:
    bad = [
        (lambda: chute.RandomAffine(-3), chute.ArgumentValueError, "degrees"),
        (lambda: chute.RandomAffine("x"), chute.ArgumentError, "degrees"),
        (lambda: chute.RandomAffine((5, 1)), chute.ArgumentValueError, "degrees"),
        (lambda: chute.RandomAffine(5, translate=(0.1, 1.5)), chute.ArgumentValueError, "transl"),
        (lambda: chute.RandomAffine(5, translate=0.1), chute.ArgumentError, "translate"),
        (lambda: chute.RandomAffine(5, scale=(0.0, 1.0)), chute.ArgumentValueError, "scale"),
        (lambda: chute.RandomAffine(5, shear=(1, 2, 3)), chute.ArgumentError, "shear"),
        (lambda: chute.RandomAffine(5, fill=300), chute.ArgumentValueError, "fill"),
        (lambda: chute.RandomAffine(5, center=3), chute.ArgumentError, "center"),
        (lambda: chute.RandomRotation(5, expand=True), chute.ArgumentValueError, "expand"),
        (lambda: chute.RandomRotation(5, expand=1), chute.ArgumentError, "expand"),
        (lambda: chute.RandomPerspective(1.5), chute.ArgumentValueError, "distortion_scale"),
        (lambda: chute.RandomPerspective(0.5, p=-1), chute.ArgumentValueError, r"\bp\b"),
        (lambda: chute.RandomPerspective(fill=-1), chute.ArgumentValueError, "fill"),
    ]
    for make, err, word in bad:
        with pytest.raises(err, match=word):
            make()
    x = torch.zeros((2, 3, 4, 4), dtype=torch.uint8)
    with pytest.raises(chute.ArgumentValueError, match="draws"):
        chute.RandomAffine(5).apply(x, np.zeros((2, 3)))


def test_same_draws_each_epoch_and_new_ones_the_next(data: Path) -> None:
    ds = chute.open(data)
    for op in OPS.values():

        def epoch(e: int, op: Any = op) -> list[np.ndarray]:
            loader = chute.Loader(ds, 8, shuffle=False, seed=SEED, decode=_decode(op))
            loader.set_epoch(e)
            return [b["ids"].numpy() for b in loader]

        first, again, later = epoch(0), epoch(0), epoch(1)
        assert all(np.array_equal(a, c) for a, c in zip(first, again, strict=True))
        assert not all(np.array_equal(a, c) for a, c in zip(first, later, strict=True))


def test_threads_and_processes_give_the_same_batches(data: Path) -> None:
    ds = chute.open(data)
    decode = {
        "image": [chute.Resize(SIZE), OPS["affine"], OPS["perspective"]],
        "ids": chute.Follow("image", fill=-1),
        "geo": chute.Geometry("image"),
    }
    threads = list(chute.Loader(ds, 6, seed=SEED, decode=decode, num_workers=2))
    procs = list(chute.dataloader(ds, 6, seed=SEED, num_workers=2, decode=decode))
    assert len(threads) == len(procs) == N // 6
    for a, b in zip(threads, procs, strict=True):
        for key in ("image", "ids", "geo", "label"):
            assert torch.equal(a[key], b[key]), key
