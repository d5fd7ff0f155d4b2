"""chute.dataloader's worker processes making their own shares of a pass
(chute/loader/streams.py): the same batches as in one process, in order, grouped or not, kept
batches intact, a pass left early leaving nothing behind, a worker's errors raised."""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np
import pytest
import torch

import chute
from chute.errors import WorkerError
from chute.loader.dataloader import dataloader
from chute.loader.streams import Shares

N = 203


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> chute.Dataset:
    path = tmp_path_factory.mktemp("streams") / "fixed.chute"
    chute.write(path, {"x": np.arange(N * 4, dtype=np.float32).reshape(N, 4), "y": np.arange(N)})
    return chute.open(path)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> chute.Dataset:
    path = tmp_path_factory.mktemp("streams") / "mixed.chute"
    chute.write(
        path,
        {"y": np.arange(N), "tok": [np.arange(i % 5, dtype=np.int32) + i for i in range(N)]},
    )
    return chute.open(path)


def ys(batches: Any) -> list[list[int]]:
    return [b["y"].tolist() for b in batches]


def fail_init(worker_id: int) -> None:
    raise ValueError(f"worker {worker_id} has no GPU")


def double_y(batch: dict[str, Any]) -> dict[str, Any]:
    batch["y2"] = batch["y"] * 2
    return batch


@pytest.mark.parametrize("which", ["fixed", "mixed"])
@pytest.mark.parametrize(("context", "persistent"), [("fork", False), ("spawn", True)])
def test_workers_make_the_batches_of_one_process_in_order(
    request: pytest.FixtureRequest, which: str, context: str, persistent: bool
) -> None:
    ds = request.getfixturevalue(which)
    kw: dict[str, Any] = {"seed": 3, "batch_size": 4}
    dl = dataloader(
        ds, num_workers=2, persistent_workers=persistent, multiprocessing_context=context, **kw
    )
    assert dl._shares is not None and (dl._shares.group > 1) == (which == "fixed")
    one = dataloader(ds, num_workers=0, **kw)
    for epoch in range(2):
        dl.set_epoch(epoch)
        one.set_epoch(epoch)
        got, want = list(dl), list(one)  # every batch kept: their lent slots stay theirs
        assert ys(got) == ys(want)
        if which == "mixed":
            assert [b["tok"].values.tolist() for b in got] == [
                b["tok"].values.tolist() for b in want
            ]


def test_a_pass_left_early_leaves_nothing_for_the_next(fixed: chute.Dataset) -> None:
    dl = dataloader(fixed, 2, seed=1, num_workers=2, persistent_workers=True)
    want = ys(dataloader(fixed, 2, seed=1, num_workers=0))
    for stop in (1, 5, 40):
        assert ys(itertools.islice(dl, stop)) == want[:stop]
    assert ys(dl) == want  # a fresh pass of the same epoch: the workers' leftovers dropped
    state = dl.state_dict()
    dl.set_epoch(0)
    it = iter(dl)
    first = [next(it)["y"].tolist() for _ in range(7)]
    dl.load_state_dict(dl.state_dict())  # resume after 7 batches, with the same workers
    assert first + ys(dl) == want and state["epoch"] == 1


def test_batch_transform_and_ranks(fixed: chute.Dataset) -> None:
    kw: dict[str, Any] = {"seed": 2, "rank": 1, "world_size": 2, "batch_transform": double_y}
    dl = dataloader(fixed, 8, num_workers=2, **kw)
    got, want = list(dl), list(dataloader(fixed, 8, num_workers=0, **kw))
    assert ys(got) == ys(want) and all(torch.equal(b["y2"], b["y"] * 2) for b in got)


def test_a_failing_worker_init_fn_is_raised_in_the_main_process(fixed: chute.Dataset) -> None:
    dl = dataloader(fixed, 8, num_workers=2, worker_init_fn=fail_init)
    with pytest.raises(ValueError, match="worker 0 has no GPU"):
        next(iter(dl))


def test_a_failing_gather_names_the_worker_and_stops_the_pass(
    fixed: chute.Dataset, tmp_path: Any
) -> None:
    dl = dataloader(fixed, 8, num_workers=2, batch_transform=broken)
    with pytest.raises(WorkerError, match="DataLoader worker process 0"):
        list(dl)
    assert ys(itertools.islice(dataloader(fixed, 8, num_workers=2), 2))  # others unaffected


def broken(batch: dict[str, Any]) -> dict[str, Any]:
    raise KeyError("no such field")


def slow(batch: dict[str, Any]) -> dict[str, Any]:
    time.sleep(2)
    return batch


def test_timeout_bounds_the_wait_for_a_batch(fixed: chute.Dataset) -> None:
    dl = dataloader(fixed, 8, num_workers=1, batch_transform=slow, timeout=0.2)
    with pytest.raises(RuntimeError, match=r"timed out after 0\.2 seconds"):
        next(iter(dl))


def test_only_whole_batches_take_the_stream_path(fixed: chute.Dataset) -> None:
    assert isinstance(dataloader(fixed, 8, num_workers=2)._shares, Shares)
    assert dataloader(fixed, 8, num_workers=2, sample_transform=dict)._shares is None
