"""from_torch: a map-style Dataset with a Python decode step, run in 2 worker processes."""

from __future__ import annotations

import io
import multiprocessing as mp
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from image._image_files import picture
from PIL import Image
from torch.utils.data import Dataset, IterableDataset

import chute


def png(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


class Decode(Dataset):
    """PNG bytes decoded per sample with PIL, as a file-per-sample dataset would."""

    def __init__(self, n: int, varying: bool = False, fail_at: int | None = None):
        rng = np.random.default_rng(0)
        hw = [(8 + (i % 5 if varying else 0), 6) for i in range(n)]
        self.arrays = [rng.integers(0, 255, (*s, 3), dtype=np.uint8) for s in hw]
        self.encoded = [png(a) for a in self.arrays]
        self.fail_at = fail_at

    def __len__(self) -> int:
        return len(self.encoded)

    def __getitem__(self, i: int):
        if i == self.fail_at:
            raise ValueError(f"corrupt file {i}")
        img = Image.open(io.BytesIO(self.encoded[i]))
        img.load()
        return img, i, {"pid": os.getpid()}


def test_two_workers_equal_one_process(tmp_path):
    data = Decode(70)
    kw = dict(names=("image", "label", "info"), batch_size=8, progress=False)
    multi = chute.from_torch(data, tmp_path / "w2.chute", num_workers=2, **kw)
    single = chute.from_torch(data, tmp_path / "w0.chute", num_workers=0, **kw)
    with chute.open(multi) as a, chute.open(single) as b:
        assert a.schema["image"] == chute.fields.Tensor((8, 6, 3), "uint8")
        np.testing.assert_array_equal(a[0:70]["image"].numpy(), np.stack(data.arrays))
        np.testing.assert_array_equal(a[0:70]["label"].numpy(), np.arange(70))
        np.testing.assert_array_equal(a[0:70]["image"].numpy(), b[0:70]["image"].numpy())
        pids = set(a[0:70]["info/pid"].tolist())
    assert len(pids) == 2 and os.getpid() not in pids  # decoded in two worker processes


def test_varying_shapes_become_ragged(tmp_path):
    data = Decode(23, varying=True)
    out = chute.from_torch(
        data, tmp_path / "o.chute", num_workers=2, batch_size=4, fields=None, progress=False
    )
    with chute.open(out) as ds:
        assert ds.schema["0"] == chute.Ragged("uint8", (6, 3))
        for i in (0, 4, 22):
            np.testing.assert_array_equal(ds[i]["0"].numpy(), data.arrays[i])


def test_dict_and_tensor_samples(tmp_path):
    class Dicts(Dataset):
        def __len__(self):
            return 9

        def __getitem__(self, i):
            return {"x": torch.full((2,), float(i)), "drop": 0}

    out = chute.from_torch(
        Dicts(), tmp_path / "o.chute", num_workers=2, batch_size=2, fields=["x"], progress=False
    )
    with chute.open(out) as ds:
        assert list(ds.schema) == ["x"] and float(ds[8]["x"][0]) == 8.0


def test_worker_error_reaches_the_caller_and_leaves_nothing(tmp_path):
    with pytest.raises(ValueError, match="corrupt file 13"):
        chute.from_torch(
            Decode(30, fail_at=13),
            tmp_path / "o.chute",
            num_workers=2,
            batch_size=4,
            progress=False,
        )
    assert list(tmp_path.iterdir()) == []
    assert mp.active_children() == []  # workers stopped now, not whenever the error is collected


class Stream(IterableDataset):
    def __iter__(self):
        return iter([{"x": np.float32(i)} for i in range(3)])


class NoLen(Dataset):
    def __getitem__(self, i: int):
        if i >= 3:
            raise IndexError(i)
        return {"x": np.float32(i)}


def test_datasets_without_len_point_to_from_iterable(tmp_path):
    with pytest.raises(chute.SourceError, match=r"<Stream> is an IterableDataset: .*from_iterable"):
        chute.from_torch(Stream(), tmp_path / "s.chute")
    with pytest.raises(chute.SourceError, match=r"<NoLen> has no len\(\): .*from_iterable"):
        chute.from_torch(NoLen(), tmp_path / "s.chute")
    assert not (tmp_path / "s.chute").exists()
    # what the message says works (convert() picks it by itself for an IterableDataset)
    for out in (
        chute.from_iterable(NoLen(), tmp_path / "n.chute", progress=False),
        chute.convert(Stream(), tmp_path / "i.chute", progress=False),
    ):
        with chute.open(out) as got:
            assert got[0:3]["x"].tolist() == [0.0, 1.0, 2.0]


def jpeg_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


class Encoded(Dataset):
    """JPEG bytes, a PIL image and a label per sample."""

    def __init__(self, n: int):
        self.arrays = [picture(10 + i, 12, seed=i) for i in range(n)]
        self.jpegs = [jpeg_bytes(a) for a in self.arrays]

    def __len__(self) -> int:
        return len(self.jpegs)

    def __getitem__(self, i: int):
        return {"jpg": self.jpegs[i], "pil": Image.fromarray(self.arrays[i]), "label": i}


def test_declared_image_fields_keep_jpeg_bytes_rest_inferred(tmp_path):
    pytest.importorskip("simplejpeg")
    data = Encoded(7)
    schema = {"jpg": chute.fields.Image(), "pil": chute.fields.Image(quality=95)}
    dst = chute.from_torch(
        data, tmp_path / "e.chute", num_workers=2, batch_size=3, schema=schema, progress=False
    )
    ds = chute.open(dst)
    assert ds.schema == {**schema, "label": chute.fields.Tensor((), "int64")}  # label inferred
    jpgs = ds.gather(np.arange(7))["jpg"]
    assert [bytes(jpgs[i].numpy()) for i in range(7)] == data.jpegs  # byte for byte
    for i in range(7):
        got = ds[i]["pil"].permute(1, 2, 0).numpy().astype(int)
        assert got.shape == data.arrays[i].shape and np.abs(got - data.arrays[i]).mean() < 12
    with pytest.raises(chute.SourceError, match=r"schema= names \['nope'\]"):
        chute.from_torch(
            data, tmp_path / "x.chute", num_workers=0, schema={"nope": chute.fields.Image()}
        )


def test_pil_images_without_a_declared_kind_warn(tmp_path):
    with pytest.warns(
        UserWarning,
        match=r"field 'pil' holds PIL images.*schema=\{'pil': chute\.fields\.Image\(\)\}",
    ):
        chute.from_torch(
            Encoded(3), tmp_path / "w.chute", num_workers=0, fields=["pil", "label"], progress=False
        )
    assert chute.open(tmp_path / "w.chute").schema["pil"] == chute.Ragged("uint8", (12, 3))


class FolderLike(Dataset):
    """What torchvision.datasets.ImageFolder holds and returns (torchvision is not a test
    dependency): root, classes, class_to_idx, samples, loader, transforms."""

    def __init__(self, root, transform=None):
        self.root, self.transform, self.target_transform = str(root), transform, None
        self.classes = sorted(p.name for p in root.iterdir())
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.samples = [
            (str(f), self.class_to_idx[c])
            for c in self.classes
            for f in sorted((root / c).iterdir())
        ]

    def loader(self, path):
        with open(path, "rb") as f:
            return Image.open(f).convert("RGB")  # torchvision's pil_loader: no format left

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, y = self.samples[i]
        img = self.loader(path)
        return (self.transform(img) if self.transform else img), y


def test_torchvision_style_folder_keeps_the_files_jpeg(tmp_path):
    pytest.importorskip("simplejpeg")
    data = Encoded(4)
    for i, b in enumerate(data.jpegs):
        (tmp_path / "imgs" / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        (tmp_path / "imgs" / f"c{i % 2}" / f"{i}.jpg").write_bytes(b)
    folder = FolderLike(tmp_path / "imgs")
    ds = chute.open(
        chute.from_torch(folder, tmp_path / "f.chute", names=("img", "y"), progress=False)
    )
    assert ds.schema == {"img": chute.fields.Image(), "y": chute.fields.Tensor((), "int64")}
    assert ds.metadata["classes"] == ["c0", "c1"] and ds.metadata["class_to_idx"] == {
        "c0": 0,
        "c1": 1,
    }
    imgs = ds.gather(np.arange(4))["img"]
    want = [(Path(p).read_bytes(), y) for p, y in folder.samples]
    assert [(bytes(imgs[i].numpy()), int(ds[i]["y"])) for i in range(4)] == want
    ds = chute.open(chute.convert(folder, tmp_path / "c.chute", progress=False))
    assert [ds[i]["path"] for i in range(4)] == ["c0/0.jpg", "c0/2.jpg", "c1/1.jpg", "c1/3.jpg"]
    flipped = FolderLike(
        tmp_path / "imgs", transform=lambda im: im.transpose(Image.FLIP_LEFT_RIGHT)
    )
    with pytest.warns(UserWarning, match="holds PIL images"):  # a transform: read by __getitem__
        chute.from_torch(
            flipped, tmp_path / "t.chute", num_workers=0, names=("img", "y"), progress=False
        )
