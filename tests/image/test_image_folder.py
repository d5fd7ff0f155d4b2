"""chute.sources.image_folder: an ImageFolder tree of real files -> samples and a chute dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("simplejpeg")
import torch
from _image_files import jpeg, kinds

import chute
from chute import SourceError, from_image_folder
from chute.image import decode_image
from chute.sources.image_folder import ImageFolder


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "train"
    files = {
        "cat/a.jpg": jpeg(60, 80, seed=1),
        "cat/sub/b.png": kinds()["rgba_png"],
        "cat/c.JPEG": kinds()["exif_rotated_jpeg"],
        "dog/d.jpeg": kinds()["cmyk_jpeg"],
        "dog/e.png": kinds()["palette_alpha_png"],
        "dog/f.jpg": kinds()["gray_jpeg"],
        "dog/notes.txt": b"not an image",
        "bird/g.jpg": kinds()["progressive_jpeg"],
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def truncate(root: Path) -> None:
    data = jpeg(200, 300, seed=9)
    (root / "dog/h_truncated.jpg").write_bytes(data[: len(data) // 3])


def test_scan(tree: Path) -> None:
    f = ImageFolder(tree, progress=False)
    assert f.classes == ["bird", "cat", "dog"]
    assert f.files == [
        ("bird/g.jpg", 0),
        ("cat/a.jpg", 1),
        ("cat/c.JPEG", 1),
        ("cat/sub/b.png", 1),
        ("dog/d.jpeg", 2),
        ("dog/e.png", 2),
        ("dog/f.jpg", 2),
    ]
    assert f.ignored == ["dog/notes.txt"]


@pytest.mark.parametrize("workers", [0, 2])
def test_samples_in_file_order(tree: Path, workers: int) -> None:
    samples = list(ImageFolder(tree, num_workers=workers, progress=False))
    assert [s["path"] for s in samples] == [p for p, _ in ImageFolder(tree).files]
    assert [s["label"] for s in samples] == [0, 1, 1, 1, 2, 2, 2]
    for s in samples:
        assert decode_image(s["image"].data).shape == (3, s["image"].height, s["image"].width)
    # kept byte for byte: the plain and gray JPEGs
    assert samples[1]["image"].data == (tree / "cat/a.jpg").read_bytes()
    assert samples[2]["image"].height == 130  # EXIF rotation applied


def test_truncated_file_raises_naming_it(tree: Path) -> None:
    truncate(tree)
    with pytest.raises(SourceError, match=r"h_truncated\.jpg.*on_error='skip'"):
        list(ImageFolder(tree, num_workers=2, progress=False))


def test_truncated_file_skipped_and_listed(tree: Path, tmp_path: Path) -> None:
    truncate(tree)
    dst = from_image_folder(
        tree, tmp_path / "ds.chute", max_side=100, on_error="skip", num_workers=2, progress=False
    )
    ds = chute.open(dst)
    assert len(ds) == 7
    meta = ds.metadata
    assert meta["classes"] == ["bird", "cat", "dog"]
    assert meta["ignored"] == ["dog/notes.txt"]
    assert [s["path"] for s in meta["skipped"]] == ["dog/h_truncated.jpg"]
    assert "truncated" in meta["skipped"][0]["reason"]
    assert ds.schema == {
        "image": chute.fields.Image(100, 90),
        "label": chute.fields.Tensor((), "int64"),
        "path": chute.String(),
    }
    s = ds[2]
    assert s["path"] == "cat/c.JPEG" and int(s["label"]) == 1
    assert s["image"].shape == (3, 100, 69) and s["image"].dtype == torch.uint8
    assert ds.gather(np.arange(7))["image"].sizes.max() <= 100


def test_chute_convert_detects_an_image_folder(tree: Path, tmp_path: Path) -> None:
    from chute.cli import main

    truncate(tree)
    with pytest.raises(SourceError, match="h_truncated"):
        chute.convert(tree, tmp_path / "bad.chute", progress=False)
    assert not (tmp_path / "bad.chute").exists()
    (tree / "dog/h_truncated.jpg").unlink()
    assert main(["convert", str(tree), str(tmp_path / "c.chute"), "-q"]) == 0
    ds = chute.open(tmp_path / "c.chute")
    assert ds.metadata["classes"] == ["bird", "cat", "dog"]
    assert ds.metadata["skipped"] == [] and ds.metadata["ignored"] == ["dog/notes.txt"]
    ref = chute.open(from_image_folder(tree, tmp_path / "f.chute", progress=False))
    for i in range(len(ref)):
        a, b = ds[i], ref[i]
        assert a["path"] == b["path"] and torch.equal(a["image"], b["image"])
    skip = chute.convert(
        tree,
        tmp_path / "s.chute",
        progress=False,
        on_error="skip",
        max_side=50,
        fields={"image": "img", "label": "y"},
    )
    ds = chute.open(skip)
    assert set(ds.schema) == {"img", "y"} and ds.schema["img"] == chute.fields.Image(50)


def test_source_kind(tree: Path, tmp_path: Path) -> None:
    from chute.convert import source_kind
    from chute.sources.images import ImageFolderSource

    assert source_kind(tree) is ImageFolderSource
    assert source_kind(tree / "cat") is None  # images at the root: not the layout
    (tmp_path / "empty" / "a").mkdir(parents=True)
    assert source_kind(tmp_path / "empty") is None
