"""Converting unusual real zarr / h5py / npz files.

Each test builds the file the user had, converts it through ``chute.convert`` (or the CLI),
and states what should come out: the arrays as fields, or a ``SourceError`` naming what is
at fault, never a garbage dataset, a raw ``AttributeError`` / ``TypeError``, or an array
dropped without a warning.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from _faults import (
    recorded_case,  # noqa: F401 - autouse: records the case
    run_chute,
)

import chute


def _read(path: Path) -> dict[str, list]:
    ds = chute.open(path)
    out: dict[str, list] = {k: [] for k in ds.schema}
    for i in range(len(ds)):
        for k, v in ds[i].items():
            out[k].append(v if isinstance(v, str) else v.tolist())
    return out


# --------------------------------------------------------- a zarr Group object


def test_zarr_group_object_converts_like_its_path(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    store = tmp_path / "g.zarr"
    root = zarr.open_group(str(store), mode="w")
    root.create_array("a", shape=(10, 3), dtype="f4")[:] = np.arange(30, dtype="f4").reshape(10, 3)
    root.create_array("b", shape=(10,), dtype="i8")[:] = np.arange(10)
    by_path = chute.convert(store, tmp_path / "path.chute", progress=False)
    by_object = chute.convert(
        zarr.open_group(str(store), mode="r"), tmp_path / "obj.chute", progress=False
    )
    assert chute.open(by_object).schema == chute.open(by_path).schema
    assert _read(by_object) == _read(by_path)


# ------------------------------------------ HDF5 compound with a string member


def _compound_file(path: Path, member_dtype) -> Path:
    h5py = pytest.importorskip("h5py")
    dt = np.dtype([("id", "i4"), ("name", member_dtype), ("xy", "f4", (2,))])
    rec = np.zeros(5, dt)
    rec["id"] = np.arange(5)
    rec["name"] = [f"n{i}" for i in range(5)]  # str into "S8" is encoded as ASCII
    rec["xy"] = np.arange(10).reshape(5, 2)
    with h5py.File(path, "w") as f:
        f.create_dataset("rec", data=rec)
    return path


def _vlen_str():
    h5py = pytest.importorskip("h5py")
    return h5py.string_dtype()


@pytest.mark.parametrize("member", ["vlen_str", "fixed_bytes"])
def test_hdf5_compound_with_string_member_splits(tmp_path: Path, member: str) -> None:
    """``split_compound=True`` over a compound with a string member: fields ``rec/id``,
    ``rec/name``, ``rec/xy`` (never an ``AttributeError`` from inside the converter)."""
    dtype = _vlen_str() if member == "vlen_str" else "S8"
    src = _compound_file(tmp_path / "c.h5", dtype)
    dst = chute.convert(src, tmp_path / "c.chute", split_compound=True, progress=False)
    got = _read(dst)
    assert set(got) == {"rec/id", "rec/name", "rec/xy"}
    assert got["rec/id"] == list(range(5))
    names = [n if isinstance(n, str) else bytes(n).decode() for n in got["rec/name"]]
    assert names == [f"n{i}" for i in range(5)]


@pytest.mark.slow  # a fresh interpreter
def test_cli_split_compound_with_string_member_no_traceback(tmp_path: Path) -> None:
    src = _compound_file(tmp_path / "c.h5", _vlen_str())
    proc = run_chute("convert", "-q", "--split-compound", str(src), str(tmp_path / "c.chute"))
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr


# --------------------------------------------------------- HDF5 null dataspace


def test_hdf5_null_dataspace_left_out_with_warning(tmp_path: Path) -> None:
    h5py = pytest.importorskip("h5py")
    src = tmp_path / "e.h5"
    with h5py.File(src, "w") as f:
        f["x"] = np.arange(30, dtype="f4").reshape(10, 3)
        f["nothing"] = h5py.Empty("f")
    with pytest.warns(UserWarning, match="nothing"):
        dst = chute.convert(src, tmp_path / "e.chute", progress=False)
    assert set(chute.open(dst).schema) == {"x"}


# --------------------------------------------- HDF5 lengths, links, open files


def test_hdf5_zero_row_dataset_is_never_the_sample_axis(tmp_path: Path) -> None:
    """x (10, 3) and an empty (0,) dataset: x's 10 rows are the samples (not a 1-1 tie)."""
    h5py = pytest.importorskip("h5py")
    src = tmp_path / "z.h5"
    with h5py.File(src, "w") as f:
        f["x"] = np.arange(30, dtype="f4").reshape(10, 3)
        f["empty"] = np.zeros((0,), "f4")
    with pytest.warns(UserWarning, match="empty"):
        dst = chute.convert(src, tmp_path / "z.chute", progress=False)
    ds = chute.open(dst)
    assert set(ds.schema) == {"x"} and len(ds) == 10


