"""Order: which samples each rank reads at each step, as a pure function of ``(seed, epoch)``.

The epoch's *global order* is a permutation of ``range(n)`` that depends only on the seed, the
epoch and ``block_size``. With ``shuffle=True`` it is a :class:`~chute.order.permute.Permutation`
(a Feistel network), with ``block_size`` a :class:`~chute.order.blocks.BlockPermutation`, with
``parts=`` a :class:`~chute.order.part_shuffle.PartPermutation`; none is ever materialised: a rank's
batches are computed a chunk of ~32k positions at a time (:class:`~chute.order.plan.Plan`),
O(chunk) memory, a few us a batch, so an order over billions of samples costs nothing up front.
(chute 0.1 used ``rng.permutation(n)``: a seed gives another order than 0.1's; the properties
below are the same.)

Global step ``j`` takes the next ``batch_size * world_size`` positions of it and rank ``r``
takes the ``r``-th contiguous ``batch_size`` of them, so after ``k`` steps on every rank exactly
the first ``k * batch_size * world_size`` positions are consumed, whatever the rank count. That
number (and the epoch) is the whole state: resuming with a different world size re-splits the
rest of the epoch, none repeated, none lost.

The last step of an epoch may be short. Without ``drop_last`` its positions are split evenly
(``ceil(rest / world_size)`` each) and padded by wrapping around to the start of the epoch's
order, so every rank runs the same number of steps; with a single rank nothing is ever padded.
With ``drop_last`` the short step is dropped.

An epoch ends when an iterator of :meth:`Order.batches` runs past its last batch. An iterator
left after its last batch (``zip(range(len(loader)), loader)``, ``islice``, a ``break`` after
the last step) leaves the epoch *finished*; the next :meth:`Order.batches` then starts the
next epoch, rather than an empty rest of this one. Except right after ``set_epoch(e)`` or
``load_state_dict`` chose that finished position (a checkpoint saved after the last step of
epoch ``e``): that epoch is over, the next pass yields nothing and moves on to ``e + 1``.
:meth:`Order.restart` goes back to the start of the epoch (of the next one, from a finished
epoch no ``set_epoch`` chose): the loaders call it for every pass but the first after
``load_state_dict``, as a torch ``DataLoader`` starts each pass afresh.

Example::

    order = Order(len(ds), batch_size=256, seed=1, rank=rank, world_size=world)
    for epoch in range(start_epoch, epochs):
        order.set_epoch(epoch)            # keeps a resumed position within the same epoch
        for idx in order.batches():       # int64 index arrays for this rank
            train(ds.gather(idx))
            save({"order": order.state_dict(), ...})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .._args import check_int
from ..errors import ArgumentValueError
from .blocks import BlockPermutation
from .part_shuffle import PartPermutation
from .permute import Permutation, check_materialise
from .plan import Plan
from .steps import Steps, check_epoch, check_position, same, same_int

__all__ = ["Order", "Plan"]

_CHUNK = 1 << 20  # positions computed at once by global_order()
_INSTEAD = "iterate over Order.plan() / Order.batches(), which compute one batch at a time"

STATE_VERSION = 2  # of state_dict(); a state without "version" (chute 0.1) loads as version 1
# Version 2: the part-aware order became a sliding window (chute/order/part_shuffle.py). A version 1
# state loads unless it is of a part-aware order (it has "layout"): that order is gone.
MAX_WORLD = 1 << 20  # ranks a saved part-aware layout may name
_STATE_KEYS = (
    "epoch",
    "consumed",
    "version",
    "n",
    "seed",
    "shuffle",
    "block_size",
    "window",
    "parts",
    "layout",
)


class Order(Steps):
    """The sample order of every epoch for one rank: shuffled, sharded, resumable.

    ``block_size`` switches to a block shuffle for data larger than RAM: the order of contiguous
    blocks of ``block_size`` samples is shuffled, then samples are shuffled only within windows
    of ``window`` consecutive (shuffled) blocks. Reads stay near-sequential and the working set
    of a window is ``block_size * window`` samples, on any number of ranks.
    """

    def __init__(
        self,
        n: int,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        block_size: int | None = None,
        window: int = 4,
        parts: Sequence[int] | None = None,
    ) -> None:
        self.n = check_int("n", n, 0)
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.world_size = check_int("world_size", world_size, 1)
        self.rank = check_int("rank", rank, 0)
        if self.rank >= self.world_size:
            raise ArgumentValueError(
                f"rank must be < world_size ({self.world_size}), got {self.rank}"
            )
        self.seed = check_int("seed", seed, 0)
        self.block_size = None if block_size is None else check_int("block_size", block_size, 1)
        self.window = check_int("window", window, 1)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        # the part-aware shuffle (chute/order/part_shuffle.py): samples per part, in dataset order
        self.parts = None if parts is None else [int(c) for c in parts]
        if self.parts is not None and (sum(self.parts) != self.n or block_size is not None):
            raise ArgumentValueError(
                f"parts= must count the {self.n} samples part by part (got {sum(self.parts)}), "
                "and excludes block_size"
            )
        super().__init__()
        self._layout: tuple[int, int, int] | None = None  # (epoch, world, batch) of a resume
        self._cache: tuple[int, np.ndarray] | None = None  # (epoch, its read-only global order)
        self._parts_order: tuple[tuple[int, int, int], PartPermutation] | None = None
        # the last plan() and the position it was made at: a loader's Order.batches() and
        # plan() then share one (and its computed chunks)
        self._plan: tuple[tuple[Any, ...], Plan] | None = None

    @property
    def step_samples(self) -> int:
        """Samples one global step consumes: ``batch_size * world_size``."""
        return self.batch_size * self.world_size

    def _units(self, epoch: int) -> int:
        return self.n

    def global_order(self, epoch: int | None = None) -> np.ndarray:
        """The (read-only, int64) global order of ``epoch`` (default: the current one).

        Materialised: O(n) memory (8 bytes a sample; a :class:`~chute.errors.ChuteError` if
        that exceeds half the machine's RAM). The loaders never call it: :meth:`plan` computes
        a chunk of batches at a time.
        """
        epoch = self._epoch if epoch is None else check_epoch("epoch", epoch)
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1]
        check_materialise(self.n, 8, "Order.global_order()", _INSTEAD)
        if not self.shuffle:
            perm = np.arange(self.n, dtype=np.int64)
        else:
            lazy = self._lazy(epoch)
            perm = np.empty(self.n, np.int64)
            for a in range(0, self.n, _CHUNK):  # in chunks: no temporaries of size n
                b = min(self.n, a + _CHUNK)
                perm[a:b] = lazy[np.arange(a, b, dtype=np.int64)]
        perm.setflags(write=False)
        self._cache = (epoch, perm)
        return perm

    def _lazy(self, epoch: int) -> Permutation | BlockPermutation | PartPermutation:
        """The lazy global order of ``epoch`` (``shuffle=True``)."""
        if self.parts is not None:  # kept: its tables and the stretches it made
            world, batch = self._layout_of(epoch)
            key = (epoch, world, batch)
            if self._parts_order is None or self._parts_order[0] != key:
                perm = PartPermutation(self.parts, batch, world, self.window, self.seed, epoch)
                self._parts_order = (key, perm)
            return self._parts_order[1]
        return self._permutation(epoch) if self.block_size is None else self._blocks(epoch)

    def _blocks(self, epoch: int) -> BlockPermutation:
        """The lazy global order of ``epoch`` for ``shuffle=True`` with ``block_size``."""
        assert self.block_size is not None
        return BlockPermutation(self.n, self.block_size, self.window, self.seed, epoch)

    def _layout_of(self, epoch: int) -> tuple[int, int]:
        """(world size, batch size) that the part-aware order of ``epoch`` is laid out for:
        this order's, or a resumed epoch's own (see chute/order/part_shuffle.py)."""
        if self._layout is not None and self._layout[0] == epoch:
            return self._layout[1], self._layout[2]
        return self.world_size, self.batch_size

    def _permutation(self, epoch: int) -> Permutation:
        """The lazy global order of ``epoch`` for ``shuffle=True`` without ``block_size``."""
        return Permutation(self.n, (self.seed, epoch))

    def plan(self) -> Plan:
        """This rank's remaining batches of the current epoch; pure, the state does not move.

        A :class:`Plan`: a sequence of int64 index arrays, computed a chunk of batches at a
        time when indexed (bounded memory, whatever the shuffle). Used by loaders that
        prefetch: they gather ahead from the plan and let ``batches()`` track what the consumer
        actually received. Asked again at the same position, it returns the same Plan (with
        the chunks it has computed).
        """
        key = (self._epoch, self._consumed, self._layout)
        if self._plan is not None and self._plan[0] == key:
            return self._plan[1]
        lookup: Callable[[np.ndarray], np.ndarray]
        lookup = self._lazy(self._epoch).__getitem__ if self.shuffle else _identity
        hook, epoch = self.prepare, self._epoch
        prepare = None if hook is None else (lambda idx: hook(idx, epoch))
        plan = Plan(
            lookup,
            self.n,
            self._consumed,
            self.batch_size,
            self.rank,
            self.world_size,
            self.drop_last,
            prepare,
        )
        self._plan = (key, plan)
        return plan

    def _start(self, epoch: int) -> None:
        """Put the order at the start of ``epoch``, laid out for this world size."""
        super()._start(epoch)
        self._layout = None

    def state_dict(self) -> dict[str, Any]:
        """``{"epoch", "consumed", "version"}`` plus what the order depends on, checked at
        load."""
        return {
            "epoch": self._epoch,
            "consumed": self._consumed,
            "version": STATE_VERSION,
            "n": self.n,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "block_size": self.block_size,
            "window": self.window,
            **({} if self.parts is None else self._parts_state()),
        }

    def _parts_state(self) -> dict[str, Any]:
        return {"parts": len(self.parts or ()), "layout": list(self._layout_of(self._epoch))}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume at a saved position, exactly, with any batch size or world size.

        ``state`` is what :meth:`state_dict` returned: ``"epoch"`` and ``"consumed"`` are
        required; the other keys, checked against this order when present, must match.
        """
        if not isinstance(state, Mapping):
            raise ArgumentValueError(
                f"an Order state is the dict that state_dict() returns, not {type(state).__name__}"
            )
        problems = [f"no {key!r}" for key in ("epoch", "consumed") if key not in state]
        problems += [f"unknown key {k!r}" for k in sorted(map(str, state)) if k not in _STATE_KEYS]
        if problems:
            raise ArgumentValueError(
                f"not an Order state ({', '.join(problems)}); pass what state_dict() returned, "
                f"with the keys {', '.join(_STATE_KEYS)}"
            )
        version = state.get("version", 1)
        if not same_int(version, 1) and not same_int(version, STATE_VERSION):
            raise ArgumentValueError(
                f"the saved order state has version {version!r}; this chute reads versions 1 "
                f"and {STATE_VERSION}: resume with the chute that saved it"
            )
        if version == 1 and "layout" in state:
            raise ArgumentValueError(
                "the saved order state is of an older chute's part-aware order "
                "(shuffle='parts', state version 1), which this chute no longer computes: "
                "resume with the chute that saved it, or restart that epoch with "
                f"load_state_dict({{'epoch': {state['epoch']!r}, 'consumed': 0}})"
            )
        mine = {**self.state_dict(), "parts": None if self.parts is None else len(self.parts)}
        for key in _STATE_KEYS[3:9]:  # what the order depends on
            if key in state and not same(state[key], mine[key]):
                raise ArgumentValueError(
                    f"the saved order has {key}={state[key]!r} but this one has "
                    f"{key}={mine[key]!r}; resume with the same dataset and {key}"
                )
        epoch, consumed = check_position(state)
        if consumed > self.n:
            raise ArgumentValueError(
                f"state['consumed'] is {consumed} but the dataset has {self.n}"
            )
        layout = self._checked_layout(state.get("layout"))
        self._epoch, self._consumed = epoch, consumed
        self._chosen = True
        self._layout = None if layout is None else (epoch, *layout)
        self._cache = None

    def _checked_layout(self, layout: Any) -> tuple[int, int] | None:
        """A saved ``layout`` ([world size, batch size] of a part-aware epoch) checked before
        anything is sized from it: two ints, the world size at most ``MAX_WORLD`` and the
        samples (the part-aware order's tables are O(world size))."""
        if layout is None:
            return None
        if self.parts is None:
            raise ArgumentValueError(
                "the saved order state has a 'layout', which only a part-aware order "
                "(shuffle='parts') saves: resume with the same shuffle"
            )
        ok = isinstance(layout, (list, tuple)) and len(layout) == 2
        if not ok or not all(same_int(v, v) and v >= 1 for v in layout):
            raise ArgumentValueError(
                f"state['layout'] must be [world size, batch size], two ints >= 1, got {layout!r}"
            )
        world, batch = int(layout[0]), int(layout[1])
        if world > max(1, min(self.n, MAX_WORLD)):
            raise ArgumentValueError(
                f"state['layout'] says a world size of {world}, more than the {self.n} samples "
                f"(or {MAX_WORLD} ranks): not a state this dataset's order saved"
            )
        return world, batch

    def __repr__(self) -> str:
        return (
            f"Order(n={self.n}, batch_size={self.batch_size}, shuffle={self.shuffle}, "
            f"seed={self.seed}, rank={self.rank}, world_size={self.world_size}, "
            f"drop_last={self.drop_last}, block_size={self.block_size}, epoch={self._epoch}, "
            f"consumed={self._consumed})"
        )


def _identity(positions: np.ndarray) -> np.ndarray:
    return positions
