"""Real photographs for the image benchmarks: random crops and rescales (250-500 px on the
longer side) of the colour photos scikit-image ships in ``skimage.data``, saved as JPEG
quality 90 in a torchvision ImageFolder layout (``root/CLASS/NNNNN.jpg``). Photos, not noise:
noise decodes unlike photos (no zero DCT coefficients) and would misstate decode speed.

scikit-image is needed only here (``pip install scikit-image``); the photos used are those
bundled with it (no download).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

# Colour photographs bundled with scikit-image (no pooch download needed).
PHOTOS = (
    "astronaut",
    "chelsea",
    "coffee",
    "rocket",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
    "stereo_motorcycle",
)


def sources() -> list[np.ndarray]:
    """The bundled colour photos as uint8 (H, W, 3) arrays."""
    import skimage.data

    out = []
    for name in PHOTOS:
        x = getattr(skimage.data, name)()
        if isinstance(x, tuple):  # stereo_motorcycle: (left, right, disparity)
            out.extend([x[0], x[1]])
        else:
            out.append(x)
    return [np.ascontiguousarray(x[..., :3]) for x in out]


def photo_jpegs(n: int, seed: int = 0, quality: int = 90) -> list[bytes]:
    """``n`` JPEGs: a random crop (40-100% of each side) of a random photo, rescaled so the
    longer side is 250-500 px."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    srcs = [Image.fromarray(x) for x in sources()]
    out = []
    for _ in range(n):
        src = srcs[rng.integers(len(srcs))]
        w, h = src.size
        cw, ch = int(w * rng.uniform(0.4, 1)), int(h * rng.uniform(0.4, 1))
        x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        side = int(rng.integers(250, 501))
        scale = side / max(cw, ch)
        size = (max(1, round(cw * scale)), max(1, round(ch * scale)))
        im = src.resize(size, Image.Resampling.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=quality)
        out.append(buf.getvalue())
    return out


def photo_folder(root: str | Path, n: int, classes: int = 10, seed: int = 0) -> Path:
    """Write ``n`` photo JPEGs into ``root/class_KK/NNNNN.jpg`` (ImageFolder layout)."""
    root = Path(root)
    for i, data in enumerate(photo_jpegs(n, seed)):
        d = root / f"class_{i % classes:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:05d}.jpg").write_bytes(data)
    return root
