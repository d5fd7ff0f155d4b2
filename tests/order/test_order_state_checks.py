"""``Order.load_state_dict`` with crafted values: every field is checked for type and range
before anything is sized or computed from it, with a chute error naming the key; the order
is left as it was."""

from __future__ import annotations

import numpy as np
import pytest
from _reliability import recorded

from chute import Order
from chute.errors import ArgumentValueError, ChuteError

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