@pytest.mark.parametrize("link", ["soft", "external", "broken"])
def test_hdf5_links_skipped_with_a_warning(tmp_path: Path, link: str) -> None:
    h5py = pytest.importorskip("h5py")
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["y"] = np.arange(10)
    src = tmp_path / "l.h5"
    with h5py.File(src, "w") as f:
        f["x"] = np.arange(10)
        f["z"] = np.arange(10) * 2
        if link == "soft":
            f["lnk"] = h5py.SoftLink("/x")
        elif link == "external":
            f["lnk"] = h5py.ExternalLink(str(other), "/y")
        else:
            f["lnk"] = h5py.SoftLink("/does/not/exist")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dst = chute.convert(src, tmp_path / "l.chute", progress=False)
    messages = [str(w.message) for w in caught]
    assert any("lnk" in m for m in messages), f"link 'lnk' skipped silently: {messages}"
    assert {"x", "z"} <= set(chute.open(dst).schema)


def test_open_h5py_file_with_vlen_strings_converts_like_its_path(tmp_path: Path) -> None:
    """An open ``h5py.File`` as the source converts as its path does (vlen strings included)."""
    h5py = pytest.importorskip("h5py")
    src = tmp_path / "s.h5"
    with h5py.File(src, "w") as f:
        f["x"] = np.arange(4)
        f.create_dataset("s", data=["a", "bb", "ccc", "é"], dtype=h5py.string_dtype())
    by_path = chute.convert(src, tmp_path / "p.chute", progress=False)
    with h5py.File(src, "r") as f:
        by_object = chute.convert(f, tmp_path / "o.chute", progress=False)
    assert _read(by_object) == _read(by_path)
    assert _read(by_path)["s"] == ["a", "bb", "ccc", "é"]


# -------------------------------------------- Zarr attributes, structured .npz


def test_zarr_group_attributes_kept(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    store = tmp_path / "a.zarr"
    root = zarr.open_group(str(store), mode="w")
    root.attrs["description"] = "my zarr data"
    arr = root.create_array("x", shape=(4,), dtype="i8")
    arr[:] = np.arange(4)
    arr.attrs["units"] = "metres"
    dst = chute.convert(store, tmp_path / "a.chute", progress=False)
    meta = json.dumps(chute.open(dst).metadata)
    assert "my zarr data" in meta and "metres" in meta, f"attributes dropped: {meta}"


def _structured_npz(path: Path) -> Path:
    rec = np.zeros(6, [("a", "i4"), ("b", "f8")])
    rec["a"], rec["b"] = np.arange(6), np.arange(6) / 2
    np.savez(path, rec=rec, y=np.arange(6))
    return path


def test_structured_npz_refusal_names_members(tmp_path: Path) -> None:
    src = _structured_npz(tmp_path / "s.npz")
    with pytest.raises(chute.SourceError) as info:
        chute.convert(src, tmp_path / "s.chute", progress=False)
    msg = str(info.value)
    assert "'a'" in msg and "'b'" in msg and "split_compound" in msg, msg


def test_structured_npz_split_compound(tmp_path: Path) -> None:
    """docs/convert.md lists npz under compound splitting."""
    src = _structured_npz(tmp_path / "s.npz")
    dst = chute.convert(src, tmp_path / "s.chute", split_compound=True, progress=False)
    got = _read(dst)
    assert set(got) == {"rec/a", "rec/b", "y"}
    assert got["rec/b"] == [i / 2 for i in range(6)]
