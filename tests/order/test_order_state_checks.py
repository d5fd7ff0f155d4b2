"""``Order.load_state_dict`` with crafted values: every field is checked for type and range
before anything is sized or computed from it, with a chute error naming the key; the order
is left as it was."""

from __future__ import annotations

import numpy as np
import pytest
from _reliability import recorded

import chute
from chute import Order
from chute.errors import ArgumentValueError, ChuteError
from chute.order.by_tokens import BatchByTokens
from chute.order.steps import MAX_EPOCH

_row = recorded(
    {
        "test_bad_layout_is_refused_before_use": (
            "order state: layout",
            "a crafted part-aware layout",
            "ArgumentValueError before use; the order unchanged (was 3 GB / bare errors)",
        ),
        "test_layout_of_another_world_size_still_resumes": (
            "order state: layout",
            "a real layout of 3 ranks",
            "resumes",
        ),
        "test_layout_on_an_order_that_is_not_part_aware": (
            "order state: layout",
            "a layout given to a plain order",
            "ArgumentValueError",
        ),
        "test_wrong_types_are_chute_errors": (
            "order state: types",
            "a saved value of the wrong type",
            "ArgumentValueError naming the key (was a broadcast ValueError / silent)",
        ),
        "test_huge_and_negative_positions": (
            "order state: positions",
            "consumed out of range",
            "a chute error naming 'consumed'",
        ),
        "test_epoch_past_int64_is_refused_naming_it": (
            "order state: epoch",
            "an epoch of 2**63 or 10**30 in the state of an Order, a batch_tokens order and "
            "a Loader over chute.mix, and given to set_epoch",
            "ArgumentValueError naming state['epoch'] and the value (was OverflowError, or "
            "a bare SchemaError about a negative seed)",
        ),
        "test_mix_at_epochs_near_int64_reads_exact_counts": (
            "order state: epoch",
            "a Loader over chute.mix resumed at epoch 2**62 and 2**63 - 1",
            "loads; each source's exact count, the same batches again (was int64 overflow)",
        ),
        "test_batch_tokens_state_of_the_wrong_types": (
            "order state: types",
            "a batch_tokens state with an array or float n, batch_tokens, version",
            "ArgumentValueError naming the key (was 'truth value ... is ambiguous')",
        ),
    }
)


def parts_order() -> Order:
    return Order(300, 10, shuffle=True, parts=[100, 100, 100])


@pytest.mark.parametrize(
    "layout",
    [[10**8, 8], [0, 8], [2, 0], [1], "ab", [1.5, 8], [True, 8], [2, -1], {"a": 1}, 7],
)
def test_bad_layout_is_refused_before_use(layout: object) -> None:
    order = parts_order()
    state = {**order.state_dict(), "layout": layout}
    with pytest.raises(ArgumentValueError, match=r"state\['layout'\]"):
        order.load_state_dict(state)
    assert (order.epoch, order.consumed) == (0, 0)
    assert len(next(order.batches())) == 10  # still usable


def test_layout_of_another_world_size_still_resumes() -> None:
    saved = Order(300, 10, parts=[100, 100, 100], rank=1, world_size=3)
    next(saved.batches())
    order = parts_order()
    order.load_state_dict(saved.state_dict())
    assert order.state_dict()["layout"] == [3, 10]


def test_layout_on_an_order_that_is_not_part_aware() -> None:
    with pytest.raises(ArgumentValueError, match="only a part-aware order"):
        Order(300, 10).load_state_dict({"epoch": 0, "consumed": 0, "version": 2, "layout": [1, 10]})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("seed", np.array([0, 0])),  # would broadcast: "truth value is ambiguous"
        ("n", [300]),
        ("n", 300.0),
        ("shuffle", 1),
        ("block_size", 0),
        ("window", "4"),
        ("version", True),
        ("version", [2]),
        ("version", 2.0),
    ],
)
def test_wrong_types_are_chute_errors(key: str, value: object) -> None:
    order = Order(300, 10)
    state = {**order.state_dict(), key: value}
    with pytest.raises(ArgumentValueError, match=key if key != "version" else "version"):
        order.load_state_dict(state)
    assert (order.epoch, order.consumed) == (0, 0)


@pytest.mark.parametrize("consumed", [10**30, -(10**30), 301])
def test_huge_and_negative_positions(consumed: int) -> None:
    order = Order(300, 10)
    with pytest.raises(ChuteError, match="consumed"):
        order.load_state_dict({"epoch": 0, "consumed": consumed})


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> chute.Mix:
    root = tmp_path_factory.mktemp("mix")
    a = chute.open(chute.write(root / "a.chute", {"id": np.arange(30)}))
    b = chute.open(chute.write(root / "b.chute", {"id": np.arange(7) + 1000}))
    return chute.mix({"a": a, "b": b}, weights={"a": 3, "b": 1}, epoch_size=40)


def tokens_order() -> BatchByTokens:
    return BatchByTokens(np.arange(1, 41), 64, 8, seed=3)


@pytest.mark.parametrize("epoch", [2**63, 10**30])
def test_epoch_past_int64_is_refused_naming_it(mixed: chute.Mix, epoch: int) -> None:
    loader = chute.Loader(mixed, 8, num_workers=0)
    for target in (Order(300, 10), tokens_order(), loader):
        state = {**target.state_dict(), "epoch": epoch}
        with pytest.raises(ArgumentValueError, match=rf"state\['epoch'\].*got {epoch}"):
            target.load_state_dict(state)
    with pytest.raises(ArgumentValueError, match=rf"epoch must be at most .*got {epoch}"):
        loader.set_epoch(epoch)
    assert len(next(iter(loader))["id"]) == 8  # still usable, at epoch 0


@pytest.mark.parametrize("epoch", [2**62, MAX_EPOCH])
def test_mix_at_epochs_near_int64_reads_exact_counts(mixed: chute.Mix, epoch: int) -> None:
    def one_epoch() -> list[int]:
        loader = chute.Loader(mixed, 8, num_workers=0)
        loader.load_state_dict({**loader.state_dict(), "epoch": epoch})
        return [int(v) for batch in loader for v in batch["id"]]

    got = one_epoch()
    assert sum(v < 1000 for v in got) == 30 and sum(v >= 1000 for v in got) == 10
    assert set(got) <= set(range(30)) | set(range(1000, 1007))
    assert one_epoch() == got  # a pure function of (seed, epoch)
    for order in (Order(300, 10, block_size=16), Order(300, 10, parts=[100, 100, 100])):
        order.load_state_dict({"epoch": epoch, "consumed": 0})
        assert sorted(np.concatenate(list(order.batches())).tolist()) == list(range(300))
    by_tokens = tokens_order()
    by_tokens.load_state_dict({**by_tokens.state_dict(), "epoch": epoch})
    assert sorted(np.concatenate(by_tokens.epoch_batches()).tolist()) == list(range(40))


@pytest.mark.parametrize(
    ("key", "value"),
    [("n", np.array([40, 40])), ("n", 40.0), ("batch_tokens", np.array(64)), ("version", [1])],
)
def test_batch_tokens_state_of_the_wrong_types(key: str, value: object) -> None:
    order = tokens_order()
    with pytest.raises(ArgumentValueError, match=key):
        order.load_state_dict({**order.state_dict(), key: value})
    assert (order.epoch, order.consumed) == (0, 0)
