"""Write the golden datasets that pin the bytes of chute format v1.

    python tests/data/make_golden.py      # rewrites tests/data/golden-v1*.chute

tests/test_format.py writes the same datasets afresh and compares them byte for byte with the
committed folders, and reads the committed folders back. Regenerate them only for a deliberate
format change (and bump chute.format.FORMAT_VERSION when old files no longer read the same).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

import chute

NUM_SAMPLES = 5
PART_SIZE = 2
METADATA = {"source": "tests/data/make_golden.py", "classes": ["cat", "dog"], "version": 1}
# name -> part_size: one dataset in the root folder, one split into part-NNNNN folders
DATASETS = {"golden-v1.chute": None, "golden-v1-parts.chute": PART_SIZE}

SCHEMA = {
    "image": chute.fields.Tensor((2, 3), "uint8"),
    "label": chute.fields.Tensor((), "int64"),
    "flag": chute.fields.Tensor((), "bool"),
    "half": chute.fields.Tensor((2,), "float16"),
    "bf16": chute.fields.Tensor((2,), "bfloat16"),
    "z": chute.fields.Tensor((), "complex64"),
    "meta/id": chute.fields.Tensor((), "uint16"),
    "tokens": chute.Ragged("int32"),
    "boxes": chute.Ragged("float32", (4,)),
    "picture": chute.Ragged("uint8", (None, 3)),
    "jpeg": chute.Bytes(),
    "caption": chute.String(),
}


def samples() -> list[dict[str, Any]]:
    """The golden samples: exact values only (no RNG), empty ragged samples, NaN and unicode."""
    return [
        {
            "image": np.arange(6, dtype=np.uint8).reshape(2, 3) + 10 * i,
            "label": np.int64(i - 2),
            "flag": np.bool_(i % 2),
            "half": np.array([np.nan, np.inf] if i == 0 else [i / 4, -i], np.float16),
            "bf16": torch.tensor([1.5 * i, -0.25], dtype=torch.bfloat16),
            "z": np.complex64(complex(i, -i)),
            "meta/id": np.uint16(65535 - i),
            "tokens": np.arange(i, dtype=np.int32) * 7,
            "boxes": np.arange(4 * (i % 3), dtype=np.float32).reshape(-1, 4) / 2,
            "picture": np.full((i + 1, 2 - i % 2, 3), 200 + i, np.uint8),
            "jpeg": bytes([0xFF, 0xD8, i]) * (i % 2),
            "caption": ["", "a cat", "ünïcödé · 猫", "emoji 🐈", "x" * 7][i],
        }
        for i in range(NUM_SAMPLES)
    ]


def build(root: Path) -> list[Path]:
    """Write every golden dataset into ``root``; returns their paths."""
    paths = []
    for name, part_size in DATASETS.items():
        with chute.Writer(
            root / name, SCHEMA, overwrite=True, metadata=METADATA, part_size=part_size
        ) as w:
            for sample in samples():
                w.append(sample)
        paths.append(root / name)
    return paths


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    for name in DATASETS:
        shutil.rmtree(here / name, ignore_errors=True)
    for path in build(here):
        print(f"wrote {path}")
