"""Where a pass starts, for chute.Loader (worker threads) and chute.dataloader (worker
processes) alike: every ``iter()`` is a fresh pass of the current epoch, as with torch's
DataLoader, except the first after ``load_state_dict``, which resumes at the saved position."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pytest

import chute

N = 1000
BS = 64  # 1,000 = 15 batches of 64 + 40: the last batch is short

MakeLoader = Callable[..., Any]


def threads(ds: chute.Dataset, **kwargs: Any) -> chute.Loader:
    return chute.Loader(ds, BS, num_workers=2, **kwargs)


def processes(ds: chute.Dataset, **kwargs: Any) -> Any:
    return chute.dataloader(ds, BS, num_workers=2, pin_memory=False, **kwargs)


def persistent_processes(ds: chute.Dataset, **kwargs: Any) -> Any:
    return processes(ds, persistent_workers=True, **kwargs)


LOADERS = [pytest.param(threads, id="Loader"), pytest.param(processes, id="dataloader")]


@pytest.fixture(scope="module")
def ds(tmp_path_factory: pytest.TempPathFactory) -> chute.Dataset:
    path = tmp_path_factory.mktemp("passes") / "d.chute"
    return chute.open(chute.write(path, {"y": np.arange(N)}))


def ys(batches: Iterable[dict[str, Any]]) -> list[int]:
    return [y for b in batches for y in b["y"].tolist()]


def epoch_order(epoch: int, shuffle: bool = True) -> list[int]:
    order = chute.Order(N, BS, shuffle=shuffle)
    order.set_epoch(epoch)
    return order.global_order().tolist()


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize(
    "make", [*LOADERS, pytest.param(persistent_processes, id="dataloader-persistent")]
)
def test_peek_then_evaluate_sees_every_sample(
    ds: chute.Dataset, make: MakeLoader, shuffle: bool
) -> None:
    loader = make(ds, shuffle=shuffle)
    peek = next(iter(loader))
    seen = ys(loader)
    assert len(seen) == N and sorted(seen) == list(range(N))
    assert seen == epoch_order(0, shuffle)  # the epoch the peek was taken from, whole
    assert peek["y"].tolist() == seen[:BS]


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("make", LOADERS)
def test_a_break_leaves_the_next_loop_whole(
    ds: chute.Dataset, make: MakeLoader, shuffle: bool
) -> None:
    loader = make(ds, shuffle=shuffle)
    for k, _ in enumerate(loader):
        if k == 2:
            break
    assert loader.state_dict()["consumed"] == 3 * BS  # where the pass stopped
    assert loader.remaining() == len(loader)  # ... but the next pass is the whole epoch
    assert ys(loader) == epoch_order(0, shuffle)
    assert loader.state_dict()["epoch"] == 1


@pytest.mark.parametrize("make", LOADERS)
def test_whole_passes_without_set_epoch_reshuffle(ds: chute.Dataset, make: MakeLoader) -> None:
    loader = make(ds, seed=0)
    first, second = ys(loader), ys(loader)
    assert first == epoch_order(0) and second == epoch_order(1) and first != second
    loader.set_epoch(0)  # the torch loop: set_epoch(e) chooses the epoch, from its start
    assert ys(loader) == first


@pytest.mark.parametrize("make", LOADERS)
def test_load_state_dict_resumes_the_next_pass_only(ds: chute.Dataset, make: MakeLoader) -> None:
    loader = make(ds)
    it = iter(loader)
    head = ys(next(it) for _ in range(5))
    state = loader.state_dict()
    del it

    resumed = make(ds)
    resumed.load_state_dict(state)
    assert resumed.remaining() == len(resumed) - 5
    resumed.set_epoch(0)  # the training loop's set_epoch(start_epoch) keeps the position
    it = iter(resumed)
    rest_head = ys([next(it)])
    del it
    assert head + rest_head == epoch_order(0)[: 6 * BS]  # resumed exactly
    assert resumed.remaining() == len(resumed)
    assert ys(resumed) == epoch_order(0)  # that resumed pass was left: the next is whole


@pytest.mark.parametrize("make", LOADERS)
def test_load_state_dict_of_its_own_state_continues(ds: chute.Dataset, make: MakeLoader) -> None:
    loader = make(ds)
    it = iter(loader)
    head = ys([next(it), next(it)])
    del it
    loader.load_state_dict(loader.state_dict())  # the explicit "continue where it stopped"
    assert head + ys(loader) == epoch_order(0)
    assert loader.state_dict()["epoch"] == 1


def test_to_device_peek_then_evaluate_sees_every_sample(ds: chute.Dataset) -> None:
    loader = threads(ds)
    wrapped = chute.to_device(loader, "cpu")
    next(iter(wrapped))
    assert ys(wrapped) == epoch_order(0)
    assert ys(wrapped) == epoch_order(1)
