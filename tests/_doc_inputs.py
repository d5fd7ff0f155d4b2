"""The small inputs that the docs' code blocks name without making them, per doc: files in the
folder the blocks run in, and names in their namespace (see ``tests/test_docs.py``).

Each builder takes the folder and returns the names; a doc without one needs none. Every
block may use ``chute`` and ``np`` without importing them. The data is
tiny: the blocks show how to call chute, the tests of each module check what the calls do.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import chute


def _image_folder(folder: Path) -> Path:
    """``imagenet/train/{cat,dog}/N.jpg``: 8 small JPEGs of two classes."""
    pil = pytest.importorskip("PIL.Image")
    root = folder / "imagenet" / "train"
    for label in ("cat", "dog"):
        (root / label).mkdir(parents=True)
        for i in range(4):
            pixels = np.full((40 + i, 50, 3), i * 40, np.uint8)
            pil.fromarray(pixels).save(root / label / f"{i}.jpg")
    return root


def _tokens(folder: Path, name: str, docs: int, length: int) -> chute.Dataset:
    """A dataset of ``docs`` token sequences of about ``length`` tokens each."""
    rng = np.random.default_rng(0)
    with chute.Writer(folder / name) as w:
        for i in range(docs):
            w.append({"tokens": rng.integers(0, 50_000, length + i % 7, dtype=np.int32)})
    return chute.open(folder / name)


def readme(folder: Path) -> dict[str, Any]:
    """A text corpus (objects with ``ids`` and ``title``)."""

    class Doc:
        def __init__(self, i: int) -> None:
            self.ids = list(range(i % 7 + 1))
            self.title = f"document {i}"

    return {"corpus": [Doc(i) for i in range(20)]}


def images(folder: Path) -> dict[str, Any]:
    _image_folder(folder)
    return {}


def mixing(folder: Path) -> dict[str, Any]:
    for name in ("web", "code"):
        chute.write(folder / f"{name}.chute", {"x": np.arange(100, dtype=np.float32)})
    return {}


def tokens(folder: Path) -> dict[str, Any]:
    _tokens(folder, "owt.chute", 20, 700)
    ds = _tokens(folder, "corpus.chute", 30, 500)
    return {
        "ds": ds,
        "web": _tokens(folder, "web.chute", 10, 100),
        "code": _tokens(folder, "code.chute", 10, 50),
        "model": lambda tokens, **kw: None,
    }


def vision(folder: Path) -> dict[str, Any]:
    pil = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(0)
    jpegs, masks = [], []
    for i in range(4):
        out = io.BytesIO()
        pil.fromarray(rng.integers(0, 256, (30 + i, 40, 3), dtype=np.uint8)).save(out, "JPEG")
        jpegs.append(out.getvalue())
        masks.append(rng.integers(0, 5, (30 + i, 40), dtype=np.uint8))
    chute.from_image_folder(_image_folder(folder), folder / "train.chute", progress=False)
    ds = chute.open(folder / "train.chute")
    return {"jpegs": jpegs, "masks": masks, "ds": ds}


class _Squares(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": np.full(3, i, np.float32), "y": i * i}


def _samples() -> Iterator[dict[str, Any]]:
    for i in range(10):
        yield {"tokens": np.arange(i + 1, dtype=np.int32), "label": i % 2}


def convert(folder: Path) -> dict[str, Any]:
    """One input of each kind that docs/convert.md's first block converts."""
    import dask.array
    import datasets
    import h5py
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zarr
    import zstandard

    x, y = np.arange(64 * 4, dtype=np.float32).reshape(64, 4), np.arange(64) % 10
    with h5py.File(folder / "train.h5", "w") as f:
        f["x"], f["y"] = x, y
    zarr.save_group(str(folder / "train.zarr"), x=x, y=y)
    np.savez(folder / "arrays.npz", x)
    root = _image_folder(folder)
    (folder / "data").mkdir()
    for i in range(2):
        table = pa.table({"tokens": [[1, 2, 3], [4, 5]], "text": [f"a{i}", f"b{i}"]})
        pq.write_table(table, folder / "data" / f"{i}.parquet")
    lines = [{"text": "a", "score": 1.5}, {"text": "b", "score": None}]
    text = "".join(json.dumps(line) + "\n" for line in lines).encode()
    (folder / "docs.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(text))
    paths = sorted(p.relative_to(folder).as_posix() for p in root.rglob("*.jpg"))
    (folder / "labels.csv").write_text(
        "path,label\n" + "".join(f"{p},{i}\n" for i, p in enumerate(paths))
    )
    (folder / "shards").mkdir()
    jpeg = (root / "cat" / "0.jpg").read_bytes()
    for i in range(100):
        with tarfile.open(folder / "shards" / f"train-{i:03d}.tar", "w") as tar:
            for ext, data in (("jpg", jpeg), ("cls", str(i % 10).encode())):
                info = tarfile.TarInfo(f"s/{i:05d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return {
        "h5py": h5py,
        "x": x,
        "y": y,
        "my_dataset": _Squares(),
        "samples": _samples,
        "pa": pa,
        "dask_x": dask.array.from_array(x, chunks=32),
        "dask_y": dask.array.from_array(y, chunks=32),
        "build": lambda: {"tokens": [np.arange(i + 1) for i in range(10)]},
        "settings_hash": "v1",
        "hf_dataset": datasets.DatasetDict({"train": datasets.Dataset.from_dict({"n": [1, 2]})}),
        "token_lists": [[1, 2, 3], [4, 5], [6]],
        "texts": ["one", "two", "three"],
    }


INPUTS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "README.md": readme,
    "docs/convert.md": convert,
    "docs/images.md": images,
    "docs/mixing.md": mixing,
    "docs/tokens.md": tokens,
    "docs/vision.md": vision,
}
