"""The FFCV row of ``images.py``, run by the Python of a separate venv that has FFCV 1.0.2
(numpy<2, numba, opencv; see docs/benchmarks.md): FFCV cannot live in chute's venv.

    FFCV_PYTHON _ffcv_epochs.py FOLDER BETON --batch-size 256 --size 160 --threads 2

Writes the ImageFolder's photos to ``BETON`` with FFCV's ``DatasetWriter`` (``RGBImageField``,
``write_mode="jpg"``, quality 90: FFCV re-encodes every image), prints one JSON line
``{"ready": ..., "disk_mb": ..., "write_s": ...}``, then for every line ``epoch K`` on stdin
runs one shuffled epoch of ``RandomResizedCropRGBImageDecoder((size, size))`` + flip (one
Loader reused across epochs, as in training; the first epoch's first batch includes numba's
compile) and prints one JSON line: seconds, first batch s, images, CPU s of this process.
Only this file imports FFCV; the parent (``images.py``) times nothing of it itself.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Folder:
    """(PIL image, label) per file of an ImageFolder, sorted as torchvision sorts it."""

    def __init__(self, root: Path):
        classes = sorted(d.name for d in root.iterdir() if d.is_dir())
        self.files = [(f, k) for k, c in enumerate(classes) for f in sorted((root / c).iterdir())]

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        from PIL import Image

        path, label = self.files[i]
        return Image.open(path).convert("RGB"), label


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("beton")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--size", type=int, default=160)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    from importlib.metadata import version

    import numpy as np
    from ffcv.fields import IntField, RGBImageField
    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import RandomHorizontalFlip, ToTensor, ToTorchImage
    from ffcv.writer import DatasetWriter

    t = time.perf_counter()
    folder = Folder(Path(args.folder))
    fields = {"image": RGBImageField(write_mode="jpg", jpeg_quality=90), "label": IntField()}
    DatasetWriter(args.beton, fields, num_workers=args.threads).from_indexed_dataset(folder)
    write_s = time.perf_counter() - t
    size = os.path.getsize(args.beton) / 1e6
    print(
        json.dumps(
            {
                "ready": True,
                "ffcv": version("ffcv"),
                "numpy": np.__version__,
                "disk_mb": size,
                "write_s": write_s,
                "images": len(folder),
            }
        ),
        flush=True,
    )
    loader = Loader(
        args.beton,
        batch_size=args.batch_size,
        num_workers=args.threads,
        order=OrderOption.RANDOM,
        os_cache=True,
        drop_last=False,
        seed=0,
        pipelines={
            "image": [
                RandomResizedCropRGBImageDecoder((args.size, args.size)),
                RandomHorizontalFlip(),
                ToTensor(),
                ToTorchImage(),
            ],
            "label": [IntDecoder(), ToTensor()],
        },
    )
    for line in sys.stdin:
        if not line.startswith("epoch"):
            break
        cpu0 = cpu_seconds()
        t0 = time.perf_counter()
        first, count = None, 0
        for x, _y in loader:
            count += len(x)
            if first is None:
                first = time.perf_counter() - t0
        dt = time.perf_counter() - t0
        reply = {"seconds": dt, "first_batch_s": first, "images": count}
        reply["cpu_s"] = cpu_seconds() - cpu0
        reply["shape"] = list(x.shape)
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
