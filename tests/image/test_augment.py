"""Batch augmentations: each op against a reference written with PIL / numpy, randomness a
pure function of (seed, epoch, sample index) through the Loader, MixUp / CutMix labels and
exact resume."""

from __future__ import annotations

import colorsys
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("simplejpeg")
import torch
from _image_files import jpeg, picture
from PIL import Image, ImageEnhance

import chute
from chute.image import uniforms
from chute.image.augment import augment

B, H, W = 6, 20, 28
IDX = np.array([5, 0, 17, 3, 9, 11])


def batch() -> torch.Tensor:
    return torch.from_numpy(np.stack([picture(H, W, s).transpose(2, 0, 1) for s in range(B)]))


def run(ops: list, seed: int = 1, epoch: int = 0) -> np.ndarray:
    out = batch()
    augment([chute.Resize(1), *ops], out, IDX, seed, epoch)  # op k draws from stream k
    return out.numpy()


def factors(op: object, lo: float, hi: float, column: int) -> np.ndarray:
    return lo + (hi - lo) * uniforms(1, 0, IDX, 1, op.draws)[:, column]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "enhance"),
    [("brightness", ImageEnhance.Brightness), ("saturation", ImageEnhance.Color)],
)
def test_color_jitter_matches_pil_enhance(name: str, enhance: type) -> None:
    op = chute.ColorJitter(**{name: 0.6})
    got = run([op])
    f = factors(op, 0.4, 1.6, 0 if name == "brightness" else 2)
    src = batch().numpy()
    for i in range(B):
        im = Image.fromarray(src[i].transpose(1, 2, 0))
        want = np.asarray(enhance(im).enhance(float(f[i]))).transpose(2, 0, 1)
        np.testing.assert_allclose(got[i], want, atol=2, err_msg=f"{name} sample {i}")
    assert not np.array_equal(got, src)


def test_contrast_blends_with_the_mean_gray() -> None:
    op = chute.ColorJitter(contrast=0.5)
    got = run([op])
    f = factors(op, 0.5, 1.5, 1)
    x = batch().numpy().astype(np.float64)
    gray = np.clip(0.2989 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2], 0, 255)
    mean = gray.mean(axis=(1, 2))[:, None, None, None]
    want = np.clip(x * f[:, None, None, None] + mean * (1 - f[:, None, None, None]), 0, 255)
    np.testing.assert_allclose(got, np.round(want), atol=1)


def test_hue_rotates_as_colorsys() -> None:
    op = chute.ColorJitter(hue=0.3)
    got = run([op])
    shift = 0.3 * (2 * uniforms(1, 0, IDX, 1, 4)[:, 3] - 1)
    src = batch().numpy()
    for i in range(B):
        for y, x in [(0, 0), (5, 7), (19, 27), (10, 3)]:
            h, s, v = colorsys.rgb_to_hsv(*(src[i, :, y, x] / 255.0))
            want = np.array(colorsys.hsv_to_rgb((h + shift[i]) % 1.0, s, v)) * 255
            np.testing.assert_allclose(got[i, :, y, x], want, atol=1.0)


def test_grayscale_matches_pil_l() -> None:
    got = run([chute.Grayscale(p=1.0)])
    src = batch().numpy()
    for i in range(B):
        want = np.asarray(Image.fromarray(src[i].transpose(1, 2, 0)).convert("L"))
        for c in range(3):
            np.testing.assert_allclose(got[i, c], want, atol=1)
    assert np.array_equal(run([chute.Grayscale(p=0.0)]), src)


def test_gaussian_blur_matches_a_numpy_convolution() -> None:
    got = run([chute.GaussianBlur(5, sigma=(1.5, 1.5))])
    r = np.arange(5) - 2
    k = np.exp(-0.5 * (r / 1.5) ** 2)
    k /= k.sum()
    x = np.pad(batch().numpy().astype(np.float64), ((0, 0), (0, 0), (2, 2), (2, 2)), "reflect")
    rows = sum(k[j] * x[..., :, j : j + W] for j in range(5))
    want = sum(k[j] * rows[..., j : j + H, :] for j in range(5))
    np.testing.assert_allclose(got, np.round(want), atol=1)


