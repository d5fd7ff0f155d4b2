"""RandAugment / TrivialAugmentWide: each of the 14 ops against PIL (what torchvision calls for
PIL images), torchvision's magnitude tables, and the draws a pure function of (seed, epoch,
sample index) through ``augment`` and the Loader."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("simplejpeg")
import torch
from _image_files import jpeg, picture
from PIL import Image, ImageEnhance, ImageOps

import chute
from chute.image.augment import augment
from chute.image.randaugment import OPS, apply_ops, magnitudes

B, H, W = 6, 24, 30
IDX = np.array([5, 0, 17, 3, 9, 11])


def batch() -> torch.Tensor:
    """Contiguous (B, 3, H, W), as ``augment`` hands its ops."""
    pictures = [picture(H, W, s).transpose(2, 0, 1) for s in range(B)]
    return torch.from_numpy(np.ascontiguousarray(np.stack(pictures)))


def pil(x: np.ndarray) -> Image.Image:
    return Image.fromarray(np.ascontiguousarray(x.transpose(1, 2, 0)))


def inverse_affine(center, angle, translate, shear) -> list[float]:  # type: ignore[no-untyped-def]
    """torchvision's ``_get_inverse_affine_matrix`` (scale 1), as its PIL path uses it."""
    rot, sx, sy = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    m = [d, -b, 0.0, -c, a, 0.0]
    (cx, cy), (tx, ty) = center, translate
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty) + cx
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty) + cy
    return m


def affine(im: Image.Image, **kw: object) -> Image.Image:
    m = inverse_affine(**kw)  # type: ignore[arg-type]
    return im.transform(im.size, Image.Transform.AFFINE, m, Image.Resampling.NEAREST, fillcolor=0)


# torchvision's _apply_op for a PIL image, one reference per op (magnitude m)
REFERENCE = {
    "Identity": lambda im, m: im,
    "ShearX": lambda im, m: affine(
        im, center=(0, 0), angle=0.0, translate=(0, 0), shear=(math.degrees(math.atan(m)), 0.0)
    ),
    "ShearY": lambda im, m: affine(
        im, center=(0, 0), angle=0.0, translate=(0, 0), shear=(0.0, math.degrees(math.atan(m)))
    ),
    "TranslateX": lambda im, m: affine(
        im, center=(W / 2, H / 2), angle=0.0, translate=(int(m), 0), shear=(0.0, 0.0)
    ),
    "TranslateY": lambda im, m: affine(
        im, center=(W / 2, H / 2), angle=0.0, translate=(0, int(m)), shear=(0.0, 0.0)
    ),
    "Rotate": lambda im, m: im.rotate(m, Image.Resampling.NEAREST, fillcolor=0),
    "Brightness": lambda im, m: ImageEnhance.Brightness(im).enhance(1 + m),
    "Color": lambda im, m: ImageEnhance.Color(im).enhance(1 + m),
    "Contrast": lambda im, m: ImageEnhance.Contrast(im).enhance(1 + m),
    "Sharpness": lambda im, m: ImageEnhance.Sharpness(im).enhance(1 + m),
    "Posterize": lambda im, m: ImageOps.posterize(im, int(m)),
    "Solarize": lambda im, m: ImageOps.solarize(im, m),
    "AutoContrast": lambda im, m: ImageOps.autocontrast(im),
    "Equalize": lambda im, m: ImageOps.equalize(im),
}

MAGNITUDES = {  # per sample: both signs, small and large
    "ShearX": [0.3, -0.3, 0.5, -0.99, 0.1, 0.0],
    "ShearY": [0.3, -0.3, 0.5, -0.99, 0.1, 0.0],
    "TranslateX": [7.9, -7.9, 13.6, -32.0, 1.0, 0.0],
    "TranslateY": [7.9, -7.9, 13.6, -32.0, 1.0, 0.0],
    "Rotate": [30.0, -30.0, 13.5, -135.0, 90.0, 0.0],
    "Brightness": [0.9, -0.9, 0.3, -0.3, 0.99, 0.0],
    "Color": [0.9, -0.9, 0.3, -0.3, 0.99, 0.0],
    "Contrast": [0.9, -0.9, 0.3, -0.3, 0.99, 0.0],
    "Sharpness": [0.9, -0.9, 0.3, -0.3, 0.99, 0.0],
    "Posterize": [8, 7, 6, 4, 2, 1],
    "Solarize": [255.0, 178.5, 127.5, 8.5, 0.0, 100.2],
}


