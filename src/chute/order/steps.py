"""The step bookkeeping every order shares: an epoch is a number of *units* (positions of the
global order for :class:`~chute.order.Order`, whole batches for
:class:`~chute.order.by_tokens.BatchByTokens`), a global step consumes ``step_samples`` of them
over all ranks, and the state is ``(epoch, units consumed)``.

What a finished epoch, ``set_epoch``, ``restart`` and ``batches`` do with that state is
written down once, in the module doc of ``chute/order/order.py``; a subclass says how many
units an epoch has (:meth:`Steps._units`), how many a step takes (:attr:`Steps.step_samples`)
and what this rank's batches of the rest are (:meth:`Steps.plan`).
"""

from __future__ import annotations

import copy
import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .._args import check_int
from ..errors import ArgumentValueError

MAX_EPOCH = 2**63 - 1  # an int64, as checkpoints and torch hold it


def check_epoch(name: str, value: Any) -> int:
    """An epoch: an int from 0 to :data:`MAX_EPOCH`, else a chute error naming ``name``."""
    epoch = check_int(name, value, 0)
    if epoch > MAX_EPOCH:
        raise ArgumentValueError(f"{name} must be at most 2**63 - 1 (an int64), got {value!r}")
    return epoch


def check_position(state: Mapping[str, Any]) -> tuple[int, int]:
    """The saved ``(epoch, consumed)`` of an order state, each checked before anything is
    computed from it (an epoch past int64 would wrap in the seeds' arithmetic)."""
    return check_epoch("state['epoch']", state["epoch"]), check_int(
        "state['consumed']", state["consumed"], 0
    )


def same_int(saved: Any, mine: int) -> bool:
    """``saved`` is an int (not a bool) equal to ``mine``."""
    ok = isinstance(saved, (int, np.integer)) and not isinstance(saved, (bool, np.bool_))
    return ok and int(saved) == mine


def same(saved: Any, mine: Any) -> bool:
    """A saved state's value equals this order's (an int, a bool or None), whatever its
    type: never a comparison that raises or broadcasts."""
    if mine is None:
        return saved is None
    if isinstance(mine, bool):
        return isinstance(saved, (bool, np.bool_)) and bool(saved) == mine
    return same_int(saved, mine)


class Steps(ABC):
    """Epoch, units consumed, and the passes over them (see the module doc)."""

    n: int  # samples
    batch_size: int  # the most samples of a batch
    rank: int
    world_size: int
    drop_last: bool

    def __init__(self) -> None:
        self._epoch = 0
        self._consumed = 0  # units of the current epoch handed out, over all ranks
        # set_epoch / load_state_dict chose this position: a finished epoch stays put
        self._chosen = False
        self.prepare: Callable[[np.ndarray, int], object] | None = None
        """Called as ``prepare(indices, epoch)`` with the indices a plan computes, before any
        of them is handed out: the loaders set it to their dataset's ``prepare`` (a
        :class:`~chute.Mix` locates a whole chunk at once, in one vectorised call)."""

    # ------------------------------------------------------------------ what a subclass says

    @property
    @abstractmethod
    def step_samples(self) -> int:
        """Units one global step consumes, over all ranks: ``consumed // step_samples`` is
        the step."""

    @abstractmethod
    def _units(self, epoch: int) -> int:
        """Units in ``epoch``."""

    @abstractmethod
    def plan(self) -> Sequence[np.ndarray]:
        """This rank's remaining batches of the current epoch; the state does not move."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """``{"epoch", "consumed", "version"}`` plus what the order depends on."""

    @abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume at a saved position, exactly, with any world size."""

    # ------------------------------------------------------------------ shared

    @property
    def epoch(self) -> int:
        """The current epoch."""
        return self._epoch

    @property
    def consumed(self) -> int:
        """Units of the current epoch consumed so far, over all ranks."""
        return self._consumed

    def _steps(self, remaining: int) -> int:
        if self.drop_last:
            return remaining // self.step_samples
        return math.ceil(remaining / self.step_samples)

    def __len__(self) -> int:
        """Batches per rank in the whole current epoch (a resumed epoch yields
        ``len(plan())``)."""
        return self._steps(self._units(self._epoch))

    @property
    def finished(self) -> bool:
        """The current epoch was started and has no batch left (but was not moved past)."""
        left = self._units(self._epoch) - self._consumed
        return self._consumed > 0 and self._steps(left) == 0

    def remaining(self) -> int:
        """Batches per rank that the next pass yields: the rest of the current epoch, or all of
        the next one when this one is :attr:`finished` and was not chosen by ``set_epoch`` /
        ``load_state_dict`` (``len()`` is always a whole epoch)."""
        if self.finished and not self._chosen:
            return self._steps(self._units(self._epoch + 1))
        return self._steps(self._units(self._epoch) - self._consumed)

    def set_epoch(self, epoch: int) -> None:
        """Move to ``epoch``, from its start; the same epoch again keeps a resumed position
        (a finished one included: the next pass then yields nothing)."""
        epoch = check_epoch("epoch", epoch)
        if epoch != self._epoch:
            self._epoch = epoch
            self._consumed = 0
        self._chosen = True

    def restart(self) -> None:
        """Go back to the start of the current epoch, or of the next one when this one is
        :attr:`finished` and was not chosen by ``set_epoch`` / ``load_state_dict`` (a whole
        pass moves on to the next epoch's shuffle, a pass left early is run again whole)."""
        moves_on = self.finished and not self._chosen
        self._start(self._epoch + 1 if moves_on else self._epoch)

    def batches(self) -> Iterator[np.ndarray]:
        """Yield this rank's remaining batches of the epoch (int64 index arrays), recording
        each as consumed when it is handed out; at the epoch's end move to the next epoch.

        Called on a :attr:`finished` epoch, it first moves to the next one, unless
        ``set_epoch`` / ``load_state_dict`` chose that position. Loaders that prefetch call it
        before :meth:`plan`.
        """
        if self.finished and not self._chosen:
            self._start(self._epoch + 1)
        return self._advance(self._epoch, self.plan)

    def counted(self) -> Iterator[None]:
        """:meth:`batches`, yielding None for each batch instead of its indices (for a
        loader whose worker processes look them up: ``chute/loader/streams.py``)."""
        if self.finished and not self._chosen:
            self._start(self._epoch + 1)
        return self._advance(self._epoch, lambda: itertools.repeat(None, len(self.plan())))

    def rank_plans(self) -> list[Sequence[np.ndarray]]:
        """Every rank's :meth:`plan` (rank ``r``'s at index ``r``), at this position: the
        same number of batches each. For a stack that shards the batches itself
        (``chute/loader/samplers.py``)."""
        plans: list[Sequence[np.ndarray]] = []
        for r in range(self.world_size):
            other = self if r == self.rank else copy.copy(self)
            if other is not self:
                other.rank = r
                if "_plan" in vars(other):  # a subclass's cached plan is of self.rank
                    vars(other)["_plan"] = None
            plans.append(other.plan())
        return plans

    def _advance(self, epoch: int, plan: Callable[[], Iterable[Any]]) -> Iterator[Any]:
        total = self._units(epoch)
        for idx in plan():
            if self._epoch != epoch:  # set_epoch / load_state_dict while iterating
                return
            self._consumed = min(total, self._consumed + self.step_samples)
            self._chosen = False
            yield idx
        if self._epoch == epoch:
            self._start(self._epoch + 1)

    def _start(self, epoch: int) -> None:
        """Put the order at the start of ``epoch``."""
        self._epoch = epoch
        self._consumed = 0
        self._chosen = False
