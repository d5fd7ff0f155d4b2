"""chute.image.ops: torchvision's crop semantics, planned from stored sizes, deterministic in
(seed, epoch, sample index)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chute import ArgumentError, ArgumentValueError
from chute.image import (
    CenterCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    plan,
    uniforms,
)


def torchvision_rrc(h: int, w: int, u: np.ndarray, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's RandomResizedCrop.get_params, one image at a time, fed our uniforms
    (10 tries x (area, log-ratio, top, left)); returns (left, top, right, bottom)."""
    area = h * w
    lr = (math.log(ratio[0]), math.log(ratio[1]))
    for t in range(10):
        ua, ur, ut, ul = u[4 * t : 4 * t + 4]
        target = area * (scale[0] + (scale[1] - scale[0]) * ua)
        aspect = math.exp(lr[0] + (lr[1] - lr[0]) * ur)
        cw = round(math.sqrt(target * aspect))
        ch = round(math.sqrt(target / aspect))
        if 0 < cw <= w and 0 < ch <= h:
            top, left = int(ut * (h - ch + 1)), int(ul * (w - cw + 1))
            return (left, top, left + cw, top + ch)
    in_ratio = w / h
    if in_ratio < min(ratio):
        cw, ch = w, round(w / min(ratio))
    elif in_ratio > max(ratio):
        ch, cw = h, round(h * max(ratio))
    else:
        cw, ch = w, h
    top, left = (h - ch) // 2, (w - cw) // 2
    return (left, top, left + cw, top + ch)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 600), st.integers(1, 600)), min_size=1, max_size=20),
    st.integers(0, 2**40),
    st.integers(0, 100),
)
def test_random_resized_crop_matches_torchvision(sizes, seed, epoch) -> None:
    h, w = np.array(sizes).T
    idx = np.arange(len(sizes)) * 7 + 3
    p = plan(RandomResizedCrop(32), h, w, idx, seed, epoch)
    u = uniforms(seed, epoch, idx, 0, 40)
    for i in range(len(sizes)):
        assert tuple(p.boxes[i]) == torchvision_rrc(int(h[i]), int(w[i]), u[i])
        left, top, right, bottom = p.boxes[i]
        assert 0 <= left < right <= w[i] and 0 <= top < bottom <= h[i]
    assert p.size == (32, 32) and not p.flips.any()


def test_extreme_aspect_uses_the_fallback() -> None:
    p = plan(RandomResizedCrop(8, scale=(0.9, 1.0)), [10], [1000], [0])
    assert tuple(p.boxes[0]) == torchvision_rrc(10, 1000, uniforms(0, 0, [0], 0, 40)[0], (0.9, 1))
    assert tuple(p.boxes[0]) == (493.0, 0.0, 506.0, 10.0)  # the central 13 x 10


def test_plan_is_a_pure_function_of_seed_epoch_index() -> None:
    ops = [RandomResizedCrop(64), RandomHorizontalFlip()]
    h, w = np.array([100, 200, 300, 400]), np.array([400, 300, 200, 100])
    idx = np.array([11, 5, 900, 3])
    whole = plan(ops, h, w, idx, seed=1, epoch=2)
    for i in range(4):  # any batch, any position: the same draws for the same index
        one = plan(ops, h[i : i + 1], w[i : i + 1], idx[i : i + 1], seed=1, epoch=2)
        assert np.array_equal(one.boxes[0], whole.boxes[i]) and one.flips[0] == whole.flips[i]
    again = plan(ops, h, w, idx, seed=1, epoch=2)
    assert np.array_equal(again.boxes, whole.boxes) and np.array_equal(again.flips, whole.flips)
    assert not np.array_equal(plan(ops, h, w, idx, seed=1, epoch=3).boxes, whole.boxes)
    assert not np.array_equal(plan(ops, h, w, idx, seed=2, epoch=2).boxes, whole.boxes)


def test_flip_probability_and_independence() -> None:
    idx = np.arange(20000)
    ones = np.ones(len(idx), np.int64) * 50
    flips = plan([Resize(8), RandomHorizontalFlip(0.3)], ones, ones, idx).flips
    assert abs(flips.mean() - 0.3) < 0.02
    assert plan([Resize(8), RandomHorizontalFlip(1.0)], ones, ones, idx).flips.all()
    u = uniforms(0, 0, idx, 0, 3)
    assert np.abs(np.corrcoef(u.T) - np.eye(3)).max() < 0.03
    assert abs(u.mean() - 0.5) < 0.01 and u.min() >= 0 and u.max() < 1


def test_center_crop_box_is_torchvision_resize_then_crop() -> None:
    # 300 x 400, CenterCrop(224, 224/256): Resize(256) -> 256 x 341, crop at (16, 58).
    p = plan(CenterCrop(224), [300], [400], [0])
    sx, sy = 400 / 341, 300 / 256
    assert np.allclose(p.boxes[0], [58 * sx, 16 * sy, 282 * sx, 240 * sy])
    full = plan(CenterCrop(50, ratio=1.0), [100], [100], [0])
    assert np.allclose(full.boxes[0], [0, 0, 100, 100])


def test_resize_is_the_whole_image() -> None:
    p = plan(Resize((20, 30)), [100, 7], [50, 9], [0, 1])
    assert p.size == (20, 30) and np.array_equal(p.boxes, [[0, 0, 50, 100], [0, 0, 9, 7]])


def test_bad_ops_and_arguments() -> None:
    with pytest.raises(ArgumentError, match="exactly one"):
        plan([RandomHorizontalFlip()], [1], [1], [0])
    with pytest.raises(ArgumentError, match="exactly one"):
        plan([Resize(4), CenterCrop(4)], [1], [1], [0])
    with pytest.raises(ArgumentError, match="not an image decode op"):
        plan([Resize(4), "flip"], [1], [1], [0])
    with pytest.raises(ArgumentError, match="size"):
        RandomResizedCrop(0)
    with pytest.raises(ArgumentValueError, match="scale"):
        RandomResizedCrop(8, scale=(0.5, 0.1))
    with pytest.raises(ArgumentError, match="length"):
        plan(Resize(4), [1, 2], [1], [0])
