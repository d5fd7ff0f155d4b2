"""Batches by a token budget: variable sample counts, each batch's padded size under a budget.

Padding a batch of documents to its longest wastes compute when lengths vary (lognormal
corpora: 82% of a random batch was padding). :class:`BatchByTokens` groups samples of similar
length, as fairseq's ``batch_by_size`` and Hugging Face's ``group_by_length`` do, and is the
order the :class:`~chute.Loader` follows with ``batch_tokens=``:

* The epoch's samples in a shuffled order (:class:`~chute.order.permute.Permutation` of
  ``(seed, epoch)``), cut into windows of ``window`` samples; each window sorted by length,
  longest first, and cut into batches greedily: a batch takes samples while
  ``samples * longest <= batch_tokens`` (lengths counted as at least 1) and
  ``samples <= max_samples``. A sample longer than the budget is a batch of its own (cap it
  with ``Loader(max_length=)``). The batches of all windows are then put in a shuffled order
  (another Permutation of ``(seed, epoch)``), so long and short batches interleave.
* The epoch's batches are thus a pure function of ``(seed, epoch)``, the lengths and the
  budget: the same on every rank, whatever the world size. Global step ``j`` takes batches
  ``j * world_size ... + world_size - 1``, rank ``r`` the ``r``-th. When the batch count is not
  a multiple of the world size, the last step is filled by wrapping around to the epoch's
  first batches, so every rank runs the same number of steps (``ceil(batches / world)``; with
  ``drop_last`` the short step is dropped instead).
* The state is ``(epoch, batches consumed)``: resuming with another world size re-splits the
  rest of the epoch's batches, none repeated, none lost.

Memory: the epoch's batches, O(samples) (8 bytes a sample), made once per epoch; time
O(samples log window) for the sorts and Python per batch, never per sample.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .._args import check_int
from ..errors import ArgumentValueError
from .permute import Permutation
from .steps import Steps, check_epoch, check_position, same, same_int

__all__ = ["BatchByTokens"]

STATE_VERSION = 1
_STATE_KEYS = ("epoch", "consumed", "version", "n", "seed", "shuffle", "batch_tokens", "window")
_BATCH_KEY = 0x544F4B53  # "TOKS": the batch order's Permutation, apart from the samples'


class BatchByTokens(Steps):
    """The batches of every epoch for one rank, each under ``batch_tokens`` padded tokens
    (see the module doc). ``lengths``: each sample's length (int, ``>= 0``)."""

    def __init__(
        self,
        lengths: np.ndarray,
        batch_tokens: int,
        max_samples: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        window: int | None = None,
    ) -> None:
        self.lengths = np.maximum(np.asarray(lengths, np.int64), 1)
        self.n = len(self.lengths)
        self.batch_tokens = check_int("batch_tokens", batch_tokens, 1)
        self.batch_size = check_int("batch_size", max_samples, 1)  # the most samples a batch
        self.world_size = check_int("world_size", world_size, 1)
        self.rank = check_int("rank", rank, 0)
        if self.rank >= self.world_size:
            raise ArgumentValueError(
                f"rank must be < world_size ({self.world_size}), got {self.rank}"
            )
        self.seed = check_int("seed", seed, 0)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        # about HF's group_by_length: windows of 50 batches of the most samples
        self.window = check_int("window", 50 * self.batch_size if window is None else window, 1)
        super().__init__()  # its units: the epoch's batches, over all ranks
        self._cache: tuple[int, list[np.ndarray]] | None = None
        self._plan: tuple[tuple[int, int], list[np.ndarray]] | None = None  # the last plan()

    # ------------------------------------------------------------------ the epoch's batches

    def epoch_batches(self, epoch: int | None = None) -> list[np.ndarray]:
        """Every batch of ``epoch`` (default: the current one), in order: read-only int64
        sample indices, the same on every rank."""
        e = self._epoch if epoch is None else check_epoch("epoch", epoch)
        if self._cache is not None and self._cache[0] == e:
            return self._cache[1]
        idx = np.arange(self.n, dtype=np.int64)
        if self.shuffle:
            idx = Permutation(self.n, (self.seed, e))[idx]
        batches: list[np.ndarray] = []
        for a in range(0, self.n, self.window):
            chunk = idx[a : a + self.window]
            chunk = chunk[np.argsort(-self.lengths[chunk], kind="stable")]
            lens = self.lengths[chunk].tolist()
            i = 0
            while i < len(chunk):  # longest first: the batch's first sample sets its width
                take = max(1, min(self.batch_size, self.batch_tokens // lens[i], len(chunk) - i))
                batches.append(chunk[i : i + take])
                i += take
        if self.shuffle and batches:
            where = Permutation(len(batches), (self.seed, _BATCH_KEY, e))
            batches = [batches[j] for j in where[np.arange(len(batches))].tolist()]
        for b in batches:
            b.setflags(write=False)
        self._cache = (e, batches)
        return batches

    def padded_tokens(self, epoch: int | None = None) -> tuple[int, int]:
        """(tokens, padded size) summed over the batches of ``epoch``: how much padding the
        budget leaves, ``1 - tokens / padded``."""
        tokens = padded = 0
        for b in self.epoch_batches(epoch):
            lens = self.lengths[b]
            tokens += int(lens.sum())
            padded += int(lens.max()) * len(b)
        return tokens, padded

    # ------------------------------------------------------------------ steps, as Order's

    @property
    def step_samples(self) -> int:
        """Batches one global step consumes (one per rank): ``consumed // step_samples`` is
        the step, as for :class:`~chute.order.Order`."""
        return self.world_size

    def _units(self, epoch: int) -> int:
        return len(self.epoch_batches(epoch))

    def plan(self) -> list[np.ndarray]:
        """This rank's remaining batches of the current epoch; the state does not move. The
        dataset's ``prepare`` (:attr:`Steps.prepare <chute.order.steps.Steps.prepare>`) is
        given all of their indices at once."""
        key = (self._epoch, self._consumed)
        if self._plan is not None and self._plan[0] == key:
            return self._plan[1]
        batches = self.epoch_batches()
        g, w = len(batches), self.world_size
        steps = self._steps(g - self._consumed)
        mine = [batches[(self._consumed + k * w + self.rank) % g] for k in range(steps)]
        if self.prepare is not None and mine:
            self.prepare(np.concatenate(mine), self._epoch)
        self._plan = (key, mine)
        return mine

    # ------------------------------------------------------------------ resume

    def state_dict(self) -> dict[str, Any]:
        """``{"epoch", "consumed", "version"}`` plus what the batches depend on."""
        return {
            "epoch": self._epoch,
            "consumed": self._consumed,
            "version": STATE_VERSION,
            "n": self.n,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "batch_tokens": self.batch_tokens,
            "window": self.window,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume at a saved position, exactly, with any world size (same budget, seed and
        data; else an :class:`~chute.errors.ArgumentValueError` naming what differs)."""
        if not isinstance(state, Mapping) or "epoch" not in state or "consumed" not in state:
            raise ArgumentValueError(
                "a batch_tokens state is the dict that state_dict() returns, with 'epoch' and "
                f"'consumed'; got {state!r}"[:300]
            )
        unknown = sorted(str(k) for k in state if k not in _STATE_KEYS)
        if unknown or not same_int(state.get("version", STATE_VERSION), STATE_VERSION):
            raise ArgumentValueError(
                f"not a batch_tokens order state (keys {sorted(map(str, state))}, version "
                f"{state.get('version')!r}); resume a Loader(batch_tokens=) with what its "
                "state_dict() returned"
            )
        mine = self.state_dict()
        for key in _STATE_KEYS[3:]:
            if key in state and not same(state[key], mine[key]):
                raise ArgumentValueError(
                    f"the saved order has {key}={state[key]!r} but this one has "
                    f"{key}={mine[key]!r}; resume with the same dataset, seed and batch_tokens"
                )
        epoch, consumed = check_position(state)
        g = len(self.epoch_batches(epoch))
        if consumed > g:
            raise ArgumentValueError(
                f"state['consumed'] is {consumed} but epoch {epoch} has {g} batches"
            )
        self._epoch, self._consumed, self._chosen = epoch, consumed, True

    def __repr__(self) -> str:
        return (
            f"BatchByTokens(n={self.n}, batch_tokens={self.batch_tokens}, "
            f"max_samples={self.batch_size}, rank={self.rank}, world_size={self.world_size}, "
            f"epoch={self._epoch}, consumed={self._consumed})"
        )
