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


def test_the_opened_dataset_names_each_label_as_torchvisions_classes(
    tree: Path, tmp_path: Path
) -> None:
    """``ds.metadata["classes"][label]`` is the sample's class folder, as torchvision's
    ``ImageFolder.classes[target]``, whatever the fields are called or opened."""
    truncate(tree)  # a skipped file shifts no label
    out = chute.convert(
        tree,
        tmp_path / "c.chute",
        {"image": "img", "label": "y", "path": "path"},
        progress=False,
        on_error="skip",
        metadata={"source": "mine"},
    )
    assert chute.open(tmp_path / "c.chute").classes == ["bird", "cat", "dog"]
    for ds in (chute.open(out), chute.open(out, fields=["y"]).to_memory()):
        classes, class_to_idx = ds.metadata["classes"], ds.metadata["class_to_idx"]
        assert classes == ["bird", "cat", "dog"] and ds.metadata["source"] == "mine"
        assert class_to_idx == {c: k for k, c in enumerate(classes)}
        assert ds.classes == classes and ds.class_to_idx == class_to_idx  # torchvision's names
        paths = chute.open(out)[0 : len(ds)]["path"]
        assert [classes[int(y)] for y in ds[0 : len(ds)]["y"]] == [p.split("/")[0] for p in paths]


def test_source_kind(tree: Path, tmp_path: Path) -> None:
    from chute.conversion import source_kind
    from chute.sources.image_folder_source import ImageFolderSource

    assert source_kind(tree) is ImageFolderSource
    assert source_kind(tree / "cat") is ImageFolderSource  # images at the root: a flat folder
    (tmp_path / "empty" / "a").mkdir(parents=True)
    assert source_kind(tmp_path / "empty") is None


def write(root: Path, names: list[str], data: bytes) -> None:
    for rel in names:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def torchvision_order(root: Path) -> list[tuple[str, int]]:
    """torchvision.datasets.folder.make_dataset, as written there (torchvision is not
    installed here): classes sorted, ``sorted(os.walk(...))``, names sorted."""
    import os

    from chute.sniff import IMAGE_EXTENSIONS

    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    out = []
    for label, c in enumerate(classes):
        for dirpath, _, names in sorted(os.walk(root / c, followlinks=True)):
            for n in sorted(names):
                if n.lower().endswith(IMAGE_EXTENSIONS):
                    out.append((Path(dirpath, n).relative_to(root).as_posix(), label))
    return out


def test_nested_order_is_torchvisions(tmp_path: Path) -> None:
    # depth-first with sorted folders would give a/b/x.jpg before a/b-c/y.jpg; torchvision's
    # sorted(os.walk()) compares "a/b-c" < "a/b/x" ("-" sorts before "/")
    root = tmp_path / "tv"
    names = ["a/b/x.jpg", "a/b-c/y.jpg", "a/b/z/w.PNG", "a/B.JPG", "a/a.jpg", "b/q/r.webp"]
    write(root, names, jpeg(8, 8))
    f = ImageFolder(root, progress=False)
    assert f.files == torchvision_order(root)
    assert [p for p, _ in f.files] == [
        "a/B.JPG", "a/a.jpg", "a/b/x.jpg", "a/b-c/y.jpg", "a/b/z/w.PNG", "b/q/r.webp",
    ]  # fmt: skip
    assert f.class_to_idx == {"a": 0, "b": 1}


def test_empty_class_is_refused_or_kept(tmp_path: Path) -> None:
    root = tmp_path / "e"
    write(root, ["cat/a.jpg", "dog/notes.txt", "emu/b.jpg"], jpeg(8, 8))
    (root / "fox").mkdir()
    with pytest.raises(SourceError, match=r"\['dog', 'fox'\] hold no image.*allow_empty=True"):
        ImageFolder(root, progress=False)
    with pytest.raises(SourceError, match="hold no image"):
        chute.convert(root, tmp_path / "x.chute", progress=False)
    f = ImageFolder(root, progress=False, allow_empty=True)
    assert f.classes == ["cat", "dog", "emu", "fox"] and f.files == [
        ("cat/a.jpg", 0),
        ("emu/b.jpg", 2),
    ]


def test_hidden_entries_and_stray_files_are_ignored(tmp_path: Path) -> None:
    root = tmp_path / "h"
    write(root, ["cat/a.jpg", "cat/._a.jpg", "dog/b.jpg", "dog/.cache/c.jpg"], jpeg(8, 8))
    write(root, [".ipynb_checkpoints/x-checkpoint.jpg"], jpeg(8, 8))
    np.save(root / "features.npy", np.zeros((3, 4)))  # a stray array beside the classes
    (root / "README.md").write_text("hi")
    from chute.conversion import source_kind
    from chute.sources.image_folder_source import ImageFolderSource

    assert source_kind(root) is ImageFolderSource  # more images than .npy files
    dst = chute.convert(root, tmp_path / "h.chute", progress=False, num_workers=0)
    ds = chute.open(dst)
    assert [ds[i]["path"] for i in range(len(ds))] == ["cat/a.jpg", "dog/b.jpg"]
    assert [int(ds[i]["label"]) for i in range(len(ds))] == [0, 1]
    assert ds.metadata["classes"] == ["cat", "dog"]
    assert ds.metadata["class_to_idx"] == {"cat": 0, "dog": 1}
    assert ds.metadata["ignored"] == [
        ".ipynb_checkpoints/", "README.md", "features.npy", "cat/._a.jpg", "dog/.cache/",
    ]  # fmt: skip
    np.save(root / "more.npy", np.zeros(3))
    np.save(root / "cat" / "x.npy", np.zeros(3))  # now more .npy files than images
    assert source_kind(root).__name__ == "NpyFolderSource"


def test_flat_folder_of_images(tmp_path: Path) -> None:
    root = tmp_path / "flat"
    write(root, ["b.jpg", "a.PNG", "sub/c.jpg", "notes.txt"], jpeg(8, 8))
    ds = chute.open(chute.convert(root, tmp_path / "f.chute", progress=False))
    assert set(ds.schema) == {"image", "path"}
    assert [ds[i]["path"] for i in range(len(ds))] == ["a.PNG", "b.jpg", "sub/c.jpg"]
    assert ds.metadata["classes"] == [] and ds.metadata["ignored"] == ["notes.txt"]


def test_cli_image_options(tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from chute.cli import main

    truncate(tree)
    dst = tmp_path / "cli.chute"
    argv = ["convert", str(tree), str(dst), "-q", "--max-side", "40", "--quality", "80"]
    assert main([*argv, "--workers", "2"]) == 1
    assert "h_truncated.jpg" in capsys.readouterr().err
    assert main([*argv, "--on-error", "skip", "--workers", "0"]) == 0
    ds = chute.open(dst)
    assert ds.schema["image"] == chute.fields.Image(40, 80) and len(ds) == 7
    assert [s["path"] for s in ds.metadata["skipped"]] == ["dog/h_truncated.jpg"]
    assert main(["convert", str(tree), str(tmp_path / "n.chute"), "-q", "--nulls", "fill"]) == 1
    assert "['nulls'] do not apply to an image folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["convert", "--help"])
    assert "image folder" in capsys.readouterr().out
