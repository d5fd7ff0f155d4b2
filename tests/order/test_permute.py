"""chute.permute.Permutation: bijection, determinism, statistical quality; Order's lazy plan."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chute import ChuteError, Order
from chute.errors import SampleIndexError, SchemaError
from chute.order.permute import Permutation, check_materialise
from chute.order.plan import CHUNK, FIRST_CHUNK

seeds = st.integers(0, 2**64 - 1) | st.tuples(st.integers(0, 2**32), st.integers(0, 1000))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 3000), seeds)
def test_a_bijection_of_range_n(n, seed):
    perm = Permutation(n, seed)
    out = perm[np.arange(n, dtype=np.int64)]
    assert out.dtype == np.int64 and len(perm) == n
    assert np.array_equal(np.sort(out), np.arange(n))
    assert np.array_equal(perm.inverse(out), np.arange(n))


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 2**62), seeds, st.data())
def test_large_n_in_range_and_invertible(n, seed, data):
    pos = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=50)), np.int64)
    perm = Permutation(n, seed)
    out = perm[pos]
    assert ((out >= 0) & (out < n)).all()
    assert np.array_equal(perm.inverse(out), pos)
    assert len(np.unique(out)) == len(np.unique(pos))  # injective on what we asked


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 5000), seeds)
def test_deterministic_and_batch_independent(n, seed):
    pos = np.arange(n, dtype=np.int64)
    whole = Permutation(n, seed)[pos]
    assert np.array_equal(whole, Permutation(n, seed)[pos])
    if n:
        rng = np.random.default_rng(0)
        some = rng.integers(0, n, 37)
        assert np.array_equal(Permutation(n, seed)[some], whole[some])
        assert Permutation(n, seed)[int(some[0])] == whole[some[0]]
        shaped = rng.integers(0, n, (3, 4))
        assert np.array_equal(Permutation(n, seed)[shaped], whole[shaped])


def test_known_values_do_not_drift():
    """The same (n, seed) must give the same order on every machine and numpy version."""
    assert Permutation(10, 1)[np.arange(10)].tolist() == [5, 6, 2, 7, 8, 9, 3, 4, 1, 0]
    big = Permutation(10**9, (3, 4))[np.array([0, 1, 999_999_999])]
    assert big.tolist() == [995750300, 483463746, 345582597]


def test_small_n():
    assert Permutation(0, 5)[np.zeros(0, np.int64)].tolist() == []
    assert Permutation(1, 5)[np.array([0])].tolist() == [0]
    assert Permutation(1, 5)[0] == 0
    assert sorted(Permutation(2, 5)[np.array([0, 1])].tolist()) == [0, 1]
    with pytest.raises(SampleIndexError, match="position 1 is out of range"):
        Permutation(1, 0)[np.array([0, 1])]
    with pytest.raises(SampleIndexError):
        Permutation(0, 0)[0]
    with pytest.raises(SampleIndexError):
        Permutation(5, 0)[-1]


@pytest.mark.parametrize(
    ("n", "seed", "match"),
    [(-1, 0, "n must be an int >= 0"), (2.0, 0, "n must be"), (5, -1, "seed"), (5, 1.5, "seed")],
)
def test_bad_arguments(n, seed, match):
    with pytest.raises(SchemaError, match=match):
        Permutation(n, seed)


def test_seeds_and_n_change_the_permutation():
    orders = {
        Permutation(1000, (s, e))[np.arange(1000)].tobytes() for s in range(4) for e in range(4)
    }
    assert len(orders) == 16
    a, b = Permutation(1000, 1)[np.arange(999)], Permutation(999, 1)[np.arange(999)]
    assert not np.array_equal(a, b)


def _chi2_bound(df: int) -> float:
    """Upper 0.1% point of chi-square(df), Wilson-Hilferty approximation."""
    z = 3.09
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


@pytest.mark.parametrize("n", [10, 13, 64])
def test_each_position_is_uniform_over_seeds(n):
    """Where each sample lands, over 3000 seeds: every (position, value) cell equally likely."""
    seeds_ = 3000
    counts = np.zeros((n, n))
    pos = np.arange(n)
    for s in range(seeds_):
        counts[pos, Permutation(n, s)[pos]] += 1
    expected = seeds_ / n
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < _chi2_bound((n - 1) ** 2), chi2


def test_random_permutation_statistics():
    """Fixed points ~ Poisson(1), ascents ~ (n-1)/2, neighbours and position/value uncorrelated."""
    n = 2000
    pos = np.arange(n)
    fixed = [int((Permutation(n, s)[pos] == pos).sum()) for s in range(1000)]
    assert abs(np.mean(fixed) - 1) < 0.15 and abs(np.var(fixed) - 1) < 0.25
    big = 10**9
    pos = np.arange(200_000, dtype=np.int64)
    out = Permutation(big, 7)[pos].astype(np.float64)
    assert abs(np.corrcoef(out[:-1], out[1:])[0, 1]) < 0.015
    assert abs(np.corrcoef(pos, out)[0, 1]) < 0.015
    ascents = (np.diff(out) > 0).mean()
    assert abs(ascents - 0.5) < 0.01
    # the low bits too: uniform residues mod 16
    residues = np.bincount(out.astype(np.int64) % 16, minlength=16)
    expected = len(out) / 16
    assert ((residues - expected) ** 2 / expected).sum() < _chi2_bound(15)
    # two epochs' orders are unrelated
    other = Permutation(big, 8)[pos].astype(np.float64)
    assert abs(np.corrcoef(out, other)[0, 1]) < 0.015


def test_check_materialise_refuses_beyond_the_ram():
    check_materialise(1000, 8, "x", "y")
    with pytest.raises(ChuteError, match=r"Order.global_order\(\) would allocate .* GiB"):
        check_materialise(2**60, 8, "Order.global_order()", "do this")


# ---------------------------------------------------------------------------- Order's lazy plan


def test_order_of_a_billion_samples_costs_a_batch():
    """No O(n) allocation to order a huge dataset, and a ChuteError (not a
    MemoryError) where something would need it."""
    n = 2**40
    order = Order(n, 256, seed=3, world_size=4, rank=2)
    plan = order.plan()
    assert len(plan) == math.ceil(n / 1024)
    first = next(order.batches())
    assert first.dtype == np.int64 and len(first) == 256 and ((first >= 0) & (first < n)).all()
    assert np.array_equal(first, plan[0])
    assert np.array_equal(plan[-1], plan[len(plan) - 1])
    with pytest.raises(ChuteError, match=r"iterate over Order\.plan"):
        order.global_order()
    blocks = Order(n, 256, block_size=100).plan()  # the block shuffle is lazy too
    assert len(blocks[0]) == 256 and ((blocks[0] >= 0) & (blocks[0] < n)).all()


def test_plan_is_a_sequence_matching_the_global_order():
    order = Order(1000, 64, seed=2, world_size=3, rank=1)
    plan = order.plan()
    perm = order.global_order()
    assert len(plan) == len(order) == 6
    for j in range(5):
        assert np.array_equal(plan[j], perm[j * 192 + 64 : j * 192 + 128])
    assert [b.tolist() for b in plan[1:3]] == [plan[1].tolist(), plan[2].tolist()]
    assert np.array_equal(plan[-1], np.take(perm, np.arange(960 + 14, 960 + 28), mode="wrap"))
    with pytest.raises(IndexError):
        plan[6]
    assert not plan[0].flags.writeable


# -- the Feistel permutation written out position by position, in plain Python ints: the
# definition in chute/order/permute.py's docstring, independent of the vectorised code


def _fmix32(v: int) -> int:
    v ^= v >> 16
    v = (v * 0x85EBCA6B) & 0xFFFFFFFF
    v ^= v >> 13
    v = (v * 0xC2B2AE35) & 0xFFFFFFFF
    return v ^ (v >> 16)


def _reference(n: int, seed: tuple[int, ...], position: int) -> int:
    """``Permutation(n, seed)[position]``, one position, no numpy arithmetic."""
    if n <= 1:
        return position
    keys = [int(k) for k in np.random.SeedSequence([*seed, n]).generate_state(6, np.uint32)]
    bits = max(2, (n - 1).bit_length())
    hi, lo = [], []
    h, low = bits // 2, bits - bits // 2
    for _ in range(6):
        hi.append(h)
        lo.append(low)
        h, low = low, h
    x = position
    while True:
        a, b = x >> lo[0], x & ((1 << lo[0]) - 1)
        for key, h in zip(keys, hi, strict=True):
            a ^= _fmix32(b ^ key) & ((1 << h) - 1)
            a, b = b, a
        x = (a << hi[-1]) | b
        if x < n:
            return x


special_n = st.sampled_from([1, 2, 3, 4, 5, 2**10, 2**10 + 1, 2**20, 2**20 + 1, 10**6, 10**12])


@settings(max_examples=60, deadline=None)
@given(
    special_n | st.integers(1, 10**13),
    st.integers(0, 2**32),
    st.integers(0, 50),
    st.integers(1, 64),
    st.integers(1, 4),
    st.data(),
)
def test_plan_chunks_equal_the_position_wise_permutation(n, seed, epoch, batch, world, data):
    """A Plan looks batches up a chunk at a time (a smaller first one), through round tables
    once a permutation has been used enough: every batch equals the position-by-position
    definition, on either side of the chunks' edges too."""
    rank = data.draw(st.integers(0, world - 1))
    order = Order(n, batch, seed=seed, rank=rank, world_size=world)
    order.set_epoch(epoch)
    plan = order.plan()
    ks = data.draw(st.lists(st.integers(0, len(plan) - 1), min_size=1, max_size=4))
    step = batch * world
    first = max(1, FIRST_CHUNK // batch)  # the first chunk's batches, then CHUNK // batch
    edges = [first - 1, first, first + CHUNK // batch - 1, first + CHUNK // batch]
    for k in [*ks, len(plan) - 1, *(e for e in edges if e < len(plan))]:
        if (k + 1) * step <= n:
            pos = [k * step + rank * batch + i for i in range(batch)]
        else:  # the short last step, wrapped: as Plan's docstring says
            share = math.ceil((n - k * step) / world)
            pos = [(k * step + rank * share + i) % n for i in range(share)]
        assert plan[k].tolist() == [_reference(n, (seed, epoch), p) for p in pos]


@settings(max_examples=40, deadline=None)
@given(special_n | st.integers(1, 10**13), seeds, st.data())
def test_round_tables_give_the_same_values(n, seed, data):
    """With and without tabulated rounds, and against the plain-int definition."""
    pos = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=40)), np.int64)
    plain = Permutation(n, seed)
    tabled = Permutation(n, seed)
    tabled[np.zeros(1 << 15, np.int64)]  # enough use to tabulate (when n allows tables)
    words = (seed,) if isinstance(seed, int) else tuple(seed)
    expect = [_reference(n, words, int(p)) for p in pos]
    assert plain[pos].tolist() == tabled[pos].tolist() == expect
    assert tabled.inverse(tabled[pos]).tolist() == pos.tolist()
