"""chute.Order: property tests of coverage, sharding, determinism and resume."""

from __future__ import annotations

import inspect
import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from chute import Order
from chute.errors import ArgumentError, ArgumentValueError

sizes = st.integers(0, 300)
batch_sizes = st.integers(1, 40)
worlds = st.integers(1, 5)
seeds = st.integers(0, 2**32)
block_sizes = st.none() | st.integers(1, 50)


def run_epoch(n, batch_size, world, **kw) -> list[list[np.ndarray]]:
    """Each rank's batches for one epoch: result[rank][step]."""
    return [
        list(Order(n, batch_size, rank=r, world_size=world, **kw).batches()) for r in range(world)
    ]


def stream(per_rank: list[list[np.ndarray]]) -> np.ndarray:
    """The global stream: step by step, rank by rank."""
    steps = len(per_rank[0])
    return np.concatenate(
        [per_rank[r][j] for j in range(steps) for r in range(len(per_rank))] or [np.array([], int)]
    )


@settings(max_examples=150, deadline=None)
@given(sizes, batch_sizes, seeds, block_sizes, st.booleans())
def test_single_rank_sees_every_sample_once(n, bs, seed, block_size, shuffle):
    order = Order(n, bs, shuffle=shuffle, seed=seed, block_size=block_size)
    batches = list(order.batches())
    assert len(batches) == len(order) == math.ceil(n / bs)
    assert all(len(b) == bs for b in batches[:-1])
    seen = np.concatenate(batches) if batches else np.array([], np.int64)
    assert seen.dtype == np.int64
    assert np.array_equal(np.sort(seen), np.arange(n))
    if not shuffle:
        assert np.array_equal(seen, np.arange(n))


@settings(max_examples=150, deadline=None)
@given(sizes, batch_sizes, worlds, seeds, block_sizes)
def test_ranks_get_equal_disjoint_shares(n, bs, world, seed, block_size):
    per_rank = run_epoch(n, bs, world, seed=seed, block_size=block_size)
    steps = {len(b) for b in per_rank}
    assert steps == {math.ceil(n / (bs * world))}
    for j in range(steps.pop()):  # same batch size on every rank at every step
        assert len({len(per_rank[r][j]) for r in range(world)}) == 1
    total = stream(per_rank)
    padding = len(total) - n
    assert 0 <= padding < world
    assert np.array_equal(np.sort(total[:n]), np.arange(n))  # padding only at the very end
    perm = Order(n, bs, seed=seed, block_size=block_size).global_order()
    assert np.array_equal(total[:n], perm)  # global step j = positions [j*B*W, (j+1)*B*W)
    if padding:  # padding wraps around to the start of the order
        assert np.array_equal(total[n:], np.take(perm, np.arange(padding), mode="wrap"))


@settings(max_examples=100, deadline=None)
@given(sizes, batch_sizes, worlds, seeds)
def test_drop_last_gives_full_disjoint_batches(n, bs, world, seed):
    per_rank = run_epoch(n, bs, world, seed=seed, drop_last=True)
    steps = n // (bs * world)
    assert [len(b) for b in per_rank] == [steps] * world
    assert len(Order(n, bs, world_size=world, drop_last=True)) == steps
    total = stream(per_rank)
    assert all(len(b) == bs for rank in per_rank for b in rank)
    assert len(np.unique(total)) == len(total) == steps * bs * world


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 300), batch_sizes, seeds, block_sizes, st.integers(0, 5))
def test_order_is_a_pure_function_of_seed_and_epoch(n, bs, seed, block_size, epoch):
    a = Order(n, bs, seed=seed, block_size=block_size)
    b = Order(n, 3 * bs, seed=seed, block_size=block_size, world_size=2, rank=1)
    a.set_epoch(epoch)
    b.set_epoch(epoch + 1)  # batch size, rank, world size and history do not matter
    assert np.array_equal(a.global_order(), b.global_order(epoch))


def test_epochs_and_seeds_change_the_order():
    orders = {Order(1000, 10, seed=s).global_order(e).tobytes() for s in range(3) for e in range(3)}
    assert len(orders) == 9


@settings(max_examples=150, deadline=None)
@given(sizes, batch_sizes, worlds, worlds, seeds, block_sizes, st.data())
def test_resume_with_another_world_size_is_exact(n, bs, world1, world2, seed, block_size, data):
    kw = {"seed": seed, "block_size": block_size}
    perm = Order(n, bs, **kw).global_order(3)
    first = [Order(n, bs, rank=r, world_size=world1, **kw) for r in range(world1)]
    for o in first:
        o.set_epoch(3)
    done = data.draw(st.integers(0, len(first[0])))
    seen = []
    iters = [o.batches() for o in first]
    for _ in range(done):
        seen.extend(next(it) for it in iters)
    states = [o.state_dict() for o in first]
    assert all(s == states[0] for s in states)  # every rank agrees on the state
    assert states[0]["epoch"] == 3
    assert states[0]["consumed"] == min(n, done * bs * world1)

    bs2 = data.draw(batch_sizes)
    second = [Order(n, bs2, rank=r, world_size=world2, **kw) for r in range(world2)]
    for o in second:
        o.load_state_dict(states[0])
        o.set_epoch(3)  # the usual training loop calls this: it must keep the position
    rest = [list(o.batches()) for o in second]
    assert {len(r) for r in rest} == {len(rest[0])}
    total = np.concatenate([*seen, stream(rest)]) if seen else stream(rest)
    assert np.array_equal(total[:n], perm)  # none repeated, none lost, in order
    assert len(total) - n < max(world1, world2)
    assert all(o.epoch == 4 and o.consumed == 0 for o in second)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 400), st.integers(1, 30), st.integers(1, 5), seeds)