def test_random_erasing_erases_one_rectangle_of_the_asked_area() -> None:
    got = run([chute.RandomErasing(p=1.0, scale=(0.1, 0.3), value=0)])
    src = batch().numpy()
    for i in range(B):
        diff = (got[i] != src[i]).any(0)
        ys, xs = np.nonzero(got[i].sum(0) == 0)
        area = (ys.max() - ys.min() + 1) * (xs.max() - xs.min() + 1)
        assert (got[i][:, ys.min() : ys.max() + 1, xs.min() : xs.max() + 1] == 0).all()
        assert 0.1 * H * W - W <= area <= 0.3 * H * W + W and diff.sum() <= area
    assert np.array_equal(run([chute.RandomErasing(p=0.0)]), src)


def test_ops_applied_to_a_drawn_subset_leave_the_others_untouched() -> None:
    src = batch().numpy()
    on = uniforms(3, 0, IDX, 1, 1)[:, 0] < 0.5
    got = run([chute.Grayscale(p=0.5)], seed=3)
    assert 0 < on.sum() < B
    for i in range(B):
        assert np.array_equal(got[i], src[i]) != on[i]
        assert (got[i, 0] == got[i, 2]).all() == on[i]
    blur = chute.GaussianBlur(3, sigma=(1.5, 2.0), p=0.5)
    on = uniforms(3, 0, IDX, 1, blur.draws)[:, 1] < 0.5
    got = run([blur], seed=3)
    assert [not np.array_equal(got[i], src[i]) for i in range(B)] == on.tolist()


def test_a_sample_is_augmented_alike_in_any_batch() -> None:
    ops = [chute.ColorJitter(0.4, 0.4, 0.4, 0.2), chute.Grayscale(0.3), chute.GaussianBlur(5)]
    ops += [chute.RandomErasing(0.5), chute.ColorJitter(0.2), chute.RandAugment(3, 20)]
    whole = run(ops)
    assert np.array_equal(run(ops), whole)
    for i in range(B):
        one = batch()[i : i + 1]
        augment([chute.Resize(1), *ops], one, IDX[i : i + 1], 1, 0)
        assert np.array_equal(one.numpy()[0], whole[i])


def test_mixup_blends_each_image_with_the_previous_one() -> None:
    img = batch()
    out = chute.MixUp(B, alpha=0.7).apply({"image": img, "label": torch.arange(B)}, IDX, 3, 1)
    lam = float(out["label"][0, 0])
    assert 0 < lam < 1
    x = img.numpy().astype(np.float64)
    want = np.round(x * lam + np.roll(x, 1, axis=0) * (1 - lam))
    assert out["image"].dtype == torch.uint8
    np.testing.assert_allclose(out["image"].numpy(), want, atol=1)


def test_bad_augment_arguments() -> None:
    with pytest.raises(chute.ArgumentValueError, match="hue"):
        chute.ColorJitter(hue=0.7)
    with pytest.raises(chute.ArgumentValueError, match="kernel_size"):
        chute.GaussianBlur(4)
    with pytest.raises(chute.ArgumentValueError, match="num_classes"):
        chute.MixUp(0)


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("aug") / "d.chute"
    n = 30
    chute.write(
        dst,
        {"image": [jpeg(40 + i, 60, seed=i) for i in range(n)], "label": np.arange(n) % 7},
        schema={"image": chute.fields.Image(), "label": chute.fields.Tensor((), "int64")},
        part_size=11,
    )
    return dst


OPS = [
    chute.RandomResizedCrop(24),
    chute.RandomHorizontalFlip(),
    chute.ColorJitter(0.4, 0.4, 0.4, 0.1),
    chute.Grayscale(0.3),
    chute.GaussianBlur(3),
    chute.RandomErasing(),
]


class _Index(chute.BatchTransform):
    """Adds each sample's index to its batch: what a BatchTransform is given."""

    def apply(self, batch, indices, seed, epoch):  # type: ignore[no-untyped-def]
        return {**batch, "index": torch.from_numpy(np.asarray(indices).copy())}


