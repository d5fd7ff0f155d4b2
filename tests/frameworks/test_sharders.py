"""What a chute loader gives the samplers a stack wraps it in, in one process, with the real
classes: accelerate's ``BatchSamplerShard`` and ``SkipBatchSampler``, torch's
``DistributedSampler`` check and the DataLoader a stack builds from ``batch_sampler``. Each way
a stack could drop, repeat or alter samples is exact or raises ``chute.FrameworkError``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from _reliability import record
from conftest import N, exactly_once

import chute

data_loader = pytest.importorskip("accelerate.data_loader")
Record = Callable[[str, Any], None]


def ids(batches: Any) -> list[int]:
    return [int(i) for idx in batches for i in np.asarray(idx).reshape(-1)]


@pytest.mark.parametrize("world", [2, 3])
def test_batch_sampler_shard_gives_each_rank_its_own_batches(ids_dataset, world):
    ds = chute.open(ids_dataset)
    mine, sharded = [], []
    for rank in range(world):
        dl = chute.dataloader(ds, 20, rank=rank, world_size=world, num_workers=0, seed=3)
        mine.append(ids(dl.batch_sampler))  # not wrapped: this rank's batches
        shard = data_loader.BatchSamplerShard(dl.batch_sampler, world, rank)
        assert len(shard) == len(dl)
        sharded.append(ids(shard))
    assert sharded == mine  # exactly chute's own shard, in chute's order
    if world == 2:
        exactly_once(*sharded)
    else:  # 400 samples over 3 x 20: the last step wraps around, as DistributedSampler does
        assert len(set().union(*map(set, sharded))) == N


def test_skip_first_batches_of_the_loader_itself_is_exact(ids_dataset):
    ds = chute.open(ids_dataset)
    for rank in (0, 1):
        dl = chute.dataloader(ds, 20, rank=rank, world_size=2, num_workers=0)
        dl.set_epoch(3)
        whole = ids(b["id"] for b in dl)
        dl.set_epoch(3)  # as after a resume: that pass finished epoch 3
        skipped = data_loader.SkipBatchSampler(dl.batch_sampler, 4)
        assert ids(skipped) == whole[4 * 20 :]


def test_stacks_find_a_distributed_sampler_that_moves_the_epoch(ids_dataset):
    ds = chute.open(ids_dataset)
    for loader in (chute.dataloader(ds, 20, num_workers=0), chute.Loader(ds, 20, num_workers=0)):
        assert isinstance(loader.sampler, torch.utils.data.DistributedSampler)
        assert loader.batch_sampler.sampler is loader.sampler
        first = ids(b["id"] for b in loader)
        loader.sampler.set_epoch(1)
        assert loader.sampler.epoch == loader.order.epoch == 1
        assert list(loader.sampler) == ids(b["id"] for b in loader) != first
        loader.batch_sampler.sampler.set_epoch(0)
        assert ids(b["id"] for b in loader) == first


def test_sharding_chute_cannot_follow_raises(ids_dataset, record_property: Record):
    ds = chute.open(ids_dataset)
    one = chute.dataloader(ds, 20, rank=0, world_size=1, num_workers=0)
    two = chute.dataloader(ds, 20, rank=1, world_size=2, num_workers=0)
    cases = [
        (data_loader.BatchSamplerShard(one.batch_sampler, 2, 0), "over 2 processes"),
        (data_loader.BatchSamplerShard(two.batch_sampler, 2, 0), "this is 0"),
        (data_loader.BatchSamplerShard(two.batch_sampler, 2, 1, split_batches=False), None),
    ]
    for shard, match in cases:
        if match is None:
            assert len(ids(shard)) == len(two) * 20
            continue
        with pytest.raises(chute.FrameworkError, match=match):
            list(shard)
    record(
        record_property,
        "frameworks: a stack shards a chute.dataloader again",
        "accelerate BatchSamplerShard over another world size or rank than chute's order",
        2,
        "FrameworkError naming both worlds; over the same world each rank gets its own batches",
    )


def test_a_dataloader_built_from_a_loader_that_pads_raises(
    ids_dataset, tmp_path, record_property: Record
):
    ds = chute.open(ids_dataset)
    with chute.Writer(tmp_path / "t.chute", {"t": chute.Ragged("int64")}) as w:
        for i in range(40):
            w.append({"t": np.arange(i % 7)})
    tokens = chute.open(tmp_path / "t.chute")
    refused = [
        chute.Loader(ds, 20, num_workers=0, transform=lambda b: b),
        chute.Loader(tokens, 20, num_workers=0, pad=0),
        chute.Loader(tokens, 20, num_workers=0),
    ]
    for loader in refused:
        rebuilt = data_loader.skip_first_batches(loader, 1)
        with pytest.raises(chute.FrameworkError, match=r"chute\.dataloader"):
            next(iter(rebuilt))
    plain = chute.Loader(ds, 20, num_workers=0)
    whole = ids(b["id"] for b in plain)
    plain.set_epoch(0)
    assert ids(b["id"] for b in data_loader.skip_first_batches(plain, 2)) == whole[40:]
    record(
        record_property,
        "frameworks: a stack rebuilds a chute.Loader as a DataLoader",
        "skip_first_batches of a Loader with transform=, pad=, a ragged field",
        len(refused),
        "FrameworkError saying to give the stack chute.dataloader; a plain Loader exact",
    )
