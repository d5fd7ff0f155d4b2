"""What :class:`~chute.Loader` and :func:`chute.dataloader` share: the epoch position, kept by
an :class:`~chute.order.Order`, where a pass starts, and the rule that a loader runs one pass at
a time.

A pass is the iterator that ``iter(loader)`` returns. As with torch's ``DataLoader`` (and
``StatefulDataLoader``), every pass is the whole current epoch from its start, so a ``break``
or a ``next(iter(loader))`` peek costs the following ``for`` loop nothing; the one exception is
the first pass after ``load_state_dict``, which resumes at the saved position. The current epoch
is the one ``set_epoch`` chose; a pass that handed out the epoch's last batch moves it on to
the next, so two ``for`` loops without ``set_epoch`` get two epochs' shuffles (as with torch's
``shuffle=True``). To continue where a pass stopped, say so:
``loader.load_state_dict(loader.state_dict())``.

The loader keeps a weak reference to the live pass; a newer ``iter()``, or a ``set_epoch`` /
``load_state_dict`` that moves the position, ends it (its ``close(why)``), and it then raises
:class:`~chute.errors.StaleIteratorError` naming ``why`` rather than ending quietly.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import numpy as np

from .._args import check_int, dist_defaults
from ..errors import ArgumentError, ArgumentValueError, FrameworkError
from ..order import Order
from ..order.by_tokens import BatchByTokens
from ..order.part_shuffle import order_options
from ..order.steps import Steps
from ..order.weighted import WeightedOrder
from ..reader.gatherable import Gatherable, PerEpoch
from ..reader.remote import warn_thrash
from ..reader.tokens import token_lengths


def unknown_keywords(who: str, unknown: Iterable[str], valid: Iterable[str]) -> ArgumentError:
    """The error for keywords ``unknown`` given to loader ``who``, listing the ``valid`` ones
    (a typo such as ``num_workerz`` must not pass silently, nor reach torch's own message)."""
    return ArgumentError(
        f"{who} got unknown keyword argument(s) {sorted(unknown)}; valid ones are "
        f"{', '.join(sorted(valid))}"
    )


class Pass(Protocol):
    """A live pass of a loader: it can be ended, saying why (None: ended by ``close()``)."""

    def close(self, why: str | None = None) -> None: ...


class OnePass:
    """Mixin: ``set_epoch``, ``state_dict``, ``load_state_dict`` over ``self.order``,
    :meth:`_start_pass` for a new pass, and :meth:`_end_active` for the live pass (registered
    by the subclass's ``__iter__`` with :meth:`_track`)."""

    order: Steps
    _active: weakref.ref[Any] | None = None
    _resume = False  # load_state_dict chose where the next pass starts
    _name = "loader"  # in StaleIteratorError messages: "the Loader", "the DataLoader"
    _shard_given = True  # rank= or world_size= given: no check against torch.distributed

    def _start_pass(self, counted: bool = False) -> Iterator[Any]:
        """The order's batches for a new pass: the current epoch from its start, or right
        after ``load_state_dict`` the saved position (see the module doc); ``counted``: None
        for each (``Order.counted()``)."""
        self._check_world()
        if not self._resume:
            self.order.restart()
        self._resume = False
        return self.order.counted() if counted else self.order.batches()

    def _check_world(self) -> None:
        """A loader whose rank and world size were not given took them when it was made
        (``chute._args.dist_defaults``); a process group that runs another rank or world now
        means it was made before the group started (a Lightning module's ``__init__``, outside
        Ray Train's training function): each rank would read another rank's share or all of
        it. That is an error, not a silent repeat."""
        if self._shard_given:
            return
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return
        now, made = (
            (dist.get_rank(), dist.get_world_size()),
            (self.order.rank, self.order.world_size),
        )
        if now != made:
            raise FrameworkError(
                f"this {self._name} was made as rank {made[0]} of {made[1]}, but "
                f"torch.distributed runs rank {now[0]} of {now[1]}: it was made before the "
                "process group started, and its ranks would not share the data. Make it after "
                "(in Lightning's train_dataloader(), inside Ray Train's training function, after "
                "Accelerator()), or pass rank= and world_size= (docs/frameworks.md)"
            )

    def _track(self, it: Pass) -> None:
        self._active = weakref.ref(it)

    def _end_active(self, why: str | None) -> None:
        it = self._active() if self._active is not None else None
        if it is not None:
            it.close(why)
        self._active = None

    def __len__(self) -> int:
        """Batches per rank in a whole epoch (:meth:`remaining`: what the next pass yields)."""
        return len(self.order)

    def remaining(self) -> int:
        """Batches per rank that the next pass yields: ``len(loader)``, or after
        ``load_state_dict`` what the saved position left of its epoch."""
        return self.order.remaining() if self._resume else len(self.order)

    def set_epoch(self, epoch: int) -> None:
        """Make ``epoch`` the one the next pass runs, from its start (the same epoch again
        keeps a position ``load_state_dict`` chose); another epoch ends a live pass."""
        before = self.order.epoch
        self.order.set_epoch(epoch)
        if epoch != before:
            self._resume = False
            self._end_active(f"set_epoch({epoch}) moved the {self._name} to another epoch")

    def state_dict(self) -> dict[str, Any]:
        """The order's state as of the last batch handed out: ``{"epoch", "consumed", ...}``."""
        return self.order.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at a saved state (any batch size / world size) on the next ``iter()``; ends
        a live pass. ``load_state_dict(state_dict())`` continues where the last pass stopped."""
        self.order.load_state_dict(state)
        self._resume = True
        self._end_active(f"load_state_dict() moved the {self._name} to a saved position")


def make_order(
    ds: Gatherable,
    batch_size: int,
    shuffle: bool | str,
    seed: int,
    rank: int | None,
    world_size: int | None,
    drop_last: bool,
    block_size: int | None,
    *,
    batch_tokens: int | None = None,
    measured: Gatherable | None = None,
    max_length: int | None = None,
    weights: Any = None,
    epoch_size: int | None = None,
    replacement: bool = True,
    who: str = "Loader",
) -> Steps:
    """The order a loader of ``ds`` follows, the one place that picks it: ``weights=`` a
    :class:`~chute.order.weighted.WeightedOrder`, ``batch_tokens=`` a
    :class:`~chute.order.by_tokens.BatchByTokens` over the lengths of ``measured`` (the
    dataset before ``max_length`` / ``decode`` wrapped it; lengths capped at ``max_length``),
    else an :class:`~chute.order.Order` (``shuffle="parts"`` the part-aware order of
    ``chute/order/part_shuffle.py``, ``block_size`` the block shuffle). ``rank`` / ``world_size``
    come from torch.distributed or the launcher's environment when not given
    (:func:`chute._args.dist_defaults`). Every kind warns about a global shuffle over a remote
    dataset's small cache, is given the dataset's ``prepare`` and starts at the epoch a mix
    was moved to. ``who``: the loader, in error messages."""
    rank, world_size = dist_defaults(rank, world_size)
    common: dict[str, Any] = {
        "seed": seed,
        "rank": rank,
        "world_size": world_size,
        "drop_last": drop_last,
    }
    order: Steps
    if weights is not None:  # chute/order/weighted.py
        if batch_tokens is not None or block_size is not None or shuffle == "parts":
            raise ArgumentValueError(
                "weights= draws its own order: it excludes batch_tokens=, block_size= and "
                "shuffle='parts'"
            )
        order = weighted_order(ds, weights, epoch_size, replacement, batch_size, common)
    elif batch_tokens is not None:  # chute/order/by_tokens.py
        if block_size is not None or shuffle == "parts":
            raise ArgumentValueError(
                "batch_tokens= shuffles within length-sorted windows of its own: it "
                "excludes block_size= and shuffle='parts'"
            )
        lengths = token_lengths(ds if measured is None else measured, f"{who}(batch_tokens=)")
        if max_length is not None:
            lengths = np.minimum(lengths, max_length)
        order = BatchByTokens(lengths, batch_tokens, batch_size, shuffle=bool(shuffle), **common)
    else:
        options = order_options(ds, shuffle)  # the part-aware order's parts
        order = Order(
            len(ds), batch_size, shuffle=bool(shuffle), block_size=block_size, **common, **options
        )
    warn_thrash(ds, shuffle)  # a global shuffle over a remote dataset's small cache
    order.prepare = getattr(ds, "prepare", None)  # e.g. a Mix locates each chunk at once
    first = getattr(ds, "epoch", 0) if isinstance(ds, PerEpoch) else 0
    if first:  # a mix moved on with set_epoch: its loaders start there, not at epoch 0
        order.set_epoch(first)
    return order


def weighted_order(
    ds: Gatherable,
    weights: Any,
    epoch_size: int | None,
    replacement: bool,
    batch_size: int,
    common: dict[str, Any],
) -> WeightedOrder:
    """The order of a loader given ``weights=`` (``chute/order/weighted.py``): one weight per
    sample of ``ds``, ``epoch_size`` draws an epoch (default ``len(ds)``); ``common``: seed,
    rank, world size and drop_last."""
    if len(np.asarray(weights).reshape(-1)) != len(ds):
        raise ArgumentValueError(
            f"weights= needs one weight per sample ({len(ds)}), got "
            f"{len(np.asarray(weights).reshape(-1))}"
        )
    size = len(ds) if epoch_size is None else check_int("epoch_size", epoch_size, 1)
    return WeightedOrder(weights, size, batch_size, replacement=replacement, **common)
