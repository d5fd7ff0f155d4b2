"""numpy sources (.npy, .npz stored and compressed, folder of .npy, dict) and range planning."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import chute
from chute.errors import SchemaError, SourceError
from chute.sources.base import plan_ranges
from chute.sources.npy import MemorySource, NpySource, NpzSource

N = 400
X = np.arange(N * 6, dtype=">f8").reshape(N, 2, 3)  # big-endian: stored little-endian
Y = np.arange(N, dtype=np.uint16)


def read_all(path, n=N):
    with chute.open(path) as ds:
        return {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in ds[0:n].items()}


def test_npy_round_trip_in_small_batches(tmp_path):
    np.save(tmp_path / "x.npy", X)
    with NpySource(tmp_path / "x.npy", batch_bytes=1000) as src:
        assert src.schema == {"x": chute.fields.Tensor((2, 3), "float64")}
        assert [len(b["x"]) for b in src.batches()][:2] == [20, 20]
    got = read_all(chute.convert(tmp_path / "x.npy", tmp_path / "o.chute", progress=False))
    np.testing.assert_array_equal(got["x"], X)


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_npz(tmp_path, save):
    save(tmp_path / "a.npz", x=X, y=Y, mean=np.zeros(2))
    with pytest.warns(UserWarning, match=r"a\.npz: left out mean \(2,\)"):
        src = NpzSource(tmp_path / "a.npz", batch_bytes=4096, workers=2)
    with src:
        assert src.skipped == {"mean": (2,)}
        if save is np.savez:  # stored members are memory-mapped in place
            assert isinstance(src._arrays["x"], np.memmap)
        got = {k: np.concatenate(v) for k, v in _columns(src.batches()).items()}
    np.testing.assert_array_equal(got["x"], X)
    np.testing.assert_array_equal(got["y"], Y)
    with pytest.warns(UserWarning, match="left out mean"):
        path = chute.convert(tmp_path / "a.npz", tmp_path / "o.chute", progress=False)
    np.testing.assert_array_equal(read_all(path)["y"], Y)


def _columns(batches):
    out: dict[str, list] = {}
    for b in batches:
        for k, v in b.items():
            out.setdefault(k, []).append(v)
    return out


def test_folder_of_npy_with_nested_names(tmp_path):
    folder = tmp_path / "arrays"
    (folder / "meta").mkdir(parents=True)
    np.save(folder / "x.npy", X)
    np.save(folder / "meta" / "y.npy", Y)
    got = read_all(chute.convert(folder, tmp_path / "o.chute", progress=False))
    np.testing.assert_array_equal(got["x"], X)
    np.testing.assert_array_equal(got["meta/y"], Y)


def test_dict_of_arrays_tensors_and_strings(tmp_path):
    words = [f"s{i}" for i in range(N)]
    src = {"x": torch.from_numpy(X.astype("<f8")), "w": words, "y": Y}
    out = chute.convert(src, tmp_path / "o.chute", fields={"x": "x", "w": "text"}, progress=False)
    got = read_all(out)
    assert sorted(got) == ["text", "x"]
    np.testing.assert_array_equal(got["x"], X)
    assert got["text"] == words
    with pytest.raises(SourceError, match="bfloat16"):
        MemorySource({"b": torch.zeros(3, dtype=torch.bfloat16)})


def test_pickled_object_npy_is_refused(tmp_path):
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(
        SourceError, match=r"obj\.npy: cannot be memory-mapped.*never loads pickled"
    ):
        chute.convert(tmp_path / "obj.npy", tmp_path / "o.chute", progress=False)
    np.savez(tmp_path / "obj.npz", o=np.array([1, None], dtype=object))
    with pytest.raises(SourceError, match=r"obj\.npz: o\.npy.*refused"):
        NpzSource(tmp_path / "obj.npz")


def test_file_name_that_is_no_field_name(tmp_path):
    np.save(tmp_path / "my data.npy", Y)
    with pytest.raises(SchemaError, match=r"rename it with fields=\{'my data': 'name'\}"):
        NpySource(tmp_path / "my data.npy")
    with NpySource(tmp_path / "my data.npy", fields={"my data": "y"}) as src:
        assert list(src.schema) == ["y"]


def test_damaged_compressed_npz(tmp_path):
    np.savez_compressed(tmp_path / "a.npz", y=np.random.default_rng(0).random(20_000))
    raw = bytearray((tmp_path / "a.npz").read_bytes())
    (tmp_path / "cut.npz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(SourceError, match=r"cut\.npz: cannot be read as an \.npz"):
        NpzSource(tmp_path / "cut.npz")
    raw[len(raw) // 2 : len(raw) // 2 + 64] = bytes(64)  # the zip directory is intact
    (tmp_path / "bad.npz").write_bytes(raw)
    with pytest.raises(SourceError, match=r"bad\.npz: y\.npy: cannot be decompressed"):
        chute.convert(tmp_path / "bad.npz", tmp_path / "o.chute", progress=False)
    assert not (tmp_path / "o.chute").exists()


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(0, 5000),
    row_bytes=st.integers(1, 10_000),
    chunks=st.lists(st.integers(1, 500), max_size=3),
    batch_bytes=st.integers(1, 1 << 20),
)
def test_plan_ranges_cover_in_order_and_align(n, row_bytes, chunks, batch_bytes):
    ranges = plan_ranges(n, row_bytes, chunks, batch_bytes)
    assert [i for r in ranges for i in r] == list(range(n))
    if len(ranges) < 2:
        return
    step = len(ranges[0])
    assert all(len(r) == step for r in ranges[:-1])
    if chunks and math.lcm(*chunks) * row_bytes <= batch_bytes:
        assert step % math.lcm(*chunks) == 0  # every range starts on a chunk of every column
    assert step * row_bytes <= 4 * batch_bytes or step == 1


def test_compressed_structured_npz_splits(tmp_path):
    rec = np.zeros(5, [("a", "<i4"), ("b", "<f8", (2,))])
    rec["a"], rec["b"] = np.arange(5), np.arange(10).reshape(5, 2)
    np.savez_compressed(tmp_path / "r.npz", rec=rec)
    out = chute.convert(
        tmp_path / "r.npz", tmp_path / "r.chute", split_compound=True, progress=False
    )
    with chute.open(out) as ds:
        np.testing.assert_array_equal(ds[0:5]["rec/b"].numpy(), rec["b"])
        np.testing.assert_array_equal(ds[0:5]["rec/a"].numpy(), rec["a"])
