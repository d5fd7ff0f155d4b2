"""torch Subsets (random_split, Subset(ds, indices), nested) of a chute Dataset, in chute's
Loader and chute.dataloader."""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import Subset, TensorDataset, random_split

import chute
from chute.errors import ArgumentError, ArgumentValueError, SampleIndexError
from chute.loader.dataloader import dataloader
from chute.order import Order
from chute.reader.subset import SubsetDataset

N = 120


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("subset") / "ds.chute"
    i = np.arange(N)
    chute.write(
        path,
        {
            "i": i,
            "x": np.stack([i, 2 * i], axis=1).astype(np.float32),
            "tok": [np.arange(k % 4, dtype=np.int32) + k for k in range(N)],
        },
    )
    return path


@pytest.fixture(scope="module")
def ds(path: Path) -> chute.Dataset:
    return chute.open(path)


def halves(ds: Any) -> list[Subset]:
    """A 90 / 30 random split, the torch way."""
    return random_split(ds, [0.75, 0.25], generator=torch.Generator().manual_seed(0))


def ids(batches: Any) -> list[int]:
    return [int(v) for b in batches for v in b["i"]]


def check(batch: dict[str, Any]) -> None:
    """Every field of each row is that of the sample named by its ``i``."""
    i = batch["i"]
    assert torch.equal(batch["x"], torch.stack([i, 2 * i], 1).float())
    if "tok" in batch:
        assert [t.tolist() for t in batch["tok"].tolist()] == [
            list(range(k, k + k % 4)) for k in i.tolist()
        ]


# Module-level: worker processes under spawn import it by name.
def pick(sample: dict[str, Any]) -> dict[str, Any]:
    return {"i": sample["i"], "x": sample["x"]}


def loader(ds: Any, batch_size: int, **kwargs: Any) -> chute.Loader:
    return chute.Loader(ds, batch_size, num_workers=kwargs.pop("num_workers", 0), **kwargs)


def dl0(ds: Any, batch_size: int, **kwargs: Any) -> Any:
    return dataloader(ds, batch_size, num_workers=0, **kwargs)


MAKERS = [pytest.param(loader, id="Loader"), pytest.param(dl0, id="dataloader")]


@pytest.mark.parametrize(
    ("workers", "keep", "fields"),
    [(0, None, None), (2, None, None), (2, 1, None), (2, None, ["i", "x"]), (2, 2, ["i", "x"])],
)
def test_loader_reads_each_half_once_an_epoch(
    path: Path, workers: int, keep: int | None, fields: list[str] | None
) -> None:
    ds = chute.open(path, fields=fields)
    seen = []
    for half in halves(ds):
        ld = chute.Loader(half, 16, seed=1, num_workers=workers, reuse_after=keep)
        assert len(ld) == math.ceil(len(half) / 16)
        assert (ld.group > 1) == (fields is not None and workers > 0)  # grouped gathers too
        for epoch in range(2):
            ld.set_epoch(epoch)
            got = []
            for batch in ld:
                check(batch)
                got += batch["i"].tolist()
            assert sorted(got) == sorted(half.indices)
        seen.append(set(got))
    assert not seen[0] & seen[1]
    assert seen[0] | seen[1] == set(range(N))


@pytest.mark.parametrize(
    ("context", "workers"), [("fork", 2), pytest.param("spawn", 1, marks=pytest.mark.slow)]
)
def test_dataloader_worker_processes_read_each_half(
    ds: chute.Dataset, context: str, workers: int
) -> None:
    train, val = halves(ds)
    seen = []
    # train: one gather per batch in the workers; val: per-sample ds[i] and sample_transform
    for half, kwargs in ((train, {}), (val, {"sample_transform": pick})):
        dl = dataloader(
            half, 16, seed=2, num_workers=workers, multiprocessing_context=context, **kwargs
        )
        batches = list(dl)
        for batch in batches:
            check(batch)
        got = ids(batches)
        assert sorted(got) == sorted(half.indices)
        seen.append(set(got))
    assert not seen[0] & seen[1]
    assert seen[0] | seen[1] == set(range(N))


def test_the_order_is_chutes_order_over_the_subset(ds: chute.Dataset) -> None:
    train, _ = halves(ds)
    idx = np.asarray(train.indices)
    want = [idx[b].tolist() for b in Order(len(train), 16, seed=3).plan()]
    for ld in (
        chute.Loader(train, 16, seed=3, num_workers=0),
        chute.Loader(train, 16, seed=3, num_workers=2),
        dataloader(train, 16, seed=3, num_workers=0),
    ):
        assert [b["i"].tolist() for b in ld] == want  # deterministic: a function of the seed
        assert [b["i"].tolist() for b in ld] != want  # the next epoch is another shuffle
    assert [b["i"].tolist() for b in chute.Loader(train, 16, seed=4, num_workers=0)] != want


@pytest.mark.parametrize("make", MAKERS)
def test_resume_mid_epoch(ds: chute.Dataset, make: Callable[..., Any]) -> None:
    train, val = halves(ds)
    full = ids(make(train, 8, seed=5))
    first = make(train, 8, seed=5)
    it = iter(first)
    head = ids(next(it) for _ in range(4))
    state = first.state_dict()
    assert (state["n"], state["consumed"]) == (len(train), 32)
    again = make(train, 8, seed=5)
    again.load_state_dict(state)
    assert head + ids(again) == full
    with pytest.raises(ArgumentValueError, match="n=90"):  # the other split's position is refused
        make(val, 8, seed=5).load_state_dict(state)


