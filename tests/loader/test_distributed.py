"""Two real ranks (torch.distributed, gloo, CPU, spawned processes), each with a chute.Loader:
disjoint equal shares in lockstep, and exact resume when the rank count changes (1 -> 2, 2 -> 1)."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import chute

N, BS, SEED = 501, 16, 11  # 501 = 15 steps of 32 + 21: the last step is padded on 2 ranks


def rank_main(rank: int, ds: chute.Dataset, out: Path, state_1to2: dict, steps: int) -> None:
    """One rank: a full epoch, a resumed epoch, then part of an epoch; writes what it saw."""
    dist.init_process_group(
        "gloo",
        init_method=f"file://{out / 'rendezvous'}",
        rank=rank,
        world_size=2,
        timeout=timedelta(seconds=60),
    )
    try:
        loader = chute.Loader(ds, BS, seed=SEED, num_workers=2)  # rank, world from dist
        record: dict = {"rank_world": [loader.order.rank, loader.order.world_size]}
        record["len"] = len(loader)
        epoch0 = []
        for batch in loader:
            epoch0.append(batch["y"].tolist())
            sizes: list = [None, None]
            dist.all_gather_object(sizes, len(epoch0[-1]))  # a collective per step: lockstep
            assert sizes[0] == sizes[1]
        record["epoch0"] = epoch0

        loader.load_state_dict(state_1to2)  # epoch 1, part consumed by a single rank
        record["resumed"] = [b["y"].tolist() for b in loader]

        loader.set_epoch(2)
        it = iter(loader)
        record["before_save"] = [next(it)["y"].tolist() for _ in range(steps)]
        record["state"] = loader.state_dict()
        del it
        (out / f"rank{rank}.json").write_text(json.dumps(record))
    finally:
        dist.destroy_process_group()


def flat(batches: list) -> list[int]:
    return [i for b in batches for i in b]


def stream(per_rank: list[list[list[int]]]) -> list[int]:
    """The global order of samples consumed: step by step, rank by rank."""
    return [i for step in zip(*per_rank, strict=True) for b in step for i in b]


@pytest.mark.slow
def test_two_ranks_share_and_resume_across_world_sizes(tmp_path):
    path = tmp_path / "d.chute"
    chute.write(path, {"y": np.arange(N)})
    ds = chute.open(path)
    order = chute.Order(N, BS, seed=SEED)

    # 1 -> 2: a single rank consumes part of epoch 1, two ranks finish it.
    single = chute.Loader(ds, BS, seed=SEED, num_workers=1)
    single.set_epoch(1)
    it = iter(single)
    first = [next(it)["y"].tolist() for _ in range(9)]
    state_1to2 = single.state_dict()
    del it

    mp.spawn(rank_main, args=(ds, tmp_path, state_1to2, 4), nprocs=2, join=True)
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["rank_world"] for r in records] == [[0, 2], [1, 2]]

    # A whole epoch: equal step counts, every sample once, then padding wrapped from the start.
    epoch0 = [r["epoch0"] for r in records]
    steps = math.ceil(N / (2 * BS))
    assert len(epoch0[0]) == len(epoch0[1]) == records[0]["len"] == steps
    seen = stream(epoch0)
    assert seen[:N] == order.global_order(0).tolist() and len(seen) == N + 1
    assert seen[N] == seen[0]

    # 1 -> 2: the two ranks saw exactly the rest of epoch 1.
    resumed = stream([r["resumed"] for r in records])
    assert (flat(first) + resumed)[:N] == order.global_order(1).tolist()
    assert len(flat(first) + resumed) - N < 2

    # 2 -> 1: two ranks consumed 4 steps of epoch 2, a single rank finishes it.
    assert records[0]["state"] == records[1]["state"]
    assert records[0]["state"]["consumed"] == 4 * 2 * BS
    alone = chute.Loader(ds, BS, seed=SEED, num_workers=2)
    alone.load_state_dict(records[0]["state"])
    rest = [b["y"].tolist() for b in alone]
    epoch2 = stream([r["before_save"] for r in records]) + flat(rest)
    assert epoch2 == order.global_order(2).tolist()  # none repeated, none lost, no padding
    assert torch.equal(torch.tensor(sorted(epoch2)), torch.arange(N))
