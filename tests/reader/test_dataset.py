"""chute.open / Dataset on real files: access, gather, out=, pad=, to_memory and safety checks."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import shutil
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from _helpers import MIXED_SCHEMA

import chute
import chute.writer.commit
from chute.device import map_tensors
from chute.errors import (
    ArgumentError,
    ArgumentValueError,
    ChecksumError,
    DatasetChangedError,
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


def test_samples_are_fresh_copies_of_read_only_maps(mixed, check_sample):
    # An in-place op on what ds[i] / ds[a:b] return (a transform's x.sub_(mean)) must not
    # change later reads: not ds[i], not gather, not the Loader, not the file.
    path, samples = mixed
    before = {p.name: p.read_bytes() for p in path.glob("*.npy")}
    for ds in (chute.open(path), chute.open(path).to_memory()):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # torch.from_numpy of a read-only array warns
            one, many = ds[3], ds[2:5]
        one["x"].add_(100)
        one["tokens"].fill_(7)
        one["image"].zero_()
        many["x"].mul_(0)
        many["label"].fill_(9)
        many["tokens"].values.fill_(7)
        many["image"].shapes.fill_(0)
        assert one["x"].data_ptr() != ds[3]["x"].data_ptr()
        for i in (2, 3, 4):
            check_sample(ds[i], samples[i])
        assert torch.equal(ds.gather([3])["x"][0], torch.from_numpy(samples[3]["x"]))
        loader = chute.Loader(ds, batch_size=4, shuffle=False, num_workers=0)
        assert torch.equal(next(iter(loader))["label"], torch.tensor([0, 1, 2, 0]))
        col = ds._column(0, "x")[0]["data"]  # what gather reads from: a write cannot happen
        with pytest.raises(ValueError, match="read-only"):
            col[0] = 1
    assert {p.name: p.read_bytes() for p in path.glob("*.npy")} == before
    if os.path.exists("/proc/self/maps"):
        ds = chute.open(path)
        ds[0]
        with open("/proc/self/maps") as f:
            perms = {line.split()[1] for line in f if os.path.realpath(path) in line}
        assert perms and all("w" not in p for p in perms)  # mapped read-only, not private rw


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
    with pytest.raises(SchemaError, match=r"pad=-1 for field 'raw' \(uint8\).*\[0, 255\]"):
        ds.gather([2, 1, 0], pad=-1)  # never wrapped to 255
    batch = chute.open(tmp_path / "d.chute", fields=["t", "b"]).gather([2, 1, 0], pad=-1)
    assert batch["t"].tolist() == [[1, 2, 3, 4, 5], [-1] * 5, [1, 2, 3, -1, -1]]
    assert batch["t_lengths"].tolist() == [5, 0, 3]
    assert batch["b"].shape == (3, 2, 4) and batch["b_lengths"].tolist() == [0, 2, 1]
    assert batch["b"][0].eq(-1).all() and batch["b"][1].eq(2).all()
    batch = ds.gather([2, 1, 0], pad=255)
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


# ------------------------------------------------------ paths, replaced and rewritten datasets


def test_relative_path_survives_a_chdir(tmp_path, monkeypatch):
    # Hydra's job.chdir, or a script that cd's into its run folder after open().
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, value in ((a, 0), (b, 1)):
        folder.mkdir()
        monkeypatch.chdir(folder)
        chute.write("data.chute", {"x": np.full(4, value)})
    monkeypatch.chdir(a)
    ds = chute.open("data.chute")
    assert ds.path == a / "data.chute"
    monkeypatch.chdir(b)
    assert ds[0:4]["x"].tolist() == [0] * 4
    monkeypatch.chdir("/")
    assert pickle.loads(pickle.dumps(ds))[3]["x"].item() == 0


def _versioned(path: Path, value: int) -> None:
    with chute.Writer(path, part_size=16, overwrite=True) as w:
        w.extend({"x": np.full(64, value)})


def test_dataset_replaced_since_open_is_an_error(tmp_path):
    # Replaced (overwrite=True) between open() and the lazy map of part 1.
    path = tmp_path / "d.chute"
    _versioned(path, 0)
    ds = chute.open(path)
    assert ds.gather([0])["x"].tolist() == [0]  # part 0 is mapped: it stays the old data
    blob = pickle.dumps(ds)
    _versioned(path, 1)
    # The first ds[i] checks its files again: part 0, mapped before the replace,
    # is refused too, not served from the old maps while part 1 raises.
    with pytest.raises(DatasetChangedError, match=r"part-00000/x\.npy is not the file"):
        ds[0]
    with pytest.raises(DatasetChangedError, match=r"replaced or modified since chute\.open\(\)"):
        ds[20]
    again = pickle.loads(blob)  # a worker checks every file when it unpickles the dataset
    assert len(again) == 64  # and raises at its first read (where torch passes errors on)
    with pytest.raises(DatasetChangedError, match=r"part-00000/x\.npy is not the file"):
        again[0]
    with pytest.raises(DatasetChangedError):
        ds.to_memory()
    assert isinstance(DatasetChangedError("x"), FormatError)
    assert chute.open(path)[20]["x"].item() == 1  # opened again: the new data


def test_file_modified_or_removed_since_open(tmp_path):
    path = tmp_path / "d.chute"
    _versioned(path, 0)
    ds = chute.open(path)
    file = path / "part-00001" / "x.npy"
    os.utime(file, ns=(0, 0))  # same inode and size, other mtime: rewritten in place
    with pytest.raises(DatasetChangedError, match=r"part-00001/x\.npy"):
        ds[20]
    (path / "part-00002" / "x.npy").unlink()
    with pytest.raises(DatasetChangedError, match=r"part-00002/x\.npy"):
        ds[40]
    shutil.rmtree(path)
    with pytest.raises(DatasetChangedError):
        pickle.loads(pickle.dumps(ds)).gather([0])


def test_pickle_keeps_the_view_of_open_across_an_append(tmp_path):
    path = tmp_path / "d.chute"
    _versioned(path, 0)
    ds = chute.open(path)
    with chute.Writer(path, append=True) as w:  # the old files stay: not a replacement
        w.extend({"x": np.full(8, 5)})
    again = pickle.loads(pickle.dumps(ds))
    assert len(again) == len(ds) == 64 and again.gather([63])["x"].tolist() == [0]
    assert len(chute.open(path)) == 72


@pytest.mark.slow  # a spawned worker
def test_replaced_dataset_fails_in_a_spawned_worker(tmp_path):
    path = tmp_path / "d.chute"
    _versioned(path, 0)
    ds = chute.open(path, fields=["x"])
    _versioned(path, 1)
    loader = torch.utils.data.DataLoader(ds, num_workers=1, multiprocessing_context="spawn")
    with pytest.raises(DatasetChangedError, match="open the dataset again"):
        next(iter(loader))


def _replace_many_times(path: Path, times: int, atomic_swap: bool) -> None:
    if not atomic_swap:  # as where renameat2(RENAME_EXCHANGE) is refused (NFS: EINVAL)
        chute.writer.commit.exchange = lambda a, b: False
    for k in range(1, times + 1):  # sizes and part layouts differ from one version to the next
        with chute.Writer(
            path, overwrite=True, part_size=[None, 50][k % 2], metadata={"k": k}
        ) as w:
            w.extend({"x": np.full((100 + k, 4), k, np.int32)})


@pytest.mark.parametrize("atomic_swap", [True, False], ids=["exchange", "two-renames"])
def test_open_while_the_dataset_is_replaced(tmp_path, atomic_swap):
    # open() racing an overwrite=True never fails with a raw FileNotFoundError or a false
    # "x.npy is missing; the dataset is incomplete": each open either succeeds with one
    # version's manifest and files, or says "replaced";
    # with the atomic swap the dataset is always there, whole, so every open succeeds.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    if atomic_swap and not chute.writer.commit.exchange(tmp_path / "a", tmp_path / "b"):
        pytest.skip("no renameat2(RENAME_EXCHANGE) here")
    path = tmp_path / "d.chute"
    _replace_many_times(path, 1, True)
    writer = multiprocessing.get_context("fork").Process(
        target=_replace_many_times, args=(path, 60, atomic_swap)
    )
    writer.start()
    seen: Counter = Counter()
    while writer.is_alive() or not seen["read"]:  # (a busy machine may race it through)
        try:
            ds = chute.open(path)
        except DatasetChangedError as exc:
            assert not atomic_swap and "replaced while opening" in str(exc), exc
            seen["open: replaced"] += 1
            continue
        try:
            x = ds[:]["x"]
        except DatasetChangedError as exc:  # replaced since open(): its files are gone
            assert "replaced" in str(exc), exc
            seen["read: replaced"] += 1
            continue
        k = ds.metadata["k"]
        assert len(x) == 100 + k and (x == k).all()  # the manifest and files of one version
        seen["read"] += 1
    writer.join(30)
    assert writer.exitcode == 0 and seen["read"] > 0, seen


def test_pad_lengths_name_collision(tmp_path):
    path = chute.write(
        tmp_path / "d.chute", {"tokens": [np.arange(3), np.arange(2)], "tokens_lengths": [7, 7]}
    )
    ds = chute.open(path)
    with pytest.raises(SchemaError, match=r"'tokens_lengths'.*field 'tokens'.*fields="):
        ds.gather([0, 1], pad=0)
    assert ds.gather([0, 1])["tokens_lengths"].tolist() == [7, 7]  # no pad, no clash
    padded = chute.open(path, fields=["tokens"]).gather([0, 1], pad=0)
    assert padded["tokens_lengths"].tolist() == [3, 2]


@pytest.mark.parametrize(
    ("pad", "field", "match"),
    [
        ("x", "t", r"pad='x' for field 't' \(uint8\): pad= takes a number"),
        (1000, "t", r"pad=1000 .*\[0, 255\]"),
        (-1.5, "i", r"pad=-1\.5 for field 'i' \(int64\): needs an integer"),
        (float("nan"), "i", "needs an integer"),
        (2**63, "i", "needs an integer"),
        (1e6, "h", r"\(float16\): out of the dtype's range"),
        (1j, "h", "complex"),
    ],
)
def test_pad_must_fit_the_dtype(tmp_path, pad, field, match):
    values = {"t": np.zeros(2, np.uint8), "i": np.arange(2), "h": np.ones(2, np.float16)}
    chute.write(tmp_path / "d.chute", {k: [v, v[:1]] for k, v in values.items()})
    ds = chute.open(tmp_path / "d.chute", fields=[field])
    with pytest.raises(SchemaError, match=match):
        ds.gather([0, 1], pad=pad)


def test_pad_values_that_fit(tmp_path):
    chute.write(tmp_path / "d.chute", {"h": [np.ones(2, np.float16), np.ones(1, np.float16)]})
    ds = chute.open(tmp_path / "d.chute")
    for pad, want in (
        (float("-inf"), float("-inf")),
        (np.int8(-2), -2.0),
        (True, 1.0),
        (torch.tensor(0.5), 0.5),
    ):
        assert ds.gather([1, 0], pad=pad)["h"][0].tolist() == [1.0, want]


def test_index_types(mixed):
    ds = chute.open(mixed[0])
    want = ds[3]["label"]
    for key in (torch.tensor(3), np.int64(3), np.uint8(3), np.array(3), torch.tensor(-9)):
        assert torch.equal(ds[key]["label"], want), key
    for key in ([1, 2], (1, 2), np.array([1, 2]), torch.tensor([3]), range(2)):
        with pytest.raises(ArgumentError, match=r"ds\.gather\(indices\)") as info:
            ds[key]
        assert isinstance(info.value, TypeError)
    for key in (torch.tensor(True), torch.tensor(3.0), np.float32(1), None, True):
        with pytest.raises(ArgumentError, match="ints or slices"):
            ds[key]
    with pytest.raises(ArgumentError, match=r"ds\[i\]\['x'\]"):
        ds["x"]


def test_huge_indices_are_printed_as_given(mixed):
    ds = chute.open(mixed[0])
    with pytest.raises(SampleIndexError, match=f"index {2**63 + 1} is out of range"):
        ds.gather(np.array([0, 2**63 + 1], np.uint64))
    with pytest.raises(SampleIndexError, match=f"index {2**64 - 1} is out of range"):
        ds[np.uint64(2**64 - 1)]
    assert ds.gather(np.array([11, 0], np.uint32))["label"].tolist() == [2, 0]
    with pytest.raises(SampleIndexError, match="1-D array of ints"):
        ds.gather([[1], [1, 2]])


def test_open_path_types(mixed, monkeypatch):
    path, _ = mixed
    for bad in (None, 3, 1.5):
        with pytest.raises(ArgumentError, match=r"a dataset path is a str or os\.PathLike"):
            chute.open(bad)
    with pytest.raises(ArgumentValueError, match="path is empty"):
        chute.open("")
    assert len(chute.open(os.fsencode(path))) == 12
    monkeypatch.chdir(path.parent)
    assert chute.open(path.name.encode()).path == path


def test_contains_asks_for_a_field(mixed):
    ds = chute.open(mixed[0], fields=["x", "text"])
    assert "x" in ds and "text" in ds
    assert "label" not in ds and 3 not in ds and ["x"] not in ds


def test_gather_out_must_name_fixed_fields(mixed):
    ds = chute.open(mixed[0])
    buf = ds.empty_batch(4)
    for out, match in (
        ({**buf, "unknown": buf["x"]}, r"fixed-shape fields \['label', 'x'\].*'unknown'"),
        ({"tokens": buf["x"]}, r"got \['tokens'\]"),
        ([buf["x"]], "dict of buffers"),
        ({"x": buf["x"].numpy()}, r"out\['x'\] must be a CPU tensor .*got ndarray"),
    ):
        with pytest.raises(SchemaError, match=match):
            ds.gather([0, 1], out=out)


# ---------------------------------------------------------------------------- RaggedBatch


def test_ragged_batch_indexing_gives_samples(tmp_path):
    chute.write(tmp_path / "t.chute", {"tokens": [np.arange(n, dtype=np.int32) for n in (3, 1, 4)]})
    tok = chute.open(tmp_path / "t.chute").gather([0, 1, 2])["tokens"]
    assert len(tok) == 3
    assert tok[0].tolist() == [0, 1, 2] and tok[2].tolist() == [0, 1, 2, 3]
    assert tok[-1].tolist() == tok[2].tolist() == tok[np.int64(2)].tolist()
    assert tok[torch.tensor(1)].tolist() == [0]
    assert [t.tolist() for t in tok[1:]] == [[0], [0, 1, 2, 3]]
    with pytest.raises(SampleIndexError, match="sample 3 is out of range for a batch of 3"):
        tok[3]
    with pytest.raises(SampleIndexError):
        tok[-4]
    with pytest.raises(ArgumentError, match="int"):
        tok[1.0]
    # Iteration gives the samples; the parts are reached by name.
    a, b, c = tok
    assert [a.tolist(), b.tolist(), c.tolist()] == [[0, 1, 2], [0], [0, 1, 2, 3]]
    values, offsets, shapes = (getattr(tok, k) for k in tok._fields)
    assert values is tok.values and offsets is tok.offsets and shapes is None
    assert tok._asdict()["offsets"] is tok.offsets
    assert tok.tolist()[1].tolist() == [0]


def test_ragged_batch_through_torch_and_chute_helpers(tmp_path):
    images = [np.full((h, h, 3), h, np.uint8) for h in (1, 2)]
    chute.write(tmp_path / "i.chute", {"im": images})
    rb = chute.open(tmp_path / "i.chute").gather([1, 0])["im"]
    assert rb[0].shape == (2, 2, 3) and rb[1].shape == (1, 1, 3)
    for again in (
        map_tensors(rb, torch.clone),  # what to_device does
        torch.utils._pytree.tree_map(torch.clone, rb),
        pickle.loads(pickle.dumps(rb)),
    ):
        assert type(again) is chute.RaggedBatch and torch.equal(again[0], rb[0])
        assert torch.equal(again.shapes, rb.shapes)
    collated = torch.utils.data.default_collate([rb, rb])  # member by member, as for any tuple
    assert type(collated) is chute.RaggedBatch and collated.values.shape == (2, *rb.values.shape)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA for pinned memory")
def test_ragged_batch_pin_memory(tmp_path):
    from torch.utils.data._utils.pin_memory import pin_memory

    chute.write(tmp_path / "t.chute", {"t": [np.arange(n) for n in (3, 1)]})
    rb = chute.open(tmp_path / "t.chute").gather([0, 1])["t"]
    pinned = pin_memory(rb)
    assert type(pinned) is chute.RaggedBatch and pinned.values.is_pinned()
    assert pinned[0].tolist() == [0, 1, 2]
