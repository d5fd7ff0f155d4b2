"""Weighted sampling as an order: each epoch is ``epoch_size`` draws of sample indices with
probabilities proportional to ``weights`` (torch's ``WeightedRandomSampler`` semantics, with
or without replacement), sharded, batched and resumed exactly as :class:`~chute.order.Order`.

Position ``p`` of epoch ``e`` is a pure function of ``(seed, e, p)``. With replacement, each
position draws alone (inverse CDF of its own uniform: O(1) to resume anywhere). Without
replacement, an epoch is the ``epoch_size`` samples of largest key ``u ** (1 / w)``
(Efraimidis-Spirakis: the weighted sampling without replacement that ``torch.multinomial``
does), in random order; computed once per epoch, O(len(weights)).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ArgumentValueError
from ..image.draws import uniforms
from .order import Order

__all__ = ["WeightedOrder"]


class WeightedOrder(Order):
    """An :class:`~chute.order.Order` over ``epoch_size`` weighted draws of ``len(weights)``
    samples (see the module doc). ``weights``: non-negative, finite, not all zero."""

    def __init__(
        self,
        weights: Any,
        epoch_size: int,
        batch_size: int,
        *,
        replacement: bool = True,
        **options: Any,
    ) -> None:
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
        if not (len(w) and np.isfinite(w).all() and (w >= 0).all() and w.sum() > 0):
            raise ArgumentValueError(
                "weights must be finite, >= 0 and not all zero, one per sample"
            )
        if not replacement and epoch_size > int((w > 0).sum()):
            raise ArgumentValueError(
                f"epoch_size={epoch_size} draws without replacement, but only "
                f"{int((w > 0).sum())} samples have a weight > 0"
            )
        super().__init__(epoch_size, batch_size, shuffle=True, **options)
        self.weights = w
        self.replacement = bool(replacement)
        self._cdf = np.cumsum(w) / w.sum()
        self._drawn: tuple[int, np.ndarray] | None = None  # (epoch, its draws) without replacement

    def _lazy(self, epoch: int) -> Any:
        return _Draws(self, epoch)

    def draws(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """The sample index at each of ``positions`` of ``epoch``'s order."""
        if self.replacement:
            u = uniforms(self.seed, epoch, positions, 0x57, 1)[:, 0]
            return np.minimum(np.searchsorted(self._cdf, u, side="right"), len(self.weights) - 1)
        if self._drawn is None or self._drawn[0] != epoch:
            u = uniforms(self.seed, epoch, np.arange(len(self.weights)), 0x58, 1)[:, 0]
            with np.errstate(divide="ignore"):
                keys = np.where(self.weights > 0, np.log(u) / self.weights, -np.inf)
            top = np.argsort(-keys, kind="stable")[: self.n]  # largest keys, in random order
            self._drawn = (epoch, top.astype(np.int64))
        return self._drawn[1][positions]


class _Draws:
    """``[positions]`` -> sample indices of one epoch (the lazy order a Plan looks up)."""

    def __init__(self, order: WeightedOrder, epoch: int) -> None:
        self.order, self.epoch = order, epoch

    def __getitem__(self, positions: np.ndarray) -> np.ndarray:
        return self.order.draws(self.epoch, np.asarray(positions, np.int64))