def test_block_shuffle_keeps_windows_local(n, block_size, window, seed):
    order = Order(n, 7, seed=seed, block_size=block_size, window=window)
    perm = order.global_order()
    assert np.array_equal(np.sort(perm), np.arange(n))
    span = block_size * window
    # Any run of `span` consecutive positions touches at most 2 windows' worth of blocks
    # (+2 for the short last block shifting the window boundaries).
    for start in range(0, n, span):
        blocks = np.unique(perm[start : start + span] // block_size)
        assert len(blocks) <= 2 * window + 2


def test_block_shuffle_moves_blocks_and_samples():
    perm = Order(10_000, 8, seed=1, block_size=100, window=4).global_order()
    blocks = perm // 100
    first_blocks = np.unique(blocks[:400])
    assert len(first_blocks) == 4 and not np.array_equal(first_blocks, np.arange(4))
    assert not np.array_equal(np.sort(perm[:400]), perm[:400])  # shuffled inside the window


def test_epoch_rolls_over_after_the_last_batch():
    order = Order(10, 4, seed=0)
    it = order.batches()
    for _ in range(3):
        next(it)
    assert (order.epoch, order.consumed) == (0, 10)  # last batch handed out, epoch not over yet
    assert list(it) == []
    assert (order.epoch, order.consumed) == (1, 0)
    order.set_epoch(1)
    assert order.plan()[0].tolist() == order.global_order(1)[:4].tolist()


def test_set_epoch_keeps_position_only_in_the_same_epoch():
    order = Order(100, 10)
    next(order.batches())
    order.set_epoch(0)
    assert order.consumed == 10 and len(order.plan()) == 9
    order.set_epoch(2)
    assert (order.epoch, order.consumed) == (2, 0) and len(order.plan()) == 10


def test_plan_is_read_only_and_pure():
    order = Order(50, 8, seed=3)
    plan = order.plan()
    assert order.consumed == 0 and len(plan) == len(order) == 7
    with pytest.raises(ValueError):
        plan[0][0] = 1


def test_state_from_another_order_is_refused():
    state = Order(100, 10, seed=1).state_dict()
    with pytest.raises(ArgumentValueError, match="seed"):
        Order(100, 10, seed=2).load_state_dict(state)
    with pytest.raises(ArgumentValueError, match="n=100"):
        Order(99, 10, seed=1).load_state_dict(state)
    with pytest.raises(ArgumentValueError, match="consumed"):
        Order(100, 10, seed=1).load_state_dict({"epoch": 0, "consumed": 101})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n": -1}, "n must be >= 0"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"world_size": 0}, "world_size must be >= 1"),
        ({"rank": 2, "world_size": 2}, "rank must be < world_size"),
        ({"rank": -1}, "rank must be >= 0"),
        ({"seed": -5}, "seed must be >= 0"),
        ({"block_size": 0}, "block_size must be >= 1"),
        ({"batch_size": 2.5}, "batch_size must be an int"),
    ],
)
def test_bad_arguments(kwargs, match):
    args = {"n": 10, "batch_size": 2, **kwargs}
    with pytest.raises(ArgumentError if "an int" in match else ArgumentValueError, match=match):
        Order(**args)
    assert issubclass(ArgumentValueError, ValueError) and issubclass(ArgumentError, TypeError)


