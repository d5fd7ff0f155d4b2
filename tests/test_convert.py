"""chute.convert: source detection, destination rules, progress, and the `chute convert` CLI."""

from __future__ import annotations

import inspect
from typing import Any

import h5py
import numpy as np
import pytest
import zarr

import chute
from chute.cli import main
from chute.conversion import open_source, parse_fields, source_kind
from chute.errors import ArgumentError, DatasetExistsError, DatasetNotFoundError, SourceError
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
    zarr_array(zarr.open_group(tmp_path / "x.zarr", mode="w"), "x", X)
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
    with pytest.raises(SourceError, match=r"cannot convert a int: .* a pyarrow Table"):
        open_source(3)


def test_missing_unknown_and_chute_sources(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"nope\.h5: source does not exist"):
        chute.convert(tmp_path / "nope.h5", tmp_path / "o.chute")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(SourceError, match=r"notes\.txt: unknown kind of source"):
        chute.convert(tmp_path / "notes.txt", tmp_path / "o.chute")
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        SourceError,
        match=r"a folder holding no source chute reads \(Zarr metadata, \.npy files, images",
    ):
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
    err = capsys.readouterr().err
    assert "o.chute already exists; pass --overwrite to replace it" in err  # the CLI's own flag
    assert "overwrite=True" not in err
    again = ["convert", str(sources / "x.npy"), str(sources / "o.chute"), "-q", "--overwrite"]
    assert main(again) == 0
    assert parse_fields("a,b=c") == {"a": "a", "b": "c"} and parse_fields(None) is None


@pytest.mark.parametrize("text", ["x,,", "x,", ",x", "", "x=", "=y"])
def test_cli_empty_field_names_are_refused(sources, capsys, text):
    with pytest.raises(SourceError, match="empty field name"):
        parse_fields(text)
    assert main(["convert", str(sources / "x.h5"), str(sources / "o.chute"), "--fields", text]) == 1
    assert f"--fields {text!r}: an empty field name" in capsys.readouterr().err
    assert not (sources / "o.chute").exists()


@pytest.mark.parametrize("workers", ["-3", "two"])
def test_cli_bad_worker_counts_are_usage_errors(sources, capsys, workers):
    with pytest.raises(SystemExit) as info:
        main(["convert", str(sources / "x.h5"), str(sources / "o.chute"), "--workers", workers])
    assert info.value.code == 2 and "--workers" in capsys.readouterr().err
    assert not (sources / "o.chute").exists()


def test_source_kind_names_every_kind(sources):
    nouns = {n: source_kind(sources / n).noun for n in ("x.npy", "x.npz", "folder", "x.zarr")}
    assert nouns == {
        "x.npy": "an .npy file",
        "x.npz": "an .npz archive",
        "folder": "a folder of .npy files",
        "x.zarr": "a Zarr store",
    }
    assert source_kind(sources / "no_suffix") is HDF5Source  # by its signature
    (sources / "notes.txt").write_text("hello")
    assert source_kind(sources / "notes.txt") is None


def _with_constant(sources, name):
    """``name`` holding x and y (40 rows) and a per-file constant ``mean`` of 28 values."""
    path, y, mean = sources / name, X[:, 0].copy(), np.zeros(28, np.float32)
    if name.endswith(".npz"):
        np.savez(path, x=X, y=y, mean=mean)
    elif name.endswith(".h5"):
        with h5py.File(path, "w") as f:
            f["x"], f["y"], f["stats/mean"] = X, y, mean
    else:
        group = zarr.open_group(path, mode="w")
        for key, value in {"x": X, "y": y, "stats/mean": mean}.items():
            zarr_array(group, key, value)
    return path


def zarr_array(group: Any, key: str, value: np.ndarray) -> None:
    """Array ``key`` of zarr ``group`` holding ``value`` (zarr 3.0 has no ``data=``)."""
    group.create_array(key, shape=value.shape, dtype=value.dtype)[...] = value


@pytest.mark.parametrize("name", ["c.npz", "c.h5", "c.zarr"])
def test_left_out_arrays_are_named(sources, name, capsys):
    path = _with_constant(sources, name)
    mean = "mean" if name.endswith(".npz") else "stats/mean"
    message = f"{path}: left out {mean} (28,): its first axis is not the common length 40"
    with pytest.warns(UserWarning) as record:
        chute.convert(path, sources / "o.chute", progress=False)
    assert [str(w.message) for w in record] == [message]
    with chute.open(sources / "o.chute") as ds:
        assert sorted(ds.schema) == ["x", "y"]
    # the command line prints the same, one line, without the library's file and line
    assert main(["convert", "-q", str(path), str(sources / "p.chute")]) == 0
    assert capsys.readouterr().err == f"chute convert: warning: {message}\n"


def test_nothing_left_out_nothing_said(sources, recwarn):
    chute.convert(_with_constant(sources, "c.h5"), sources / "o.chute", ["x"], progress=False)
    chute.convert({"x": X, "s": np.float32(1)}, sources / "p.chute", ["x"], progress=False)
    assert not recwarn.list
    with pytest.warns(UserWarning, match=r"<dict of arrays>: left out s \(\): a scalar"):
        chute.convert({"x": X, "s": np.float32(1)}, sources / "q.chute", progress=False)


