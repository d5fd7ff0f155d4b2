"""from_dask: parts written by Dask tasks (threads, LocalCluster), committed by the client."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster

import chute
from chute.errors import DatasetExistsError, SourceError

N = 600
X = np.random.default_rng(2).random((N, 4, 3), dtype=np.float32)
Y = np.arange(N, dtype=np.int64)


def check(path, parts: int) -> None:
    with chute.open(path) as ds:
        assert len(ds) == N and len(ds._parts) == parts
        batch = ds[0:N]
        np.testing.assert_array_equal(batch["x"].numpy(), X)
        np.testing.assert_array_equal(batch["y"].numpy(), Y)


def test_threads_one_part_per_row_chunk(tmp_path):
    arrays = {"x": da.from_array(X, chunks=(100, 2, 3)), "y": da.from_array(Y, chunks=70)}
    out = chute.from_dask(arrays, tmp_path / "o.chute", scheduler="threads", progress=False)
    check(out, parts=6)  # split where x (the fewest row chunks) is split
    with pytest.raises(DatasetExistsError):
        chute.from_dask(arrays, out, progress=False)
    chute.from_dask(arrays, out, overwrite=True, progress=False)
    check(out, parts=6)


def test_strings_and_convert_dispatch(tmp_path):
    words = np.array([f"w{i}" for i in range(N)])
    arrays = {
        "x": da.from_array(X, chunks=300),
        "y": da.from_array(Y, chunks=300),
        "w": da.from_array(words, chunks=300),
    }
    out = chute.convert(arrays, tmp_path / "o.chute", progress=False)
    check(out, parts=2)
    with chute.open(out) as ds:
        assert ds[0:N]["w"] == words.tolist()


def test_local_cluster_in_process(tmp_path):
    arrays = {"x": da.from_array(X, chunks=150), "y": da.from_array(Y, chunks=150)}
    with (
        LocalCluster(n_workers=2, processes=False, dashboard_address=None) as cluster,
        Client(cluster),
    ):
        out = chute.from_dask(arrays, tmp_path / "o.chute", progress=True)
    check(out, parts=4)


@pytest.mark.slow
def test_local_cluster_two_worker_processes(tmp_path):
    arrays = {"x": da.from_array(X, chunks=200), "y": da.from_array(Y, chunks=200)}
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        out = chute.from_dask(arrays, tmp_path / "o.chute", scheduler=client, progress=False)
    check(out, parts=3)


def _boom(block):
    if block[0] >= 300:
        raise ValueError("task failed")
    return block


def test_failed_task_leaves_nothing(tmp_path):
    y = da.from_array(Y, chunks=100).map_blocks(_boom, dtype=Y.dtype)
    with pytest.raises(ValueError, match="task failed"):
        chute.from_dask({"y": y}, tmp_path / "o.chute", scheduler="threads", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_bad_inputs(tmp_path):
    unknown = da.from_array(Y, chunks=100)
    unknown = unknown[unknown > 10]  # length unknown until computed
    with pytest.raises(SourceError, match=r"'y' has no known length.*compute_chunk_sizes"):
        chute.from_dask({"y": unknown}, tmp_path / "o.chute", progress=False)
    with pytest.raises(SourceError, match=r"same length.*'x': 600, 'y': 10"):
        chute.from_dask({"x": da.from_array(X), "y": da.zeros(10)}, tmp_path / "o.chute")
    with dask.config.set(scheduler="sync"):
        out = chute.from_dask(
            {"y": unknown.compute_chunk_sizes()}, tmp_path / "o.chute", progress=False
        )
    with chute.open(out) as ds:
        np.testing.assert_array_equal(ds[0 : len(ds)]["y"].numpy(), Y[Y > 10])