@pytest.mark.parametrize("make", MAKERS)
def test_two_ranks_share_a_subset(ds: chute.Dataset, make: Callable[..., Any]) -> None:
    train, _ = halves(ds)  # 90 samples: 5 steps of 9 per rank
    idx = np.asarray(train.indices)
    shards = []
    for rank in (0, 1):
        got = ids(make(train, 9, seed=6, rank=rank, world_size=2))
        plan = Order(len(train), 9, seed=6, rank=rank, world_size=2).plan()
        assert got == np.concatenate([idx[b] for b in plan]).tolist()
        shards.append(got)
    assert len(shards[0]) == len(shards[1]) == 45
    assert not set(shards[0]) & set(shards[1])
    assert sorted(shards[0] + shards[1]) == sorted(idx.tolist())


@pytest.mark.parametrize(
    "indices",
    [
        list(range(100, 20, -2)),
        np.arange(100, 20, -2, dtype=np.uint32),
        torch.arange(100, 20, -2),
        range(100, 20, -2),
    ],
    ids=["list", "uint32", "tensor", "range"],
)
def test_nested_subsets_compose(ds: chute.Dataset, indices: Any) -> None:
    outer = Subset(Subset(ds, indices), [3, 0, -1, 39])  # negatives count from the end
    ld = chute.Loader(outer, 2, shuffle=False, num_workers=0)
    assert isinstance(ld.dataset, SubsetDataset) and ld.dataset.dataset is ds
    assert ids(ld) == [94, 100, 22, 22]
    assert ids(dataloader(outer, 2, shuffle=False, num_workers=0, sample_transform=pick)) == [
        94,
        100,
        22,
        22,
    ]


def test_the_loader_keeps_its_own_copy_of_the_indices(ds: chute.Dataset) -> None:
    mine = np.array([5, 6, 7])
    ld = chute.Loader(Subset(ds, mine), 3, shuffle=False, num_workers=0)
    mine[:] = 0  # the user's array stays theirs: writable, and changing it changes nothing
    assert ids(ld) == [5, 6, 7]


def test_pad_and_ragged_fields(ds: chute.Dataset) -> None:
    _, val = halves(ds)
    (batch,) = chute.Loader(val, 30, shuffle=False, num_workers=0, pad=-1)
    assert batch["tok_lengths"].tolist() == [k % 4 for k in val.indices]
    assert batch["tok"].shape == (30, 3)


def test_pickles_as_the_dataset_plus_its_indices(ds: chute.Dataset) -> None:
    train, _ = halves(ds)
    sub = chute.Loader(train, 4, num_workers=0).dataset
    blob = pickle.dumps(sub)
    # the dataset pickles as its manifest (O(1)); the subset adds its indices, not the data
    assert len(blob) < len(pickle.dumps(ds)) + sub.indices.nbytes + 300
    back = pickle.loads(blob)
    assert back.gather(np.arange(len(sub)))["i"].tolist() == list(train.indices)


@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize(
    ("subset", "match"),
    [
        (
            lambda ds: Subset(ds, [0, N]),
            rf"index {N} \(at position 1\) is out of range for a "
            rf"Subset of chute.Dataset\(.*\): indices must be in \[-{N}, {N}\)",
        ),
        (lambda ds: Subset(ds, [-N - 1]), rf"index {-N - 1} is out of range for a Subset of"),
        (lambda ds: Subset(ds, np.array([3, N + 5], np.uint64)), rf"index {N + 5} \(at position"),
        (
            lambda ds: Subset(Subset(ds, range(10)), [2, 9, 10]),
            r"index 10 \(at position 2\) is out of range for a Subset of a Subset of chute.Dataset"
            r"\(.*\): indices must be in \[-10, 10\)",
        ),
        (lambda ds: Subset(ds, [0.5, 1.5]), r"must be a 1-D array of ints, got float64"),
    ],
    ids=["past-the-end", "negative", "uint64", "nested", "floats"],
)
def test_bad_subset_indices_are_named(
    ds: chute.Dataset, make: Callable[..., Any], subset: Callable[[Any], Subset], match: str
) -> None:
    with pytest.raises(SampleIndexError, match=match):
        make(subset(ds), 4)


def test_positions_past_the_subset_are_named(ds: chute.Dataset) -> None:
    sub = chute.Loader(Subset(ds, [7, 8, -N + 9]), 2, num_workers=0).dataset
    assert sub.indices.tolist() == [7, 8, 9]  # as the dataset's own indices, from 0
    assert sub.gather([-1, 0])["i"].tolist() == [9, 7]
    assert int(sub[-3]["i"]) == 7
    with pytest.raises(SampleIndexError, match=r"index 3 \(at position 1\) is out of range for "):
        sub.gather([0, 3])
    with pytest.raises(SampleIndexError, match=r"index -4 is out of range for chute.Subset"):
        sub[-4]


@pytest.mark.parametrize("make", MAKERS)
def test_a_subset_of_anything_else_is_refused(make: Callable[..., Any]) -> None:
    tds = TensorDataset(torch.arange(10))
    with pytest.raises(ArgumentError, match=r"needs a chute Dataset .* not TensorDataset;"):
        make(tds, 2)
    with pytest.raises(ArgumentError, match="not TensorDataset inside a torch Subset; for a torch"):
        make(Subset(Subset(tds, [1, 2]), [0]), 2)
