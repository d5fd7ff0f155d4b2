"""Real image files for the image tests, made with PIL: smooth photo-like content (gradients and
waves, not noise), in the modes and encodings the codec must handle."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image


def picture(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A smooth uint8 (h, w, 3) picture, different per seed."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    rng = np.random.default_rng(seed)
    a, b, c = rng.uniform(0.01, 0.08, 3)
    img = np.stack(
        [
            127 + 120 * np.sin(a * x + b * y),
            127 + 120 * np.cos(b * x - c * y + 1),
            255 * (x + y) / (h + w),
        ],
        axis=-1,
    )
    return img.clip(0, 255).astype(np.uint8)


def encode(im: Image.Image, fmt: str = "JPEG", **kw: object) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def jpeg(h: int = 120, w: int = 160, seed: int = 0, **kw: object) -> bytes:
    return encode(Image.fromarray(picture(h, w, seed)), "JPEG", quality=90, **kw)


def pil_rgb(data: bytes) -> np.ndarray:
    """PIL's decode, (H, W, 3)."""
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def kinds() -> dict[str, bytes]:
    """One encoded file per case the codec must handle."""
    rgb = Image.fromarray(picture(90, 130, 1))
    rgba = rgb.convert("RGBA")
    alpha = np.array(rgba)
    alpha[:, :40, 3] = 0  # transparent strip
    pal = Image.fromarray(alpha).convert("P", palette=Image.Palette.ADAPTIVE)
    pal.info["transparency"] = 0
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to view
    return {
        "jpeg": jpeg(),
        "gray_jpeg": encode(rgb.convert("L"), quality=90),
        "cmyk_jpeg": encode(rgb.convert("CMYK"), quality=90),
        "progressive_jpeg": encode(rgb, quality=90, progressive=True),
        "exif_rotated_jpeg": encode(rgb, quality=90, exif=exif.tobytes()),
        "png": encode(rgb, "PNG"),
        "rgba_png": encode(Image.fromarray(alpha), "PNG"),
        "palette_alpha_png": encode(pal, "PNG"),
        "gray_png": encode(rgb.convert("L"), "PNG"),
    }


def corrupt_second_image(dst: Path) -> None:
    """Overwrite the middle of image 1's bytes in dataset ``dst`` in place (the manifest's
    checksum then disagrees, which only ``chute verify`` checks: reading must still fail
    cleanly)."""
    offsets = np.load(dst / "image.offsets.npy")
    values = dst / "image.values.npy"
    raw = bytearray(values.read_bytes())
    header = len(raw) - int(offsets[-1])
    a, b = int(offsets[1]), int(offsets[2])
    raw[header + a + 2 : header + b] = b"\x00" * (b - a - 2)  # keeps the SOI marker
    values.write_bytes(bytes(raw))
