"""chute.open / Dataset on real files: access, gather, out=, pad=, to_memory and safety checks."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import MIXED_SCHEMA

import chute
from chute.errors import (
    ChecksumError,
    DatasetNotFoundError,
    FormatError,
    SampleIndexError,
    SchemaError,
    UnsafePathError,
    VersionError,
)


def mapped_files(root: Path) -> set[str]:
    """Files under ``root`` that this process has memory-mapped right now."""
    root_s = os.path.realpath(root)
    with open("/proc/self/maps") as f:
        return {line.split()[-1] for line in f if root_s in line}


def edit_manifest(path: Path, change) -> None:
    manifest = json.loads((path / "chute.json").read_text())
    change(manifest)
    (path / "chute.json").write_text(json.dumps(manifest))


# ---------------------------------------------------------------------------- access


def test_open_reads_only_the_manifest(mixed):
    path, _ = mixed
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("needs /proc/self/maps (Linux)")
    ds = chute.open(path)
    assert len(ds) == 12 and ds.path == path and ds.metadata == {"n": 12}
    assert mapped_files(path) == set()
    ds[0]
    assert str(path / "x.npy") in mapped_files(path)
    ds.close()
    del ds
    assert mapped_files(path) == set()


def test_samples_and_schema(mixed_parts, check_sample):
    path, samples = mixed_parts
    ds = chute.open(path)
    assert ds.schema == MIXED_SCHEMA
    for i, sample in enumerate(samples):
        check_sample(ds[i], sample)
        check_sample(ds[i - len(samples)], sample)
    assert [s["label"] for s in ds] == [ds[i]["label"] for i in range(len(ds))]
    assert "12 samples" in repr(ds)


def test_fixed_fields_are_zero_copy_private_views(mixed):
    path, _ = mixed
    ds = chute.open(path)
    a, b = ds[3]["x"], ds[3]["x"]
    assert a.data_ptr() == b.data_ptr()  # both view the same mapped page
    assert ds[2:5]["x"].data_ptr() == ds[2]["x"].data_ptr()  # a slice in one part too
    before = (path / "x.npy").read_bytes()
    a += 100  # writes to the private map never reach the file
    assert (path / "x.npy").read_bytes() == before
    assert float(chute.open(path)[3]["x"][0, 0]) == 18.0


def test_out_of_range_and_bad_keys(mixed):
    ds = chute.open(mixed[0])
    for i in (12, -13, 2**40):
        with pytest.raises(SampleIndexError, match=f"index {i} is out of range .*12 samples"):
            ds[i]
    with pytest.raises(IndexError):  # a builtin IndexError too
        ds[12]
    with pytest.raises(TypeError):
        ds[1.0]
    with pytest.raises(TypeError):
        ds["x"]


@pytest.mark.parametrize(
    "key", [slice(2, 7), slice(None, None, 3), slice(10, 2, -2), slice(5, 5), slice(-3, None)]
)
def test_slices_equal_gathers(mixed_parts, key):
    ds = chute.open(mixed_parts[0])
    got, want = ds[key], ds.gather(np.arange(12)[key])
    assert torch.equal(got["x"], want["x"]) and torch.equal(got["label"], want["label"])
    assert got["text"] == want["text"]
    for name in ("tokens", "image", "blob"):
        assert [t.tolist() for t in got[name].tolist()] == [t.tolist() for t in want[name].tolist()]


# ---------------------------------------------------------------------------- gather


@pytest.mark.parametrize("indices", [[5, 0, 5, 11, 3], np.array([7, 7]), torch.tensor([-1, 2])])
def test_gather_order_and_repeats(mixed_parts, indices, check_sample):
    path, samples = mixed_parts
    ds = chute.open(path)
    batch = ds.gather(indices)
    order = [int(i) for i in indices]
    assert batch["x"].shape == (len(order), 2, 3)
    assert batch["text"] == [samples[i]["text"] for i in order]
    for k, i in enumerate(order):
        got = {
            "x": batch["x"][k],
            "label": batch["label"][k],
            "tokens": batch["tokens"].sample(k),
            "image": batch["image"].sample(k),
            "blob": batch["blob"].sample(k),
            "text": batch["text"][k],
        }
        check_sample(got, samples[i])


def test_gather_empty(mixed_parts):
    batch = chute.open(mixed_parts[0]).gather([])
    assert batch["x"].shape == (0, 2, 3) and batch["text"] == []
    assert batch["tokens"].offsets.tolist() == [0]
    assert batch["image"].shapes.shape == (0, 3)


@pytest.mark.parametrize(
    ("indices", "error", "match"),
    [
        ([0, 12], SampleIndexError, "index 12 is out of range"),
        ([-13], SampleIndexError, "index -13 is out of range"),
        ([0.0, 1.0], SampleIndexError, "1-D array of ints"),
        ([[0, 1]], SampleIndexError, "1-D array of ints"),
        (np.array([True, False]), SampleIndexError, "1-D array of ints"),
    ],
)
def test_gather_bad_indices(mixed, indices, error, match):
    with pytest.raises(error, match=match):
        chute.open(mixed[0]).gather(indices)


def test_fields_selection(mixed):
    path, _ = mixed
    ds = chute.open(path, fields=["label", "text"])
    assert list(ds.schema) == ["label", "text"]
    assert set(ds[0]) == {"label", "text"} and set(ds.gather([1])) == {"label", "text"}
    with pytest.raises(SchemaError, match=r"no field\(s\) \['nope'\]; the dataset has"):
        chute.open(path, fields=["label", "nope"])
    with pytest.raises(SchemaError, match="not a string"):
        chute.open(path, fields="label")
    assert pickle.loads(pickle.dumps(ds)).schema == ds.schema


def test_fields_selection_skips_broken_unselected_files(mixed):
    path, _ = mixed
    os.truncate(path / "x.npy", 10)
    assert chute.open(path, fields=["label"]).gather([1])["label"].tolist() == [1]


# ---------------------------------------------------------------------------- out= and pad=


def test_gather_into_preallocated_buffers(mixed_parts):
    path, samples = mixed_parts
    ds = chute.open(path)
    out = ds.empty_batch(8)
    assert set(out) == {"x", "label"}  # fixed fields only
    assert out["x"].shape == (8, 2, 3) and out["x"].dtype == torch.float32
    batch = ds.gather([11, 0, 6], out=out)
    assert batch["x"].data_ptr() == out["x"].data_ptr() and batch["x"].shape == (3, 2, 3)
    assert torch.equal(out["label"][:3], torch.tensor([2, 0, 0]))
    assert np.array_equal(out["x"][0].numpy(), samples[11]["x"])
    assert batch["text"] == [samples[i]["text"] for i in (11, 0, 6)]  # others as usual
    only = ds.gather([4], out={"label": out["label"]})  # a subset of fields may be given
    assert only["label"].data_ptr() == out["label"].data_ptr() and only["x"].shape == (1, 2, 3)


def test_gather_out_bfloat16(tmp_path):
    x = torch.randn(10, 4).bfloat16()
    chute.write(tmp_path / "d.chute", {"x": x})
    ds = chute.open(tmp_path / "d.chute")
    out = ds.empty_batch(4)
    assert out["x"].dtype == torch.bfloat16
    assert torch.equal(ds.gather([9, 1], out=out)["x"], x[[9, 1]])


@pytest.mark.parametrize(
    "buffer",
    [
        torch.empty(2, 2, 3),  # too few rows
        torch.empty(8, 2, 3, dtype=torch.float64),  # wrong dtype
        torch.empty(8, 3, 2),  # wrong shape
        torch.empty(8, 3, 2).transpose(1, 2),  # not contiguous
    ],
)
def test_gather_out_mismatch(mixed, buffer):
    with pytest.raises(SchemaError, match=r"out\['x'\]"):
        chute.open(mixed[0]).gather([0, 1, 2], out={"x": buffer})


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA for pinned memory")
def test_gather_into_pinned_buffers(mixed):
    ds = chute.open(mixed[0])
    out = ds.empty_batch(4, pin_memory=True)
    assert out["x"].is_pinned()
    batch = ds.gather([3, 1], out=out)
    assert batch["x"].is_pinned() and batch["x"].data_ptr() == out["x"].data_ptr()


def test_pad(tmp_path):
    tokens = [np.arange(n, dtype=np.int32) + 1 for n in (3, 0, 5, 1)]
    boxes = [np.ones((n, 4), np.float32) * n for n in (1, 2, 0, 3)]
    chute.write(tmp_path / "d.chute", {"t": tokens, "b": boxes, "raw": [b"ab", b"", b"c", b""]})
    ds = chute.open(tmp_path / "d.chute")
    assert ds.schema["b"] == chute.Ragged("float32", (4,))
    batch = ds.gather([2, 1, 0], pad=-1)
    assert batch["t"].tolist() == [[1, 2, 3, 4, 5], [-1] * 5, [1, 2, 3, -1, -1]]
    assert batch["t_lengths"].tolist() == [5, 0, 3]
    assert batch["b"].shape == (3, 2, 4) and batch["b_lengths"].tolist() == [0, 2, 1]
    assert batch["b"][0].eq(-1).all() and batch["b"][1].eq(2).all()
    assert batch["raw"].dtype == torch.uint8 and batch["raw"].tolist() == [
        [99, 255],
        [255] * 2,
        [97, 98],
    ]


def test_pad_variable_dims(tmp_path):
    images = [np.full((h, w, 3), h * 10 + w, np.uint8) for h, w in ((2, 3), (4, 1), (1, 5))]
    chute.write(tmp_path / "d.chute", {"im": images})
    ds = chute.open(tmp_path / "d.chute")
    assert ds.schema["im"] == chute.Ragged("uint8", (None, 3))
    batch = ds.gather([2, 0, 1], pad=0)
    assert batch["im"].shape == (3, 4, 5, 3)
    assert batch["im_lengths"].tolist() == [[1, 5, 3], [2, 3, 3], [4, 1, 3]]
    for row, i in enumerate([2, 0, 1]):
        h, w, _ = images[i].shape
        dense = batch["im"][row]
        assert torch.equal(dense[:h, :w], torch.from_numpy(images[i]))
        assert dense.sum() == int(images[i].sum())  # everything else is padding


# ---------------------------------------------------------------------------- to_memory, pickle


def test_to_memory_is_independent_of_the_files(mixed_parts, check_sample):
    path, samples = mixed_parts
    mem = chute.open(path).to_memory()
    shutil.rmtree(path)
    assert len(mem) == 12
    for i, sample in enumerate(samples):
        check_sample(mem[i], sample)
    assert mem.gather([11, 0])["text"] == [samples[11]["text"], samples[0]["text"]]


def test_pickle_is_small_and_reopens(tmp_path):
    chute.write(tmp_path / "d.chute", {"x": np.zeros((2000, 256), np.float32)})
    ds = chute.open(tmp_path / "d.chute")
    ds[0]  # mapped files are not pickled
    blob = pickle.dumps(ds)
    assert len(blob) < 1000
    again = pickle.loads(blob)
    assert len(again) == 2000 and torch.equal(again[5]["x"], ds[5]["x"])


def test_torch_dataloader_accepts_a_dataset(mixed):
    ds = chute.open(mixed[0], fields=["x", "label"])
    loader = torch.utils.data.DataLoader(ds, batch_size=5)
    labels = torch.cat([b["label"] for b in loader])
    assert labels.tolist() == [i % 3 for i in range(12)]


def test_context_manager_and_close(mixed):
    with chute.open(mixed[0]) as ds:
        first = ds[0]["x"].clone()
    assert torch.equal(ds[0]["x"], first)  # a closed dataset maps again on use


def test_nbytes_counts_the_files(mixed_parts):
    path, _ = mixed_parts
    ds = chute.open(path)
    on_disk = sum(p.stat().st_size for p in path.rglob("*.npy"))
    assert ds.nbytes == on_disk
    assert chute.open(path, fields=["label"]).nbytes < on_disk


# ---------------------------------------------------------------------------- safety


def test_missing_dataset_and_manifest(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="no such dataset") as info:
        chute.open(tmp_path / "nope.chute")
    assert isinstance(info.value, FileNotFoundError)
    (tmp_path / "half.chute").mkdir()
    with pytest.raises(DatasetNotFoundError, match=r"no chute\.json"):
        chute.open(tmp_path / "half.chute")


@pytest.mark.parametrize("version", [2, 0, "1", None])
def test_unknown_format_version(mixed, version):
    path, _ = mixed
    edit_manifest(path, lambda m: m.update(version=version))
    with pytest.raises(VersionError, match=f"format version {version!r} is not supported"):
        chute.open(path)


@pytest.mark.parametrize("text", ["{", "[]", "", '{"format": "chute", "format": "x"}'])
def test_garbage_manifest(mixed, text):
    path, _ = mixed
    (path / "chute.json").write_text(text)
    with pytest.raises(FormatError, match=r"chute\.json"):
        chute.open(path)


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m["parts"][0].update(name="../.."),
        lambda m: m["parts"][0].update(name="/tmp"),
        lambda m: m["fields"].update({"../../outside": m["fields"].pop("x")}),
    ],
)
def test_manifest_paths_leaving_the_folder(mixed, change):
    path, _ = mixed
    edit_manifest(path, change)
    with pytest.raises(UnsafePathError):
        chute.open(path)


def test_symlink_out_of_the_folder(mixed, tmp_path):
    path, _ = mixed
    outside = tmp_path / "outside.npy"
    shutil.move(path / "x.npy", outside)
    (path / "x.npy").symlink_to(outside)
    with pytest.raises(UnsafePathError, match=r"x\.npy resolves to .*outside the dataset") as info:
        chute.open(path)
    assert isinstance(info.value, PermissionError)


def test_symlinks_inside_the_folder_are_fine(mixed, tmp_path, check_sample):
    path, samples = mixed
    (path / "x.npy").rename(path / "x-real.npy")
    (path / "x.npy").symlink_to("x-real.npy")
    link = tmp_path / "link.chute"
    link.symlink_to(path)  # the dataset folder itself may be a link
    check_sample(chute.open(link)[4], samples[4])


@pytest.mark.parametrize("name", ["x.npy", "tokens.values.npy", "image.shapes.npy"])
@pytest.mark.parametrize("delta", [-1, -8, 4])
def test_truncated_or_extended_file_fails_at_open(mixed, name, delta):
    path, _ = mixed
    os.truncate(path / name, (path / name).stat().st_size + delta)
    with pytest.raises(FormatError, match=rf"{name}.* bytes but the manifest says"):
        chute.open(path)


def test_missing_data_file(mixed):
    path, _ = mixed
    (path / "tokens.offsets.npy").unlink()
    with pytest.raises(FormatError, match=r"tokens\.offsets\.npy is missing"):
        chute.open(path)


def _patch_header(file: Path, old: bytes, new: bytes) -> None:
    raw = file.read_bytes()
    assert len(old) == len(new) and raw.count(old) == 1
    file.write_bytes(raw.replace(old, new))


def test_header_that_disagrees_with_the_manifest(mixed):
    path, _ = mixed
    _patch_header(path / "x.npy", b"'<f4'", b"'<i4'")
    ds = chute.open(path)  # sizes agree; the header is checked when the file is first mapped
    with pytest.raises(FormatError, match=r"x\.npy: holds \(12, 2, 3\) int32 but the manifest"):
        ds[0]


def test_object_header_is_never_unpickled(mixed):
    path, _ = mixed
    _patch_header(path / "label.npy", b"'<i8'", b"'|O' ")
    with pytest.raises(FormatError, match=r"label\.npy: dtype object is refused"):
        chute.open(path)[0]


def test_corrupt_offsets(mixed):
    path, _ = mixed
    file = path / "tokens.offsets.npy"
    offsets = np.load(file)
    offsets[5] = offsets[6] + 1  # goes backwards
    raw = file.read_bytes()
    file.write_bytes(raw[: len(raw) - offsets.nbytes] + offsets.tobytes())
    with pytest.raises(FormatError, match=r"tokens\.offsets\.npy"):
        chute.open(path).gather([5])


def test_verify_detects_a_flipped_byte(mixed_parts):
    path, _ = mixed_parts
    assert chute.verify(path) == chute.open(path).nbytes
    file = path / "part-00001" / "image.values.npy"
    raw = bytearray(file.read_bytes())
    raw[-1] ^= 0x01
    file.write_bytes(bytes(raw))
    chute.open(path).gather([7])  # same size, valid header: only the checksum tells
    with pytest.raises(ChecksumError, match=r"1 file\(s\): .*part-00001/image\.values\.npy"):
        chute.verify(path)
