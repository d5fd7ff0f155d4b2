"""Hostile sources for the converters: nothing in a source file runs code. Zarr metadata is
read as JSON before zarr opens the store (the pickle codec and object arrays refused), and
``.npy`` / ``.npz`` files are read with ``allow_pickle=False``. (Audited: no converter calls
``pickle``, ``eval`` or ``allow_pickle=True``; h5py, PIL and torch sources never unpickle.)"""

from __future__ import annotations

import json
import os
import pickle
import shutil

import numpy as np
import pytest
from _reliability import recorded

import chute
from chute.errors import SourceError

zarr = pytest.importorskip("zarr")
from chute.sources.zarr import ZarrSource  # noqa: E402

_row = recorded(
    {
        "test_pickle_codec_refused_before_opening": (
            "converter: Zarr pickle codec",
            "a v2 store whose array uses the pickle codec (its chunk's unpickling makes a "
            "folder), in .zarray or only in consolidated .zmetadata",
            "SourceError before zarr opens it; nothing unpickled, nothing written",
        ),
        "test_pickle_codec_refused_in_zip": (
            "converter: Zarr pickle codec",
            "the same store zipped",
            "SourceError; nothing unpickled",
        ),
        "test_object_arrays_refused_strings_kept": (
            "converter: Zarr object arrays",
            "an object array with msgpack2; a vlen-utf8 string array",
            "SourceError for objects; strings convert",
        ),
        "test_attributes_naming_pickle_are_data": (
            "converter: Zarr attributes",
            "user attributes that look like a pickle codec",
            "kept as data, not refused",
        ),
        "test_npy_object_array_is_never_unpickled": (
            "converter: npy / npz object arrays",
            "an object array whose unpickling makes a folder, as .npy and .npz",
            "SourceError; nothing unpickled",
        ),
    }
)


class Evil:
    """Unpickling it makes the folder ``marker``: proof that something was unpickled."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def _pickle_store(root, marker, consolidated=False):
    """A Zarr v2 group whose array ``x`` uses the pickle codec; unpickling makes ``marker``."""
    values = np.empty(2, dtype=object)
    values[:] = [Evil(marker), 1]
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
    _pickle_store(tmp_path / "evil.zarr", tmp_path / "PWNED")
    shutil.make_archive(str(tmp_path / "evil"), "zip", tmp_path / "evil.zarr")
    with pytest.raises(SourceError, match=r"evil\.zip: x/\.zarray: uses the 'pickle' codec"):
        ZarrSource(tmp_path / "evil.zip")
    assert not (tmp_path / "PWNED").exists()


def test_object_arrays_refused_strings_kept(tmp_path):
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


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_npy_object_array_is_never_unpickled(tmp_path, suffix):
    marker = tmp_path / "PWNED"
    values = np.empty(2, dtype=object)
    values[:] = [Evil(marker), 1]
    path = tmp_path / f"evil{suffix}"
    if suffix == ".npy":
        np.save(path, values, allow_pickle=True)
    else:
        np.savez(path, x=values, y=np.arange(2))
    with pytest.raises(SourceError):
        chute.convert(path, tmp_path / "o.chute", progress=False)
    assert not marker.exists()
