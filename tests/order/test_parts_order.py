"""The part-aware shuffle (chute/order/part_shuffle.py): a permutation, each rank on its own parts,
equal steps, exact resume with another world size."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chute.errors import ArgumentValueError
from chute.order import Order


def epoch(sizes, batch, world, seed=0, e=0, drop_last=False):
    orders = [
        Order(
            sum(sizes),
            batch,
            seed=seed,
            rank=r,
            world_size=world,
            drop_last=drop_last,
            parts=sizes,
            window=2,
        )
        for r in range(world)
    ]
    for o in orders:
        o.set_epoch(e)
    return [list(o.batches()) for o in orders]


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=12),
    batch=st.integers(1, 9),
    world=st.integers(1, 4),
    seed=st.integers(0, 3),
)
def test_every_sample_once_equal_steps(sizes, batch, world, seed):
    runs = epoch(sizes, batch, world, seed)
    assert len({len(r) for r in runs}) == 1
    got = np.concatenate([b for r in runs for b in r])
    n = sum(sizes)
    assert set(got.tolist()) == set(range(n))  # padding wraps around: a few repeats at most
    assert len(got) - n < batch * world


def test_each_rank_reads_its_own_parts():
    sizes = [50] * 16
    runs = epoch(sizes, 10, 4, seed=1)
    ends = np.cumsum(sizes)
    owners: dict[int, set[int]] = {}
    for r, batches in enumerate(runs):
        for b in batches:
            for p in np.unique(np.searchsorted(ends, b, side="right")).tolist():
                owners.setdefault(p, set()).add(r)
    assert all(len(o) == 1 for o in owners.values())  # no part is read by two ranks
    other = epoch(sizes, 10, 4, seed=1, e=1)
    assert [b.tolist() for b in other[0]] != [b.tolist() for b in runs[0]]  # per epoch


def test_resume_across_world_size_is_exact():
    sizes = [30, 25, 40, 35, 20, 50]
    n = sum(sizes)
    a = [Order(n, 8, seed=5, rank=r, world_size=2, parts=sizes, window=2) for r in range(2)]
    its = [o.batches() for o in a]
    first = [next(it) for it in its for _ in range(3)]
    state = a[0].state_dict()
    assert state["layout"] == [2, 8]
    b = [Order(n, 5, seed=5, rank=r, world_size=3, parts=sizes, window=2) for r in range(3)]
    rest = []
    for o in b:
        o.load_state_dict(state)
        rest += list(o.batches())
    got = np.concatenate(first + rest).tolist()
    assert set(got) == set(range(n)) and len(got) - n < 5 * 3  # only the last step pads
    with pytest.raises(ArgumentValueError):
        Order(n, 8, parts=[1, 2])


def test_sliding_window_first_batches_need_one_part():
    """The stream's first stretch is a slice of the rank's first part alone, so the first
    batches wait for one part; later a batch spans at most window + 1 consecutive parts of
    the rank."""
    sizes = [64] * 12
    ends = np.cumsum(sizes)
    for seed in range(3):
        for batches in epoch(sizes, 16, 2, seed=seed):
            parts = [np.unique(np.searchsorted(ends, b, side="right")).tolist() for b in batches]
            assert len(parts[0]) == 1 and parts[0] == parts[1]  # 64 / 2 = 32: two batches
            order = list(dict.fromkeys(p for ps in parts for p in ps))  # as first read
            for ps in parts:
                ks = [order.index(p) for p in ps]
                assert max(ks) - min(ks) <= 2  # window 2: at most 3 parts, consecutive


def test_never_materialised_2_40_samples():
    """2**40 samples in 4,096 parts on 64 ranks: the order is tables of O(parts); a batch is
    looked up alone, and each rank's first batch lies in its first part."""
    import time

    sizes = [2**28] * 4096
    ends = np.cumsum(sizes)
    t = time.perf_counter()
    seen = []
    for r in (0, 63):
        o = Order(2**40, 256, seed=7, rank=r, world_size=64, parts=sizes, window=2)
        plan = o.plan()
        first, later = plan[0], plan[10**6]
        assert len(first) == 256 and len(set(first.tolist())) == 256
        assert len(np.unique(np.searchsorted(ends, first, side="right"))) == 1
        assert later.min() >= 0 and later.max() < 2**40
        seen.append(int(np.searchsorted(ends, first[0], side="right")))
    assert seen[0] != seen[1]  # each rank starts on a part of its own
    assert time.perf_counter() - t < 20  # seconds, not the hours of 2**40 samples


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=10),
    batch=st.integers(1, 7),
    world=st.integers(1, 3),
    made=st.sampled_from([0, 3, 1 << 20]),
)
def test_lookups_agree_whatever_the_path(sizes, batch, world, made):
    """A batch's fast path (one rank's consecutive positions), the general lookup (any
    positions) and stretches made whole or computed lazily (``MADE``) give one permutation."""
    from chute.order import part_shuffle as parts

    old = parts._Stream.MADE
    parts._Stream.MADE = made
    try:
        perm = parts.PartPermutation(sizes, batch, world, 2, seed=1, epoch=2)
        n = sum(sizes)
        everything = perm[np.arange(n)[::-1]][::-1]  # reversed: never the fast path
        assert sorted(everything.tolist()) == list(range(n))
        by_batch = np.concatenate(
            [perm[np.arange(a, min(a + batch, n))] for a in range(0, n, batch)]
        )
        assert np.array_equal(by_batch, everything)
    finally:
        parts._Stream.MADE = old


def test_an_older_part_aware_state_is_refused_a_plain_one_loads():
    sizes = [30, 25, 40]
    o = Order(95, 8, seed=5, parts=sizes, window=2)
    old = {**o.state_dict(), "version": 1, "consumed": 16}
    with pytest.raises(ArgumentValueError, match="older chute's part-aware order"):
        o.load_state_dict(old)
    o.load_state_dict({"epoch": 0, "consumed": 0})  # the advice works
    plain = Order(95, 8, seed=5)
    plain.load_state_dict({**plain.state_dict(), "version": 1, "consumed": 16})
    assert plain.state_dict()["consumed"] == 16 and plain.state_dict()["version"] == 2
