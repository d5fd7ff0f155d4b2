"""Which JPEG decoder and which resize for chute's image ops: simplejpeg vs Pillow, full and
DCT-scaled decode, PIL vs torch antialiased bilinear resize; 1 thread vs 2 threads (does the
call release the GIL?), on real photos (``_photos.py``: skimage.data crops, 250-500 px, q90).

    python benchmarks/image_decoders.py [--images 400] [--reps 3]
        [--json benchmarks/results/image_decoders.json]

Rows are interleaved over ``--reps`` repetitions and the best kept (other work on a shared
machine only ever slows a row down). ``x2/x1`` is the 2-thread over the 1-thread rate: near
2.0 on an idle 2-core machine when the call releases the GIL, near 1.0 (or below) when not.
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from _common import RESULTS, table, write_json
from _photos import photo_jpegs
from PIL import Image

SIZE = 160


def _scaled(b: bytes, s: int) -> tuple[int, int]:
    import simplejpeg

    h, w, _, _ = simplejpeg.decode_jpeg_header(b)
    return -(-h // s), -(-w // s)


def contenders() -> dict[str, Callable[[Any], Any]]:
    import simplejpeg

    def sj(s: int, colorspace: str = "RGB") -> Callable[[bytes], Any]:
        def f(b: bytes) -> Any:
            if s == 1:
                return simplejpeg.decode_jpeg(b, colorspace)
            h, w = _scaled(b, s)
            return simplejpeg.decode_jpeg(b, colorspace, min_height=h, min_width=w)

        return f

    def pil(s: int) -> Callable[[bytes], Any]:
        def f(b: bytes) -> Any:
            im = Image.open(io.BytesIO(b))
            if s > 1:
                im.draft("RGB", (-(-im.width // s), -(-im.height // s)))
            im.load()
            return im

        return f

    def crop_box(w: int, h: int) -> tuple[float, float, float, float]:
        return (0.1 * w, 0.05 * h, 0.8 * w, 0.9 * h)

    def sj_pil_resize(b: bytes) -> Any:  # decode RGBX: Image.frombuffer maps it, no copy
        a = simplejpeg.decode_jpeg(b, "RGBX")
        h, w = a.shape[:2]
        im = Image.frombuffer("RGBX", (w, h), a, "raw", "RGBX", 0, 1)
        r = im.resize((SIZE, SIZE), Image.Resampling.BILINEAR, box=crop_box(w, h))
        return np.asarray(r)[:, :, :3].transpose(2, 0, 1).copy()

    def sj_torch_resize(b: bytes) -> Any:
        a = simplejpeg.decode_jpeg(b, "RGB")
        h, w = a.shape[:2]
        x0, y0, x1, y1 = (round(v) for v in crop_box(w, h))
        t = torch.from_numpy(a[y0:y1, x0:x1]).permute(2, 0, 1)[None]
        r = torch.nn.functional.interpolate(t, (SIZE, SIZE), mode="bilinear", antialias=True)
        return r[0].numpy().copy()

    return {
        "simplejpeg decode 1/1": sj(1),
        "simplejpeg decode 1/2": sj(2),
        "simplejpeg decode 1/4": sj(4),
        "simplejpeg decode 1/8": sj(8),
        "simplejpeg decode RGBX 1/1": sj(1, "RGBX"),
        "PIL decode 1/1": pil(1),
        "PIL decode draft 1/2": pil(2),
        "PIL decode draft 1/4": pil(4),
        "PIL decode draft 1/8": pil(8),
        "simplejpeg 1/1 + PIL resize(box) 160": sj_pil_resize,
        "simplejpeg 1/1 + torch interpolate 160": sj_torch_resize,
    }


def rate(f: Callable[[Any], Any], data: list[bytes], threads: int) -> float:
    t = time.perf_counter()
    if threads == 1:
        for b in data:
            f(b)
    else:
        with ThreadPoolExecutor(threads) as ex:
            list(ex.map(f, data, chunksize=8))
    return len(data) / (time.perf_counter() - t)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--images", type=int, default=400)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json", default=str(RESULTS / "image_decoders.json"))
    args = p.parse_args()
    torch.set_num_threads(1)  # one intra-op thread per calling thread, as in a loader thread
    data = photo_jpegs(args.images)
    fs = contenders()
    best: dict[tuple[str, int], float] = {}
    for _ in range(args.reps):
        for name, f in fs.items():
            for threads in (1, 2):
                r = rate(f, data, threads)
                best[name, threads] = max(best.get((name, threads), 0.0), r)
    rows = [
        {
            "name": name,
            "x1": best[name, 1],
            "x2": best[name, 2],
            "ratio": best[name, 2] / best[name, 1],
        }
        for name in fs
    ]
    cols = [
        ("name", "", "s"),
        ("x1", "1 thread img/s", ",.0f"),
        ("x2", "2 threads img/s", ",.0f"),
        ("ratio", "x2/x1", ".2f"),
    ]
    print(table(rows, cols))
    kb = sum(map(len, data)) / len(data) / 1e3
    print(f"{len(data)} photo JPEGs, q90, 250-500 px, mean {kb:.0f} kB")
    path = write_json(args.json, {"images": len(data), "mean_kb": kb, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
