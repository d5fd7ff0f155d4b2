"""chute.convert(..., processes=N): real worker processes, one part each, one commit."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("simplejpeg")
import pyarrow.parquet as pq  # noqa: E402
from image._image_files import jpeg  # noqa: E402

import chute  # noqa: E402
from chute import ArgumentError, SourceError  # noqa: E402
from chute.sources.process_convert import merge_metadata  # noqa: E402


@pytest.mark.slow
def test_parquet_files_in_processes_equal_one_process(tmp_path: Path) -> None:
    folder = tmp_path / "p"
    folder.mkdir()
    for i in range(5):
        t = pa.table(
            {
                "x": pa.array(np.arange(i * 10, i * 10 + 10), pa.int32()),
                "t": pa.array([[j] * (j % 3) for j in range(10)], pa.list_(pa.int64())),
                "s": [None if j == 4 else f"r{j}" for j in range(10)],
            }
        )
        pq.write_table(t, folder / f"{i}.parquet")
    one = chute.open(chute.convert(folder, tmp_path / "one.chute", progress=False, nulls="fill"))
    dst = chute.convert(folder, tmp_path / "par.chute", progress=False, nulls="fill", processes=2)
    par = chute.open(dst)
    assert len(par.parts) == 2 and len(par) == len(one) == 50 and par.schema == one.schema
    for i in range(50):
        a, b = par[i], one[i]
        assert int(a["x"]) == int(b["x"]) == i and a["s"] == b["s"]
        assert a["t"].tolist() == b["t"].tolist()
    assert par.metadata["nulls"] == one.metadata["nulls"] == {"s": 5}


def shard(path: Path, keys: range, bad: int | None = None) -> None:
    with tarfile.open(path, "w") as tar:
        for i in keys:
            pic = jpeg(8, 8, seed=i)
            for ext, data in (("jpg", pic[:30] if i == bad else pic), ("cls", str(i).encode())):
                info = tarfile.TarInfo(f"{i:04d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


@pytest.mark.slow
def test_shards_in_processes_merge_what_was_skipped(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    for s in range(4):
        shard(folder / f"{s}.tar", range(s * 3, s * 3 + 3), bad=7)
    with pytest.raises(SourceError, match=r"2\.tar: 0007\.jpg"):
        chute.convert(folder, tmp_path / "bad.chute", progress=False, processes=3)
    assert not (tmp_path / "bad.chute").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".bad.chute.tmp")]
    dst = chute.convert(folder, tmp_path / "ok.chute", progress=False, processes=3, on_error="skip")
    ds = chute.open(dst)
    assert [int(ds[i]["cls"]) for i in range(len(ds))] == [i for i in range(12) if i != 7]
    assert [s["key"] for s in ds.metadata["skipped"]] == ["0007"]
    with pytest.raises(
        ArgumentError, match="processes= converts Parquet, Arrow IPC and WebDataset"
    ):
        chute.convert({"x": np.arange(3)}, tmp_path / "d.chute", processes=2)


def test_merge_metadata() -> None:
    merged = merge_metadata(
        [
            {"skipped": [1], "nulls": {"a": 1}, "class_names": {"y": ["a"]}},
            {"skipped": [2], "nulls": {"a": 2, "b": 1}, "class_names": {"y": ["a"]}},
        ]
    )
    assert merged == {"skipped": [1, 2], "nulls": {"a": 3, "b": 1}, "class_names": {"y": ["a"]}}
