"""The samplers a training framework finds on a chute loader, and what they do with chute's
order: the handles accelerate, Lightning, the HF ``Trainer`` and Ray Train use on a torch
``DataLoader`` (``loader.sampler``, ``loader.batch_sampler``, ``set_epoch`` on either).

NOTE (frameworks and chute's order)

    chute's order is sharded already: rank ``r`` reads its own batches of every step
    (``chute/order/order.py``). A framework must neither shard it again nor lose the epoch.

    ``loader.sampler`` is an :class:`EpochSampler`, a ``DistributedSampler``: Lightning
    (``use_distributed_sampler=True``) and Ray Train's ``prepare_data_loader`` see a loader
    that is sharded already and leave it as it is, and the ``set_epoch(e)`` they call on it
    (also on a loader built anew each epoch) moves chute's order to epoch ``e``.

    ``chute.dataloader(...).batch_sampler`` is a :class:`StepBatches`: this rank's batches,
    except to accelerate's ``BatchSamplerShard`` (what ``accelerator.prepare`` wraps a
    DataLoader's batch sampler in, giving batch ``k`` to process ``k % world_size``): it gets
    every rank's batches, step by step (rank 0's batch of step 0, rank 1's, ..., then step 1),
    so each process keeps exactly chute's own batches (``chute/_compat.py`` finds the
    ``BatchSamplerShard`` asking). The ``set_epoch`` accelerate calls reaches the order
    through ``batch_sampler.sampler``. A stack that builds a DataLoader from
    ``batch_sampler`` starts a pass of the order (``restart``, or the position
    ``load_state_dict`` chose), exactly as ``iter(loader)`` does, but does not count what it
    consumes: resume there is the stack's own (accelerate's ``skip_first_batches``, on the
    prepared loader or the loader itself).

    ``chute.Loader(...).batch_sampler`` is this rank's batches (nobody re-shards a Loader:
    it is not a ``DataLoader``). A DataLoader built from it (accelerate's
    ``skip_first_batches``, the HF Trainer's mid-epoch resume) reads ``loader.dataset`` with
    ``__getitems__``: the same samples as the Loader, unless the Loader also pads, transforms
    or decodes per epoch, which such a DataLoader cannot do: then iterating it raises
    :class:`~chute.errors.FrameworkError` naming the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np
import torch

from .. import _compat as compat
from ..errors import FrameworkError
from ..order.steps import Steps
from ..reader.gatherable import Feed, Prefetching

__all__ = ["EpochSampler", "LoaderBatches", "StepBatches"]


class Driven(Protocol):
    """A chute loader, as the samplers see it (:class:`~chute.loader.passes.OnePass`)."""

    order: Steps

    def set_epoch(self, epoch: int) -> None: ...

    def _start_pass(self) -> Iterator[np.ndarray]: ...


class EpochSampler(torch.utils.data.DistributedSampler):  # type: ignore[type-arg]
    """``loader.sampler``: a ``DistributedSampler`` over chute's order (see the NOTE).

    ``set_epoch(e)`` is the loader's; iterating it yields this rank's sample indices of the
    rest of the current epoch, in chute's order (what the loader's next pass reads);
    ``num_replicas``, ``rank``, ``epoch``, ``shuffle``, ``seed`` and ``drop_last`` are the
    order's.
    """

    def __init__(self, loader: Driven) -> None:  # no super().__init__(): all comes from order
        self._loader = loader

    @property
    def _order(self) -> Steps:
        return self._loader.order

    @property
    def num_replicas(self) -> int:  # type: ignore[override]
        return self._order.world_size

    @property
    def rank(self) -> int:  # type: ignore[override]
        return self._order.rank

    @property
    def epoch(self) -> int:  # type: ignore[override]
        return self._order.epoch

    @property
    def shuffle(self) -> bool:  # type: ignore[override]
        return bool(getattr(self._order, "shuffle", True))

    @property
    def seed(self) -> int:  # type: ignore[override]
        return int(getattr(self._order, "seed", 0))

    @property
    def drop_last(self) -> bool:  # type: ignore[override]
        return self._order.drop_last

    @property
    def num_samples(self) -> int:  # type: ignore[override]
        return len(self)

    def set_epoch(self, epoch: int) -> None:
        """Move the loader to ``epoch`` (``loader.set_epoch``)."""
        self._loader.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        for idx in self._order.plan():
            yield from idx.tolist()

    def __len__(self) -> int:
        return sum(len(idx) for idx in self._order.plan())

    def __repr__(self) -> str:
        return f"chute EpochSampler({self._order!r})"


class StepBatches(torch.utils.data.Sampler[Any]):
    """``chute.dataloader(...).batch_sampler``: this rank's batches of a pass; to a stack that
    shards it by position (accelerate's ``BatchSamplerShard``), every rank's, step by step
    (see the NOTE). ``sampler`` is the loader's :class:`EpochSampler`.

    ``with_epoch``: yield ``(epoch, indices)`` (a dataset whose samples depend on the epoch,
    a ``chute.mix``: the epoch travels with each batch to the worker processes);
    ``source``: a dataset in object storage, whose parts this rank's batches need this process
    downloads ahead of the workers, in the order the batches are handed to them;
    ``own_pass``: true while the loader starts a pass of its own (it started the order's pass
    itself; any other iteration starts one, as ``iter(loader)`` does).
    """

    def __init__(
        self,
        loader: Driven,
        sampler: EpochSampler,
        with_epoch: bool,
        source: Prefetching | None,
        own_pass: Callable[[], bool],
    ) -> None:
        self._loader = loader
        self.sampler = sampler
        self.with_epoch = with_epoch
        self.source = source
        self._own_pass = own_pass

    def set_epoch(self, epoch: int) -> None:
        """Move the loader to ``epoch`` (``loader.set_epoch``)."""
        self._loader.set_epoch(epoch)

    def _sharded(self) -> bool:
        """Whether a stack's ``BatchSamplerShard`` for this world is asking (the batches of
        every rank then); a sharder of another kind or world raises."""
        order = self._loader.order
        sharder = compat.batch_sharder()
        if sharder is None:
            return False
        world, rank, split = sharder
        if split or (world, rank) != (order.world_size, order.rank):
            raise FrameworkError(
                f"accelerate shards this chute.dataloader over {world} processes (this is "
                f"{rank}){', splitting each batch' if split else ''}, but chute's order is "
                f"sharded for rank {order.rank} of {order.world_size}: build the loader after "
                "Accelerator() without rank= / world_size= (chute then takes them from "
                "torch.distributed) and keep split_batches=False (docs/frameworks.md)"
            )
        return order.world_size > 1

    def __iter__(self) -> Iterator[Any]:
        sharded = self._sharded()
        if not self._own_pass():
            self._loader._start_pass()  # a new pass, as iter(loader) starts one
        order = self._loader.order
        plans = order.rank_plans() if sharded else [order.plan()]
        mine = order.rank if sharded else 0
        epoch = order.epoch  # now, as the plan: not when the generator first runs
        feed = None if self.source is None else self.source.prefetch(plans[mine])
        return self._steps(plans, mine, epoch, feed)

    def _steps(self, plans: list[Any], mine: int, epoch: int, feed: Feed | None) -> Iterator[Any]:
        try:
            for step in zip(*plans, strict=True):
                for r, idx in enumerate(step):
                    if feed is not None and r == mine:
                        feed.at(idx)  # a worker reads it next
                    yield (epoch, idx) if self.with_epoch else idx
        finally:
            if feed is not None:
                feed.close()

    def __len__(self) -> int:
        order = self._loader.order
        return len(order) * (order.world_size if self._sharded() else 1)


class LoaderBatches(torch.utils.data.Sampler[np.ndarray]):
    """``chute.Loader(...).batch_sampler``: this rank's batches of a pass (see the NOTE).

    ``refuse``: why a DataLoader built from it would not read what the Loader reads (its
    ``pad``, ``transform`` or per-epoch decode), or None."""

    def __init__(self, loader: Driven, sampler: EpochSampler, refuse: str | None) -> None:
        self._loader = loader
        self.sampler = sampler
        self._refuse = refuse

    def set_epoch(self, epoch: int) -> None:
        """Move the loader to ``epoch`` (``loader.set_epoch``)."""
        self._loader.set_epoch(epoch)

    def __iter__(self) -> Iterator[np.ndarray]:
        if self._refuse is not None:
            raise FrameworkError(
                "a torch DataLoader was built from this chute.Loader's batch_sampler (as "
                "accelerate's skip_first_batches and the HF Trainer's mid-epoch resume do); it "
                f"cannot {self._refuse} as the Loader does. Give the framework "
                "chute.dataloader(...) instead (a DataLoader, which it resumes exactly), or "
                "resume the Loader with load_state_dict (docs/frameworks.md)"
            )
        self._loader._start_pass()
        return iter(self._loader.order.plan())

    def __len__(self) -> int:
        return len(self._loader.order)
