"""chute.image.batch_decode: DCT-scaled decode + crop + resize + flip into a preallocated batch."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("simplejpeg")
import torch
from _image_files import jpeg, kinds, pil_rgb
from PIL import Image

import chute
from chute import ArgumentError, FormatError
from chute.image import (
    CenterCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    dct_scales,
    decode_batch,
    decode_planned,
    jpeg_size,
    plan,
    plan_slice,
    scaled_boxes,
)

OPS = [RandomResizedCrop(48, scale=(0.05, 1.0)), RandomHorizontalFlip()]


@pytest.fixture(scope="module")
def batch() -> tuple[list[bytes], np.ndarray, np.ndarray]:
    sizes = [(120, 160), (300, 400), (480, 360), (64, 64), (500, 700), (33, 250)] * 3
    data = [jpeg(h, w, seed=i, progressive=i % 4 == 0) for i, (h, w) in enumerate(sizes)]
    h, w = np.array([jpeg_size(d) for d in data]).T
    return data, h, w


def reference(data: bytes, box: np.ndarray, size: tuple[int, int], flip: bool) -> np.ndarray:
    """PIL, full decode. A box on whole pixels: crop, then resize (bilinear, antialiased), as
    torchvision's RandomResizedCrop does; a fractional one: PIL's resize of that box."""
    rgb = pil_rgb(data)
    if np.array_equal(box, np.rint(box)):
        x0, y0, x1, y1 = box.astype(int)
        im, crop = Image.fromarray(np.ascontiguousarray(rgb[y0:y1, x0:x1])), None
    else:
        im, crop = Image.fromarray(rgb), tuple(box)
    out = np.asarray(im.resize(size[::-1], Image.Resampling.BILINEAR, box=crop))
    return (out[:, ::-1] if flip else out).transpose(2, 0, 1)


def test_close_to_pil_crop_and_resize_of_the_same_box(batch) -> None:
    """Full-scale decodes match torchvision's crop-then-resize up to rounding (+-1: torch's
    resize, which chute uses for whole-pixel boxes on x86, rounds PIL's coefficients its own
    way). DCT-scaled ones (1/2..1/8) are not exact: libjpeg's reduced IDCT low-passes each
    8x8 block instead of PIL's bilinear antialias filter, and PIL's box resize samples the
    pixels just outside the box, so pixels move by a few levels (mean abs diff < 3 of 255,
    99th percentile < 16: measured ~1-2.5 on photos), never by a misplaced box (that would
    give tens)."""
    data, h, w = batch
    idx = np.arange(len(data)) + 100
    out = np.empty((len(data), 3, 48, 48), np.uint8)
    assert decode_batch(data, h, w, OPS, idx, 7, 1, out) is out
    p = plan(OPS, h, w, idx, 7, 1)
    scales = dct_scales(p)
    assert {1, 2} <= set(scales.tolist())  # both paths are exercised
    for i, d in enumerate(data):
        diff = np.abs(out[i].astype(int) - reference(d, p.boxes[i], p.size, p.flips[i]))
        if scales[i] == 1:
            assert diff.max() <= 1, i
        else:
            assert diff.mean() < 3 and np.percentile(diff, 99) < 16, (i, scales[i], diff.mean())


def test_center_crop_close_to_torchvision_two_steps() -> None:
    """Resize(int(size/ratio)) then CenterCrop(size) with PIL, as torchvision does it."""
    data = jpeg(300, 400, seed=3)
    out = np.empty((1, 3, 224, 224), np.uint8)
    decode_batch([data], [300], [400], CenterCrop(224), [0], 0, 0, out)
    im = Image.fromarray(pil_rgb(data)).resize((341, 256), Image.Resampling.BILINEAR)
    ref = np.asarray(im)[16:240, 58:282].transpose(2, 0, 1)
    assert np.abs(out[0].astype(int) - ref).max() <= 1  # PIL's coefficients, rounded


def test_flip_mirrors(batch) -> None:
    data, h, w = batch
    a = np.empty((len(data), 3, 40, 30), np.uint8)
    b = np.empty_like(a)
    decode_batch(data, h, w, [Resize((40, 30))], np.arange(len(data)), 0, 0, a)
    decode_batch(
        data, h, w, [Resize((40, 30)), RandomHorizontalFlip(1.0)], range(len(data)), 0, 0, b
    )
    assert np.array_equal(a[..., ::-1], b)


def test_two_threads_on_slices_give_the_pixels_of_one_call(batch) -> None:
    data, h, w = batch
    idx = np.arange(len(data))
    one = np.empty((len(data), 3, 48, 48), np.uint8)
    decode_batch(data, h, w, OPS, idx, 0, 5, one)
    p = plan(OPS, h, w, idx, 0, 5)
    two = np.zeros_like(one)
    cuts = [(0, 7), (7, len(data))]
    threads = [
        threading.Thread(
            target=decode_planned,
            args=(data[a:b], h[a:b], w[a:b], plan_slice(p, a, b), two[a:b], idx[a:b]),
        )
        for a, b in cuts
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert np.array_equal(one, two)


def test_ragged_batch_input(batch) -> None:
    data, h, w = batch
    offsets = np.cumsum([0, *map(len, data)])
    values = torch.from_numpy(np.frombuffer(b"".join(data), np.uint8).copy())
    rb = chute.RaggedBatch(values, torch.from_numpy(offsets))
    a = np.empty((len(data), 3, 48, 48), np.uint8)
    b = np.empty_like(a)
    decode_batch(data, h, w, OPS[0], range(len(data)), 0, 0, a)
    decode_batch(rb, h, w, OPS[0], range(len(data)), 0, 0, b)
    assert np.array_equal(a, b)
    decode_batch((values.numpy(), offsets), h, w, OPS[0], range(len(data)), 0, 0, b)
    assert np.array_equal(a, b)


def test_non_jpeg_bytes_take_the_pil_path() -> None:
    data = kinds()["png"]
    out = np.empty((1, 3, 20, 20), np.uint8)
    decode_batch([data], [90], [130], Resize(20), [0], 0, 0, out)
    ref = reference(data, np.array([0, 0, 130, 90]), (20, 20), False)
    assert np.array_equal(out[0], ref)


def test_corrupt_image_names_the_sample(batch) -> None:
    data, h, w = batch
    bad = [*data[:3], data[3][: len(data[3]) // 2]]
    out = np.empty((4, 3, 16, 16), np.uint8)
    with pytest.raises(FormatError, match=r"sample 13 \(image 3 of the batch\).*truncated"):
        decode_batch(bad, h[:4], w[:4], Resize(16), [10, 11, 12, 13], 0, 0, out)
    with pytest.raises(FormatError, match="do not match"):
        decode_batch(data[:1], [h[0] * 2], [w[0]], Resize(16), [0], 0, 0, out[:1])
    with pytest.raises(FormatError, match="sample 4"):
        decode_batch([b"garbage!"], [5], [5], Resize(16), [4], 0, 0, out[:1])


def test_out_must_fit(batch) -> None:
    data, h, w = batch
    with pytest.raises(ArgumentError, match="out must be"):
        decode_batch(data[:2], h[:2], w[:2], Resize(16), [0, 1], 0, 0, np.empty((2, 3, 16, 15)))
    out = np.empty((0, 3, 16, 16), np.uint8)
    assert decode_batch([], [], [], Resize(16), [], 0, 0, out) is out


def test_without_torchs_simd_resize_pil_gives_the_same_pixels(batch, monkeypatch) -> None:
    """On a CPU without AVX2, PIL resizes the whole-pixel crops too (a view of the decoded
    image): torchvision's crop-then-resize either way, +-1 (the two round PIL's coefficients
    their own ways)."""
    from chute.image import batch_decode as decode

    data, h, w = batch
    idx = np.arange(len(data))
    fast = decode_batch(data, h, w, OPS, idx, 3, 0, np.empty((len(data), 3, 48, 48), np.uint8))
    monkeypatch.setattr(decode, "_TORCH_RESIZE", False)
    slow = decode_batch(data, h, w, OPS, idx, 3, 0, np.empty_like(fast))
    assert np.abs(fast.astype(int) - slow).max() <= 1


@pytest.mark.parametrize("torch_resize", [True, False])
@pytest.mark.parametrize("borrowed", ["resize_aa", "pil_raw"])
def test_public_fallbacks_of_private_apis_give_the_same_pixels(
    batch, monkeypatch, borrowed, torch_resize
) -> None:
    """chute._compat's fallbacks (torch's interpolate + copy for the private out= resize;
    PIL's frombuffer + a numpy copy for its core) decode the same pixels as the fast paths,
    through torch's resizer and through PIL's alone."""
    from chute import _compat
    from chute.image import batch_decode as decode

    data, h, w = batch
    idx = np.arange(len(data))
    monkeypatch.setattr(decode, "_TORCH_RESIZE", torch_resize)
    for ops in (OPS, CenterCrop(40)):
        size = 48 if ops is OPS else 40
        fast = decode_batch(
            data, h, w, ops, idx, 3, 1, np.empty((len(idx), 3, size, size), np.uint8)
        )
        with monkeypatch.context() as m:
            m.setitem(_compat.RESOLVED, borrowed, _compat.fallback(borrowed))
            slow = decode_batch(data, h, w, ops, idx, 3, 1, np.empty_like(fast))
        assert np.array_equal(fast, slow)
    assert _compat.RESOLVED[borrowed] is not _compat.fallback(borrowed)  # this torch/Pillow


def test_a_jpeg_larger_than_its_stored_size_is_named(batch) -> None:
    """Stored (250, 700) for a 500 x 700 JPEG: it decodes larger than the buffer planned for
    it; the error says the stored size is wrong (the JPEG's header tells, not the words of
    simplejpeg's message)."""
    data, h, w = batch
    assert (h[4], w[4]) == (500, 700)
    out = np.empty((1, 3, 16, 16), np.uint8)
    with pytest.raises(FormatError, match=r"sample 9 .*\(250, 700\) do not match"):
        decode_batch(data[4:5], [250], [700], Resize(16), [9], 0, 0, out)


def test_scaled_boxes(batch) -> None:
    """Where decode_planned decodes: libjpeg-turbo's size at the DCT scale, the box scaled to
    it; RandomResizedCrop's boxes are on whole pixels at full scale, a center crop's not."""
    data, h, w = batch
    p = plan(OPS, h, w, np.arange(len(data)), 7, 1)
    d = dct_scales(p)
    sb = scaled_boxes(p, h, w)
    assert np.array_equal(sb.heights, -(-h // d)) and np.array_equal(sb.widths, -(-w // d))
    full = d == 1
    assert np.array_equal(sb.boxes[full], p.boxes[full]) and sb.whole[full].all()
    cc = plan(CenterCrop(40), [300], [400], [0], 0, 0)
    assert not scaled_boxes(cc, [300], [400]).whole[0]


def test_exact_decodes_at_full_size_like_pil(batch) -> None:
    """``exact=True``: no DCT scaling, so every image matches the full decode + crop + resize
    reference up to rounding (+-1), where the default differs on the DCT-scaled ones."""
    data, h, w = batch
    ops = [chute.RandomResizedCrop(48, scale=(0.3, 1.0), exact=True), chute.RandomHorizontalFlip()]
    idx = np.arange(len(data)) + 100
    p = plan(ops, h, w, idx, 7, 1)
    assert p.exact and set(dct_scales(p).tolist()) == {1}
    assert set(dct_scales(plan(OPS, h, w, idx, 7, 1)).tolist()) != {1}
    out = decode_batch(data, h, w, ops, idx, 7, 1, np.empty((len(data), 3, 48, 48), np.uint8))
    for i, d in enumerate(data):
        diff = np.abs(out[i].astype(int) - reference(d, p.boxes[i], p.size, p.flips[i]))
        assert diff.max() <= 1, i


@pytest.mark.parametrize("torch_resize", [True, False])
@pytest.mark.parametrize(
    "op",
    [
        chute.ResizePad(48, center=True, fill=(9, 8, 7), exact=True),
        chute.ResizePad((40, 56), shorter=30, exact=True),
        chute.ScaleJitter(48, (0.3, 0.9), fill=(9, 8, 7), exact=True),
        CenterCrop((40, 72), exact=True),
    ],
)
def test_a_padded_output_is_the_whole_resized_image_windowed(
    batch, monkeypatch, op, torch_resize
) -> None:
    """The letterbox, an uncropped scale jitter and a center crop wider than the resized
    image, decoded at full size: each output within 1 of PIL's resize of the whole image to
    the plan's scale, then the window the plan's box makes of it, the fill around it
    (torchvision's steps: resize, pad), flipped or not. With torch's resizer the whole image
    is resized once (``chute.image.framing.whole_frames``) where that costs at most twice
    the output's pixels."""
    from chute.image import batch_decode
    from chute.image.framing import whole_frames

    monkeypatch.setattr(batch_decode, "_TORCH_RESIZE", torch_resize)
    data, h, w = batch
    ops = [op, RandomHorizontalFlip()]
    idx = np.arange(len(data))
    p = plan(ops, h, w, idx, 3, 0)
    oh, ow = p.size
    out = decode_batch(data, h, w, ops, idx, 3, 0, np.empty((len(data), 3, oh, ow), np.uint8))
    fill = getattr(op, "fill", 0)
    fill = np.array(fill if isinstance(fill, tuple) else (fill,) * 3)
    for i, d in enumerate(data):
        x0, y0, x1, y1 = p.boxes[i]
        sx, sy = (x1 - x0) / ow, (y1 - y0) / oh  # stored pixels per output pixel
        at = np.array([w[i] / sx, h[i] / sy, x0 / sx, y0 / sy])
        np.testing.assert_allclose(at, np.rint(at), atol=1e-6)
        rw, rh, left, top = np.rint(at).astype(int)
        im = Image.fromarray(pil_rgb(d)).resize((rw, rh), Image.Resampling.BILINEAR)
        canvas = np.broadcast_to(fill, (rh + 2 * oh, rw + 2 * ow, 3)).copy()
        canvas[oh : oh + rh, ow : ow + rw] = np.asarray(im)
        ref = canvas[oh + top : 2 * oh + top, ow + left : 2 * ow + left].transpose(2, 0, 1)
        if p.flips[i]:
            ref = ref[:, :, ::-1]
        assert np.abs(out[i].astype(int) - ref).max() <= 1, i
    framed = whole_frames(p, scaled_boxes(p, h, w), h, w).ok
    assert framed.all() if isinstance(op, (chute.ResizePad, chute.ScaleJitter)) else framed.any()