@pytest.mark.parametrize("name", OPS)
def test_each_op_matches_pil(name: str) -> None:
    mags = np.array(MAGNITUDES.get(name, [0.0] * B), np.float64)
    out = batch()
    src = out.numpy().copy()
    apply_ops(out, np.full(B, OPS.index(name)), mags)
    got = out.numpy()
    assert out.dtype == torch.uint8 and out.shape == (B, 3, H, W)
    for i in range(B):
        want = np.asarray(REFERENCE[name](pil(src[i]), float(mags[i]))).transpose(2, 0, 1)
        diff = np.abs(got[i].astype(int) - want.astype(int))
        if name in ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"):
            # nearest sampling: a pixel centre landing on an input pixel edge (a diagonal
            # of them at 135 degrees) may round the other way than PIL's stepping does
            assert (diff.max(0) > 0).mean() <= 0.04, f"{name} sample {i}"
        else:
            assert diff.max() <= 1, f"{name} sample {i}: {diff.max()} levels off"
    if name != "Identity":
        assert not np.array_equal(got, src)


def test_magnitude_tables_are_torchvisions() -> None:
    ra = magnitudes(False, 31, 224, 331)
    tw = magnitudes(True, 31, 224, 331)
    at = {name: k for k, name in enumerate(OPS)}
    assert ra[at["ShearX"], 9] == pytest.approx(0.09) and ra[at["Rotate"], 30] == 30.0
    assert ra[at["TranslateX"], 30] == pytest.approx(150.0) and ra[at["Brightness"], 30] == 0.9
    assert ra[at["TranslateY"], 30] == pytest.approx(150.0 / 331.0 * 224)
    assert ra[at["Posterize"]].tolist()[::6] == [8, 7, 6, 6, 5, 4]
    assert ra[at["Solarize"], 9] == pytest.approx(178.5)
    assert tw[at["ShearY"], 30] == 0.99 and tw[at["TranslateY"], 30] == 32.0
    assert tw[at["Rotate"], 30] == 135.0 and tw[at["Posterize"], 30] == 2
    assert (ra[at["Identity"]] == 0).all() and (tw[at["Equalize"]] == 0).all()


def run(op: object, indices: np.ndarray = IDX, seed: int = 1, epoch: int = 0) -> np.ndarray:
    out = torch.from_numpy(np.stack([picture(H, W, int(i)).transpose(2, 0, 1) for i in indices]))
    augment([chute.Resize(1), op], out, indices, seed, epoch)
    return out.numpy()


@pytest.mark.parametrize("op", [chute.RandAugment(), chute.TrivialAugmentWide()])
def test_draws_depend_on_seed_epoch_and_index_only(op: object) -> None:
    idx = np.arange(40)
    got = run(op, idx)
    assert got.dtype == np.uint8 and got.shape == (40, 3, H, W)
    perm = np.random.default_rng(0).permutation(40)
    assert np.array_equal(run(op, idx[perm]), got[perm])  # any batch, any position
    assert np.array_equal(run(op, idx[5:9]), got[5:9])
    other = run(op, idx, epoch=1)
    assert sum(not np.array_equal(other[i], got[i]) for i in range(40)) >= 25
    src = np.stack([picture(H, W, i).transpose(2, 0, 1) for i in range(40)])
    assert sum(not np.array_equal(src[i], got[i]) for i in range(40)) >= 25


def test_no_rounds_is_identity() -> None:
    src = np.stack([picture(H, W, int(i)).transpose(2, 0, 1) for i in IDX])
    assert np.array_equal(run(chute.RandAugment(num_ops=0)), src)


def test_bad_arguments() -> None:
    with pytest.raises(chute.ArgumentValueError, match="magnitude"):
        chute.RandAugment(magnitude=31)
    with pytest.raises(chute.ArgumentValueError, match="num_ops"):
        chute.RandAugment(num_ops=-1)
    with pytest.raises(chute.ArgumentValueError, match="num_magnitude_bins"):
        chute.TrivialAugmentWide(num_magnitude_bins=1)


def test_in_a_loaders_decode_list(tmp_path: Path) -> None:
    n = 12
    chute.write(
        tmp_path / "d.chute",
        {"image": [jpeg(40 + i, 50, seed=i) for i in range(n)]},
        schema={"image": chute.fields.Image()},
    )
    ops = [chute.RandomResizedCrop(32), chute.RandAugment(3, 12), chute.TrivialAugmentWide()]

    def epoch(workers: int, e: int) -> torch.Tensor:
        loader = chute.Loader(
            chute.open(tmp_path / "d.chute"), 5, num_workers=workers, decode={"image": ops}
        )
        loader.set_epoch(e)
        return torch.cat([b["image"] for b in loader])

    first = epoch(2, 0)
    assert first.shape == (n, 3, 32, 32) and first.dtype == torch.uint8
    assert torch.equal(epoch(1, 0), first)
    assert not torch.equal(epoch(2, 1), first)
