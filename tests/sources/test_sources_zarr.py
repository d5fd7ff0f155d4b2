"""Zarr sources: real v2 and v3 stores (folder, zip, sharded, nested) -> chute -> equal."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from zarr.storage import ZipStore

import chute
from chute.errors import SourceError
from chute.sniff import is_zarr
from chute.sources.zarr import ZarrSource

N = 300
rng = np.random.default_rng(1)
X = rng.random((N, 6), dtype=np.float32)
Y = np.arange(N, dtype=np.int64)
WORDS = [f"w{i}" for i in range(N)]


def fill(group: zarr.Group, fmt_version: int) -> None:
    group.create_array("x", shape=X.shape, chunks=(40, 6), dtype=X.dtype)[:] = X
    group.create_group("sub").create_array("y", shape=Y.shape, chunks=(25,), dtype=Y.dtype)[:] = Y
    group.create_array("const", shape=(4,), dtype="f8")[:] = 1.0
    if fmt_version == 3:
        group.create_array("w", shape=(N,), dtype=str)[:] = np.array(WORDS)


def check(out, fmt_version: int) -> None:
    with chute.open(out) as ds:
        batch = ds[0:N]
        np.testing.assert_array_equal(batch["x"].numpy(), X)
        np.testing.assert_array_equal(batch["sub/y"].numpy(), Y)
        assert "const" not in ds.schema
        if fmt_version == 3:
            assert batch["w"] == WORDS


@pytest.mark.parametrize("fmt_version", [2, 3])
def test_folder_store(tmp_path, fmt_version):
    path = tmp_path / "d.zarr"
    fill(zarr.open_group(path, mode="w", zarr_format=fmt_version), fmt_version)
    assert is_zarr(path)
    with pytest.warns(UserWarning, match=r"left out const \(4,\)"):
        out = chute.convert(path, tmp_path / "o.chute", progress=False)
    check(out, fmt_version)


@pytest.mark.parametrize("fmt_version", [2, 3])
def test_zip_store(tmp_path, fmt_version):
    path = tmp_path / "d.zip"
    store = ZipStore(path, mode="w")
    fill(zarr.open_group(store, mode="w", zarr_format=fmt_version), fmt_version)
    store.close()
    assert is_zarr(path)
    with pytest.warns(UserWarning, match=r"left out const \(4,\)"):
        out = chute.convert(path, tmp_path / "o.chute", progress=False)
    check(out, fmt_version)


def test_sharded_reads_whole_shards(tmp_path):
    path = tmp_path / "s.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=3)
    g.create_array("x", shape=X.shape, chunks=(10, 6), shards=(60, 6), dtype=X.dtype)[:] = X
    with ZarrSource(path, batch_bytes=5000) as src:
        ranges = src.ranges()
        assert all(r.start % 60 == 0 and len(r) <= 180 for r in ranges)
        assert len(ranges) > 1
    with chute.open(chute.convert(path, tmp_path / "o.chute", progress=False)) as ds:
        np.testing.assert_array_equal(ds[0:N]["x"].numpy(), X)


def test_single_array_store_is_named_after_it(tmp_path):
    path = tmp_path / "images.zarr"
    zarr.save_array(path, X, zarr_format=2)
    with ZarrSource(path) as src:
        assert src.schema == {"images": chute.Tensor((6,), "float32")}
    out = chute.convert(path, tmp_path / "o.chute", fields={"images": "x"}, progress=False)
    with chute.open(out) as ds:
        np.testing.assert_array_equal(ds[0:N]["x"].numpy(), X)


def test_not_a_store(tmp_path):
    (tmp_path / "empty.zarr").mkdir()
    (tmp_path / "empty.zarr" / "zarr.json").write_text("{not json")
    with pytest.raises(SourceError, match=r"empty\.zarr: cannot be opened as a Zarr store"):
        ZarrSource(tmp_path / "empty.zarr")


def test_open_array_and_attributes(tmp_path):
    path = tmp_path / "a.zarr"
    root = zarr.open_group(path, mode="w")
    root.attrs["about"] = {"n": 1}
    root.create_group("g").create_array("x", data=np.arange(6.0)).attrs["units"] = "m"
    with ZarrSource(zarr.open_group(path, mode="r")["g/x"]) as src:  # one array, by its name
        assert list(src.schema) == ["x"] and src.num_samples == 6
    with ZarrSource(path) as src:
        assert src.metadata == {"zarr_attrs": {"/": {"about": {"n": 1}}, "/g/x": {"units": "m"}}}
