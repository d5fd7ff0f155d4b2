"""Weighted sampling (Loader(weights=, epoch_size=, replacement=)): empirical frequencies
against the weights (chi-square), no repeats without replacement, determinism, sharding and
exact resume through real Loader threads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import chute
from chute.order.weighted import WeightedOrder

W = np.array([1.0, 0.0, 2.0, 4.0, 8.0, 1.0, 0.5, 3.5])


def chi_square(counts: np.ndarray, p: np.ndarray) -> float:
    expected = counts.sum() * p
    keep = expected > 0
    assert (counts[~keep] == 0).all()  # weight 0: never drawn
    return float((((counts - expected) ** 2)[keep] / expected[keep]).sum())


def test_frequencies_follow_the_weights() -> None:
    order = WeightedOrder(W, 40_000, 1000, seed=3)
    counts = np.bincount(np.concatenate(list(order.batches())), minlength=len(W))
    # 6 degrees of freedom (7 non-zero weights): P(chi2 > 22.46) = 0.001
    assert chi_square(counts, W / W.sum()) < 22.46
    again = WeightedOrder(W, 40_000, 1000, seed=3)
    assert np.array_equal(again.global_order(0), order.global_order(0))
    assert not np.array_equal(order.global_order(0), order.global_order(1))


def test_without_replacement_draws_distinct_samples_by_weight() -> None:
    order = WeightedOrder(W, 3, 3, replacement=False)
    firsts = np.zeros(len(W))
    for epoch in range(3000):
        drawn = order.global_order(epoch)
        assert len(set(drawn.tolist())) == 3 and 1 not in drawn
        firsts[drawn[0]] += 1  # the first draw is weighted as one draw with replacement
    assert chi_square(firsts, W / W.sum()) < 22.46
    with pytest.raises(chute.ArgumentValueError, match="only 7 samples"):
        WeightedOrder(W, 8, 2, replacement=False)
    with pytest.raises(chute.ArgumentValueError, match="weights must be"):
        WeightedOrder([0.0, -1.0], 2, 2)


def test_ranks_split_each_step() -> None:
    whole = WeightedOrder(W, 24, 2, seed=1, world_size=1).global_order(0)
    ranks = [
        list(WeightedOrder(W, 24, 2, seed=1, rank=r, world_size=3).batches()) for r in range(3)
    ]
    steps = [np.concatenate([ranks[r][s] for r in range(3)]) for s in range(4)]
    assert np.array_equal(np.concatenate(steps), whole)


@pytest.mark.parametrize("replacement", [True, False])
def test_loader_weights_resume_exactly(tmp_path: Path, replacement: bool) -> None:
    dst = chute.write(tmp_path / "d.chute", {"x": np.arange(len(W))})
    ds = chute.open(dst)

    def make() -> chute.Loader:
        return chute.Loader(
            ds, 2, seed=5, num_workers=2, weights=W, epoch_size=6, replacement=replacement
        )

    loader = make()
    loader.set_epoch(2)
    full = [b["x"].tolist() for b in loader]
    assert len(full) == 3 and 1 not in np.concatenate(full)
    part = make()
    part.set_epoch(2)
    it = iter(part)
    next(it)
    state = part.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    assert [b["x"].tolist() for b in resumed] == full[1:]
    with pytest.raises(chute.ArgumentValueError, match="one weight per sample"):
        chute.Loader(ds, 2, weights=W[:3])
    with pytest.raises(chute.ArgumentValueError, match="excludes"):
        chute.Loader(ds, 2, weights=W, block_size=2)