def take_epoch(order: Order, how: str) -> list[list[int]]:
    """One pass over the rest of the epoch: run to its end ("for"), or every batch taken but
    the iterator left before its end ("zip": the last next() is never made)."""
    it = order.batches()
    if how == "for":
        return [idx.tolist() for idx in it]
    return [next(it).tolist() for _ in range(len(order.plan()))]


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 300),
    batch_sizes,
    worlds,
    seeds,
    st.booleans(),
    st.lists(st.sampled_from(["for", "zip"]), min_size=1, max_size=5),
    st.data(),
)
def test_an_epoch_taken_without_stopiteration_is_over(n, bs, world, seed, drop_last, hows, data):
    """Whether or not a pass ran its iterator to the end, the next pass is the next epoch,
    whole: never an empty rest of a finished one."""
    rank = data.draw(st.integers(0, world - 1))
    kw = {"seed": seed, "rank": rank, "world_size": world, "drop_last": drop_last}
    order = Order(n, bs, **kw)
    assume(len(order) > 0)  # (an epoch of no step is never started, so never finished)
    for epoch, how in enumerate(hows):
        want = Order(n, bs, **kw)
        want.set_epoch(epoch)
        assert take_epoch(order, how) == [idx.tolist() for idx in want.plan()]
        assert order.epoch == epoch + (how == "for")


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 300), batch_sizes, seeds, st.booleans(), st.integers(0, 5))
def test_a_finished_epoch_chosen_explicitly_stays_finished(n, bs, seed, drop_last, epoch):
    """A checkpoint saved after the last step of ``epoch``, resumed (load_state_dict, then the
    loop's set_epoch): that epoch is over, the pass yields nothing and moves to the next."""
    saved = Order(n, bs, seed=seed, drop_last=drop_last)
    saved.set_epoch(epoch)
    take_epoch(saved, "zip")
    state = saved.state_dict()
    for how in ("load", "set_epoch", "both"):
        order = Order(n, bs, seed=seed, drop_last=drop_last)
        if how == "set_epoch":
            order = saved
            order.set_epoch(epoch)
        else:
            order.load_state_dict(state)
            if how == "both":
                order.set_epoch(epoch)
        if len(order) == 0:  # no step in an epoch: nothing was consumed, nothing is finished
            continue
        assert order.finished
        assert take_epoch(order, "for") == [] and (order.epoch, order.consumed) == (epoch + 1, 0)


def test_explicit_set_epoch_then_a_whole_epoch_moves_on():
    order = Order(10, 4)
    order.set_epoch(3)
    assert len(take_epoch(order, "zip")) == 3 and order.finished
    assert len(take_epoch(order, "zip")) == 3 and order.epoch == 4  # consumption clears it


@pytest.mark.parametrize(
    ("state", "match"),
    [
        ({}, "no 'epoch', no 'consumed'"),
        ({"epoch": 1}, "no 'consumed'"),
        ({"epoch": 1, "consumed": 0, "step": 3}, "unknown key 'step'"),
        ({"epoch": "1", "consumed": 0}, r"state\['epoch'\] must be an int"),
        ({"epoch": 1, "consumed": 2.5}, r"state\['consumed'\] must be an int"),
        ({"epoch": -1, "consumed": 0}, r"state\['epoch'\] must be >= 0"),
        ({"epoch": 1, "consumed": 0, "shuffle": "yes"}, "shuffle='yes'"),
        ([1, 0], "not list"),
    ],
)
def test_a_malformed_state_names_the_key(state, match):
    order = Order(10, 2)
    with pytest.raises(ArgumentError if "an int" in match else ArgumentValueError, match=match):
        order.load_state_dict(state)
    assert (order.epoch, order.consumed) == (0, 0)


def test_a_hand_made_state_with_the_two_required_keys_is_enough():
    order = Order(10, 2)
    order.load_state_dict({"epoch": 2, "consumed": 4})
    assert (order.epoch, order.consumed, len(order.plan())) == (2, 4, 3)


def test_options_after_batch_size_are_keyword_only():
    with pytest.raises(TypeError):
        Order(10, 2, False)
    params = inspect.signature(Order).parameters.values()
    positional = [p.name for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    assert positional == ["n", "batch_size"]


def test_restart_reruns_an_epoch_left_early_and_moves_past_a_finished_one():
    order = Order(10, 2, seed=1)
    it = order.batches()
    next(it), next(it)
    order.restart()  # left early: the same epoch, from its start
    assert (order.epoch, order.consumed, len(order.plan())) == (0, 0, 5)
    list(itertools.islice(order.batches(), 5))  # its last batch, without StopIteration
    assert order.finished
    order.restart()  # finished: the next epoch
    assert (order.epoch, order.consumed) == (1, 0)
    list(itertools.islice(order.batches(), 5))
    order.set_epoch(1)  # a finished epoch chosen by set_epoch: run again, whole
    order.restart()
    assert (order.epoch, order.consumed, len(order.plan())) == (1, 0, 5)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 300),
    bs=st.integers(1, 40),
    world=st.integers(1, 3),
    drop_last=st.booleans(),
    data=st.data(),
)
def test_plan_rows_are_the_plans_batches(n, bs, world, drop_last, data):
    order = Order(n, bs, seed=5, rank=world - 1, world_size=world, drop_last=drop_last)
    plan = order.plan()
    a = data.draw(st.integers(0, len(plan)))
    b = data.draw(st.integers(a, len(plan)))
    assert [r.tolist() for r in plan.rows(a, b)] == [plan[j].tolist() for j in range(a, b)]


def test_counted_advances_as_batches_does():
    counted, batches = Order(50, 8, seed=1), Order(50, 8, seed=1)
    a, b = counted.counted(), batches.batches()
    for _ in range(3):
        assert next(a) is None and next(b) is not None
    assert counted.state_dict() == batches.state_dict()
    assert len(list(a)) == len(list(b)) == len(counted) - 3
    assert counted.epoch == batches.epoch == 1
