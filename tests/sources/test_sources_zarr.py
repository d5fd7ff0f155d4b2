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


def _pickle_store(root, marker, consolidated=False):
    """A Zarr v2 group whose array ``x`` uses the pickle codec; unpickling makes ``marker``."""
    import json
    import os
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    values = np.empty(2, dtype=object)
    values[:] = [Evil(), 1]
    meta = {
        "zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "|O", "compressor": None,
        "fill_value": None, "filters": [{"id": "pickle", "protocol": 5}], "order": "C",
    }  # fmt: skip
    root.mkdir()
    (root / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    if consolidated:  # the array's own .zarray looks harmless; .zmetadata (which zarr prefers) not
        entries = {".zgroup": {"zarr_format": 2}, "x/.zarray": meta}
        (root / ".zmetadata").write_text(json.dumps({"metadata": entries}))
        meta = {**meta, "dtype": "<f8", "filters": None}
    (root / "x").mkdir()
    (root / "x" / ".zarray").write_text(json.dumps(meta))
    (root / "x" / "0").write_bytes(pickle.dumps(values, protocol=5))


@pytest.mark.parametrize("consolidated", [False, True])
def test_pickle_codec_refused_before_opening(tmp_path, consolidated):
    marker = tmp_path / "PWNED"
    _pickle_store(tmp_path / "evil.zarr", marker, consolidated)
    with pytest.raises(
        SourceError,
        match=r"evil\.zarr: x/\.zarray: uses the 'pickle' codec"
        if not consolidated
        else r"\.zmetadata: uses the 'pickle' codec",
    ):
        chute.convert(tmp_path / "evil.zarr", tmp_path / "o.chute", progress=False)
    assert not marker.exists()
    assert not (tmp_path / "o.chute").exists()


def test_pickle_codec_refused_in_zip(tmp_path):
    import shutil

    _pickle_store(tmp_path / "evil.zarr", tmp_path / "PWNED")
    shutil.make_archive(str(tmp_path / "evil"), "zip", tmp_path / "evil.zarr")
    with pytest.raises(SourceError, match=r"evil\.zip: x/\.zarray: uses the 'pickle' codec"):
        ZarrSource(tmp_path / "evil.zip")
    assert not (tmp_path / "PWNED").exists()


def test_object_arrays_refused_strings_kept(tmp_path):
    import json

    path = tmp_path / "o.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=2)
    g.create_array("s", shape=(3,), dtype=str)[:] = np.array(["a", "b", "c"])
    ZarrSource(path).close()  # vlen-utf8 strings are fine
    meta = json.loads((path / "s" / ".zarray").read_text())
    meta["filters"] = [{"id": "msgpack2"}]
    (path / "s" / ".zarray").write_text(json.dumps(meta))
    with pytest.raises(SourceError, match=r"s/\.zarray: holds Python objects"):
        ZarrSource(path)


def test_attributes_naming_pickle_are_data(tmp_path):
    path = tmp_path / "a.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=3)
    g.attrs["codec"] = {"name": "pickle", "dtype": "|O"}
    g.create_array("x", shape=(3,), dtype="i4")[:] = 1
    with ZarrSource(path) as src:
        assert src.metadata["zarr_attrs"]["/"]["codec"]["name"] == "pickle"
