"""chute.image.codec: what is stored for each kind of input, and decoding it back."""

from __future__ import annotations

import io

import numpy as np
import pytest

pytest.importorskip("simplejpeg")
from _image_files import jpeg, kinds, picture, pil_rgb
from PIL import Image, ImageOps

from chute import ArgumentError, FormatError
from chute.image import decode_image, encode_image, jpeg_size


def test_jpeg_within_max_side_is_stored_as_is() -> None:
    data = jpeg(120, 160)
    for max_side in (None, 160, 1000):
        assert encode_image(data, max_side) == (data, 120, 160)
    assert encode_image(memoryview(data))[0] == data


@pytest.mark.parametrize("kind", list(kinds()))
def test_every_kind_comes_out_as_pil_convert_rgb(kind: str) -> None:
    """Stored pixels are those of PIL's exif_transpose + convert("RGB") (alpha dropped, not
    composited), up to JPEG's loss when re-encoded (kept JPEGs are exact)."""
    data = kinds()[kind]
    stored, h, w = encode_image(data)
    ref = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))
    assert (h, w) == ref.shape[:2] == jpeg_size(stored)
    got = decode_image(stored)
    assert got.shape == (3, h, w) and got.dtype == np.uint8
    kept = kind in ("jpeg", "gray_jpeg", "progressive_jpeg")
    assert (stored == data) == kept
    diff = np.abs(got.transpose(1, 2, 0).astype(int) - ref)
    if kept:
        assert diff.max() == 0
    else:  # one JPEG encode at quality 90: smooth content, or a palette's sharp colour steps
        assert diff.mean() < (6.0 if kind.startswith("palette") else 2.0), diff.mean()


def test_exif_rotation_is_applied() -> None:
    _, h, w = encode_image(kinds()["exif_rotated_jpeg"])
    assert (h, w) == (130, 90)  # a 90x130 image tagged "rotate 90": stored upright


def test_max_side_resizes_the_longer_side() -> None:
    stored, h, w = encode_image(jpeg(120, 160), max_side=80)
    assert (h, w) == (60, 80) == jpeg_size(stored)
    stored, h, w = encode_image(picture(50, 200), max_side=100)
    assert (h, w) == (25, 100)


def test_arrays_hwc_chw_and_gray() -> None:
    x = picture(40, 60)
    a = encode_image(x)
    b = encode_image(x.transpose(2, 0, 1).copy())
    assert a == b and a[1:] == (40, 60)
    assert encode_image(x[..., 0])[1:] == (40, 60)
    assert np.abs(decode_image(a[0]).transpose(1, 2, 0).astype(int) - x).mean() < 2
    with pytest.raises(ArgumentError, match="uint8"):
        encode_image(x.astype(np.float32))
    with pytest.raises(ArgumentError, match="shape"):
        encode_image(np.zeros((4, 5, 6), np.uint8))
    with pytest.raises(ArgumentError, match="PIL image"):
        encode_image(3)


def test_pil_image_input() -> None:
    im = Image.fromarray(picture(30, 50)).convert("P")
    _, h, w = encode_image(im)
    assert (h, w) == (30, 50)


def test_decode_equals_pil_for_jpeg_and_png() -> None:
    for data in (jpeg(77, 101, progressive=True), kinds()["png"], kinds()["gray_jpeg"]):
        assert np.array_equal(decode_image(data).transpose(1, 2, 0), pil_rgb(data))


@pytest.mark.parametrize("cut", [0.3, 0.9])
def test_truncated_jpeg_raises_format_error(cut: int) -> None:
    data = jpeg(200, 300)
    bad = data[: int(len(data) * cut)]
    with pytest.raises(FormatError, match="truncated"):
        encode_image(bad)
    with pytest.raises(FormatError, match="truncated"):
        decode_image(bad)


def test_not_an_image_raises_format_error() -> None:
    with pytest.raises(FormatError, match="not a decodable image"):
        encode_image(b"hello, world")
    with pytest.raises(FormatError):
        jpeg_size(b"hello")