def test_part_size_splits_and_is_refused_where_parts_are_given(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(10))
    ds = chute.open(chute.convert(tmp_path / "x.npy", tmp_path / "x.chute", part_size=4))
    assert [p.num_samples for p in ds.parts] == [4, 4, 2]
    dask = pytest.importorskip("dask.array")
    with pytest.raises(ArgumentError, match="row chunk: rechunk"):
        chute.convert({"x": dask.from_array(np.arange(10))}, tmp_path / "d.chute", part_size=4)
    with pytest.raises(ArgumentError, match="one part per file"):
        chute.convert("a.parquet", tmp_path / "p.chute", part_size=4, processes=2)


def _table() -> Any:
    pa = pytest.importorskip("pyarrow")
    n = 9
    inner = pa.array([{"b": f"é{i}" * (i % 3), "c": [i] * (i % 4)} for i in range(n)])
    meta = pa.StructArray.from_arrays([pa.array(range(n), pa.int16()), inner], ["a", "inner"])
    return pa.table(
        {
            "meta": meta,  # nested struct: meta/a, meta/inner/b, meta/inner/c
            "tokens": pa.array([list(range(i)) for i in range(n)], pa.list_(pa.int32())),
            "text": [f"row {i} ✓" if i % 2 else "" for i in range(n)],
            "big": pa.array([2**64 - 1 - i for i in range(n)], pa.uint64()),
            "wide": pa.array([(-(2**63), 2**63 - 1)[i % 2] for i in range(n)], pa.int64()),
        }
    )


def _rows(ds: chute.Dataset) -> list[dict[str, Any]]:
    return [
        {k: v if isinstance(v, str) else v.tolist() for k, v in ds[i].items()}
        for i in range(len(ds))
    ]


def _expected(table: Any) -> list[dict[str, Any]]:
    return [
        {
            "meta/a": r["meta"]["a"],
            "meta/inner/b": r["meta"]["inner"]["b"],
            "meta/inner/c": r["meta"]["inner"]["c"],
            "tokens": r["tokens"],
            "text": r["text"],
            "big": r["big"],
            "wide": r["wide"],
        }
        for r in table.to_pylist()
    ]


def test_a_pyarrow_table_converts_as_a_parquet_file_does(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = _table()
    chunked = pa.concat_tables([table.slice(0, 4), table.slice(4)])  # two chunks
    assert type(open_source(chunked)).__name__ == "ArrowTableSource"
    out = chute.convert(chunked, tmp_path / "t.chute", progress=False, batch_bytes=64)
    ds = chute.open(out)
    assert ds.schema["big"].dtype == "uint64" and ds.schema["wide"].dtype == "int64"
    assert ds.schema["meta/a"].dtype == "int16"
    assert _rows(ds) == _expected(table)
    pq.write_table(table, tmp_path / "t.parquet")  # the same fields and values as from a file
    from_file = chute.open(chute.convert(tmp_path / "t.parquet", tmp_path / "p.chute"))
    assert from_file.schema == ds.schema and _rows(from_file) == _rows(ds)


def test_a_pyarrow_record_batch_and_options(tmp_path):
    table = _table()
    (rb,) = table.combine_chunks().to_batches()
    out = chute.convert(
        rb, tmp_path / "rb.chute", {"text": "t", "meta/inner/b": "b"}, progress=False
    )
    assert _rows(chute.open(out)) == [
        {"t": r["text"], "b": r["meta/inner/b"]} for r in _expected(table)
    ]
    with pytest.raises(ArgumentError, match=r"<pyarrow.Table>: option\(s\) \['bogus'\]"):
        chute.convert(table, tmp_path / "x.chute", bogus=1)
    with pytest.raises(ArgumentError, match="not a pyarrow Table"):
        chute.convert(table, tmp_path / "x.chute", processes=2)


def test_source_options_are_the_options_the_sources_take():
    """``SourceOptions`` (what ``convert``'s ``**options`` are typed as) names every option of
    every source ``convert`` opens, and nothing else (``scheduler`` is ``from_dask``'s)."""
    from chute import conversion as convert_module
    from chute.sources.dask import from_dask
    from chute.sources.options import SourceOptions

    sources = [
        *convert_module.PATH_SOURCES.values(),
        *(convert_module.HFDatasetSource, convert_module.ArrowTableSource),
        *(convert_module.MemorySource, convert_module.TorchSource, convert_module.IterableSource),
        convert_module.ColumnsSource,
    ]
    positional = {"self", "src", "path", "name", "arrays", "fields", "arrow_schema"}
    positional |= {"dataset", "iterable", "columns"}  # the source itself, never an option
    taken = set().union(*(convert_module._options(cls) or set() for cls in sources)) - positional
    taken |= set(inspect.signature(from_dask).parameters) - {"arrays", "dst"}
    taken -= {"overwrite", "progress", "metadata"}  # convert's own arguments
    assert taken == set(SourceOptions.__annotations__)