def per_sample(loader: chute.Loader, epoch: int) -> dict[int, np.ndarray]:
    loader.set_epoch(epoch)
    out = {}
    for b in loader:
        for i, img in zip(b["index"].tolist(), b["image"].numpy(), strict=True):
            out[i] = img.copy()
    return out


def test_augmentations_depend_on_the_sample_not_the_batch(photos: Path) -> None:
    ds = chute.open(photos)
    a = chute.Loader(ds, 4, seed=0, num_workers=2, decode={"image": OPS}, transform=_Index())
    b = chute.Loader(ds, 7, seed=0, num_workers=1, decode={"image": OPS}, transform=_Index())
    seen_a, seen_b = per_sample(a, 1), per_sample(b, 1)
    assert seen_a.keys() == seen_b.keys() == set(range(30))
    assert all(np.array_equal(seen_a[i], seen_b[i]) for i in range(30))
    seen_c = per_sample(a, 2)
    assert sum(not np.array_equal(seen_a[i], seen_c[i]) for i in range(30)) >= 25


@pytest.mark.parametrize("mix", [chute.MixUp(7, alpha=0.8), chute.CutMix(7)])
def test_mixing_labels_and_exact_resume(photos: Path, mix: chute.BatchTransform) -> None:
    ds = chute.open(photos)

    def make() -> chute.Loader:
        return chute.Loader(ds, 6, seed=4, num_workers=2, decode={"image": OPS[:2]}, transform=mix)

    full = make()
    full.set_epoch(3)
    want = [(b["image"].clone(), b["label"].clone()) for b in full]
    for img, lab in want:
        assert img.dtype == torch.uint8 and lab.shape == (6, 7)
        torch.testing.assert_close(lab.sum(1), torch.ones(6))
        assert (lab > 0).sum(1).max() <= 2
    part = make()
    part.set_epoch(3)
    it = iter(part)
    next(it), next(it)
    state = part.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    got = [(b["image"].clone(), b["label"].clone()) for b in resumed]
    assert all(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        for a, b in zip(want[2:], got, strict=True)
    )


def test_augmentations_are_refused_on_the_device(photos: Path) -> None:
    ops = [chute.RandomResizedCrop(24, device="cuda"), chute.ColorJitter(0.2)]
    with pytest.raises(chute.ArgumentError, match=r"after chute\.to_device"):
        chute.Loader(chute.open(photos), 4, decode={"image": ops})


def test_gaussian_blur_of_any_sigma_matches_a_numpy_convolution() -> None:
    """Small sigmas use fewer taps (the outer ones are negligible): still within a level."""
    op = chute.GaussianBlur(9, sigma=(0.1, 1.0))
    got = run([op])
    sig = 0.1 + 0.9 * uniforms(1, 0, IDX, 1, op.draws)[:, 0]
    k = np.exp(-0.5 * ((np.arange(9) - 4)[None, :] / sig[:, None]) ** 2)
    k /= k.sum(1, keepdims=True)
    k = k[:, :, None, None, None]
    x = np.pad(batch().numpy().astype(np.float64), ((0, 0), (0, 0), (4, 4), (4, 4)), "reflect")
    rows = sum(k[:, j] * x[..., :, j : j + W] for j in range(9))
    want = sum(k[:, j] * rows[..., j : j + H, :] for j in range(9))
    np.testing.assert_allclose(got, np.round(want), atol=1)
    assert sig.min() < 0.65 < 0.75 < sig.max()  # 2 and 3 of the 4 taps either side


def test_without_numba_chute_imports_and_an_augmentation_says_how_to_install_it() -> None:
    code = """
import sys
import chute
assert "numba" not in sys.modules, "import chute imported numba"
sys.modules["numba"] = None  # as if it were not installed
import numpy as np, torch
from chute.image.augment import augment
try:
    augment([chute.ColorJitter(0.4)], torch.zeros((2, 3, 8, 8), dtype=torch.uint8), [0, 1], 0, 0)
except chute.MissingDependencyError as e:
    print(e)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "pip install 'chute[image]'" in done.stdout
