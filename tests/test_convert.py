"""chute.convert: source detection, destination rules, progress, and the `chute convert` CLI."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import zarr

import chute
from chute.cli import main
from chute.convert import open_source, parse_fields
from chute.errors import DatasetExistsError, DatasetNotFoundError, SourceError
from chute.sources.hdf5 import HDF5Source
from chute.sources.iterable import IterableSource
from chute.sources.npy import MemorySource, NpyFolderSource, NpySource, NpzSource
from chute.sources.torch import TorchSource
from chute.sources.zarr import ZarrSource

X = np.arange(120, dtype=np.float32).reshape(40, 3)


@pytest.fixture
def sources(tmp_path):
    np.save(tmp_path / "x.npy", X)
    np.savez(tmp_path / "x.npz", x=X)
    (tmp_path / "folder").mkdir()
    np.save(tmp_path / "folder" / "x.npy", X)
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f["x"] = X
    with h5py.File(tmp_path / "no_suffix", "w") as f:
        f["x"] = X
    zarr.open_group(tmp_path / "x.zarr", mode="w").create_array("x", data=X)
    return tmp_path


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("x.npy", NpySource),
        ("x.npz", NpzSource),
        ("folder", NpyFolderSource),
        ("x.h5", HDF5Source),
        ("no_suffix", HDF5Source),
        ("x.zarr", ZarrSource),
    ],
)
def test_detects_each_kind_and_round_trips(sources, name, kind):
    with open_source(sources / name) as src:
        assert type(src) is kind
    out = chute.convert(sources / name, sources / "out.chute", progress=False)
    with chute.open(out) as ds:
        np.testing.assert_array_equal(ds[0:40]["x"].numpy(), X)


def test_detects_objects(tmp_path):
    import torch
    from torch.utils.data import TensorDataset

    assert isinstance(open_source({"x": X}), MemorySource)
    assert isinstance(open_source(TensorDataset(torch.zeros(3))), TorchSource)
    assert isinstance(open_source(iter([{"x": 1}])), IterableSource)
    with pytest.raises(SourceError, match="cannot convert a int"):
        open_source(3)


def test_missing_unknown_and_chute_sources(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"nope\.h5: source does not exist"):
        chute.convert(tmp_path / "nope.h5", tmp_path / "o.chute")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(SourceError, match=r"notes\.txt: unknown kind of source"):
        chute.convert(tmp_path / "notes.txt", tmp_path / "o.chute")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match=r"neither Zarr metadata nor \.npy"):
        chute.convert(tmp_path / "empty", tmp_path / "o.chute")
    chute.write(tmp_path / "d.chute", {"x": X})
    with pytest.raises(SourceError, match=r"d\.chute is already a chute dataset"):
        chute.convert(tmp_path / "d.chute", tmp_path / "o.chute")


def test_destination_exists(sources):
    dst = chute.convert(sources / "x.npy", sources / "o.chute", progress=False)
    with pytest.raises(DatasetExistsError, match="overwrite=True"):
        chute.convert(sources / "x.h5", dst, progress=False)
    chute.convert({"x": X[:5]}, dst, overwrite=True, metadata={"from": "dict"}, progress=False)
    with chute.open(dst) as ds:
        assert len(ds) == 5 and ds.metadata == {"from": "dict"}


def test_progress_bar(sources, capsys):
    chute.convert(sources / "x.npy", sources / "o.chute")
    assert "40/40" in capsys.readouterr().err


def test_cli(sources, capsys):
    with h5py.File(sources / "two.h5", "w") as f:
        f["a/b"], f["c"] = X, X[:, 0]
    assert (
        main(
            [
                "convert",
                str(sources / "two.h5"),
                str(sources / "o.chute"),
                "--fields",
                "a/b=x,c",
                "--workers",
                "2",
                "-q",
            ]
        )
        == 0
    )
    with chute.open(sources / "o.chute") as ds:
        assert list(ds.schema) == ["x", "c"]
    assert main(["convert", str(sources / "two.h5"), str(sources / "o.chute"), "-q"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert parse_fields("a,b=c,") == {"a": "a", "b": "c"} and parse_fields(None) is None
