"""What :class:`~chute.Loader` and :func:`chute.dataloader` share: the epoch position, kept by
an :class:`~chute.order.Order`, and the rule that a loader runs one pass at a time.

A pass is the iterator that ``iter(loader)`` returns. The loader keeps a weak reference to the
live one; a newer ``iter()``, or a ``set_epoch`` / ``load_state_dict`` that moves the position,
ends it (its ``close(why)``), and it then raises :class:`~chute.errors.StaleIteratorError`
naming ``why`` rather than ending quietly.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any, Protocol

from .._args import dist_defaults
from ..errors import ArgumentError
from ..order import Order
from ..order.by_tokens import BatchByTokens
from ..order.parts import order_options
from ..reader.gatherable import Gatherable


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
    """Mixin: ``set_epoch``, ``state_dict``, ``load_state_dict`` over ``self.order``, and
    :meth:`_end_active` for the live pass (registered by the subclass's ``__iter__`` with
    :meth:`_track`)."""

    order: Order | BatchByTokens
    _active: weakref.ref[Any] | None = None
    _name = "loader"  # in StaleIteratorError messages: "the Loader", "the DataLoader"

    def _track(self, it: Pass) -> None:
        self._active = weakref.ref(it)

    def _end_active(self, why: str | None) -> None:
        it = self._active() if self._active is not None else None
        if it is not None:
            it.close(why)
        self._active = None

    def __len__(self) -> int:
        """Batches per rank in a whole epoch (:meth:`remaining`: what is left of this one)."""
        return len(self.order)

    def remaining(self) -> int:
        """Batches per rank still to come in the current epoch: ``len(loader)`` after a
        resume mid-epoch counts the whole epoch, this counts what the next pass will yield."""
        return self.order.remaining()

    def set_epoch(self, epoch: int) -> None:
        """Move to ``epoch`` (the same epoch again keeps a resumed position); another epoch
        ends a live pass."""
        before = self.order.epoch
        self.order.set_epoch(epoch)
        if epoch != before:
            self._end_active(f"set_epoch({epoch}) moved the {self._name} to another epoch")

    def state_dict(self) -> dict[str, Any]:
        """The order's state as of the last batch handed out: ``{"epoch", "consumed", ...}``."""
        return self.order.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at a saved state (any batch size / world size) on the next ``iter()``; ends
        a live pass."""
        self.order.load_state_dict(state)
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
) -> Order:
    """The :class:`~chute.order.Order` a loader of ``ds`` follows: ``rank`` / ``world_size``
    from torch.distributed or the launcher's environment when not given
    (:func:`chute._args.dist_defaults`), ``shuffle="parts"`` the part-aware order
    (``chute/order/parts.py``)."""
    rank, world_size = dist_defaults(rank, world_size)
    return Order(
        len(ds),
        batch_size,
        bool(shuffle),
        seed,
        rank,
        world_size,
        drop_last,
        block_size,
        **order_options(ds, shuffle),
    )
