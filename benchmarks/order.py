"""What the sample order costs a loader per batch, for every kind of order, side by side.

    python benchmarks/order.py [--batches 2000] [--batch-size 256] [--rounds 5]
        [--json benchmarks/results/order.json]

Each row iterates ``--batches`` batches of one rank's plan the way a Loader does (the plan's
``plan[j]``, then ``Order.batches()`` handing the same batch out) and reports the microseconds
a batch costs, best of ``--rounds`` interleaved rounds:

* ``Order(shuffle=True)`` at n = 10**6 and 10**9 (the Feistel permutation), on 1 rank and on
  rank 3 of 8;
* ``shuffle=False`` (the floor: what the Plan's bookkeeping alone costs);
* the block shuffle (``block_size=4096``), the part-aware order (``parts=``, 1,000 parts);
* a ``chute.mix`` of three sources: the order plus the mix's ``locate()`` of each batch (the
  mix maps each position to a source and a sample: a second permutation, of random
  positions, done a chunk at a time through the order's ``prepare`` hook, as in the loaders);
* "looked up alone": the Feistel permutation of a single batch's 256 positions, what a batch
  cost when each was computed on its own (for comparison).

Target: <= 5 us a batch of 256 at n = 10**6 and 10**9 (next to a gather of ~120 us for 256
CIFAR-size samples). Wall time and this thread's CPU time, each the best of the rounds (on a
busy machine the CPU time is what an idle one would take). Prints a table and writes JSON;
never asserts on time.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _common import RESULTS, table, write_json

import chute
from chute.order import Order
from chute.order.permute import Permutation

COLUMNS = [
    ("row", "order", "s"),
    ("n", "n", ".0e"),
    ("us", "us / batch", ".2f"),
    ("cpu_us", "CPU us / batch", ".2f"),
]


class Clock:
    """Wall and this thread's CPU time of a block, per ``count``, in microseconds: on a busy
    machine the CPU time is what the order would cost on an idle one."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __enter__(self) -> Clock:
        self.wall, self.cpu = time.perf_counter(), time.thread_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.us = (time.perf_counter() - self.wall) / self.count * 1e6
        self.cpu_us = (time.thread_time() - self.cpu) / self.count * 1e6


def order_cost(order: Order, batches: int) -> Clock:
    """Microseconds a batch of ``order``: a fresh plan, each batch looked up as a Loader does
    (gathered from the plan, then handed out by ``batches()``), ``batches`` of them."""
    with Clock(batches) as clock:
        handed = order.batches()
        plan = order.plan()
        for j, idx in zip(range(batches), handed, strict=False):
            assert plan[j] is idx
    return clock


def rows_to_run(batches: int, bs: int) -> list[tuple[str, int, Callable[[], Clock]]]:
    """(name, n, a function returning us per batch) of every row."""

    def lone(n: int) -> Callable[[], Clock]:
        perm = Permutation(n, (0, 0))
        rng = np.random.default_rng(0)
        pos = [np.arange(s, s + bs, dtype=np.int64) for s in rng.integers(0, n - bs, 200)]

        def run() -> Clock:
            with Clock(len(pos)) as clock:
                for p in pos:
                    perm[p]
            return clock

        return run

    def of(n: int, **kw: Any) -> Callable[[], Clock]:
        return lambda: order_cost(Order(n, bs, **kw), batches)

    def mixed() -> Callable[[], Clock]:
        sizes = {"web": 400_000, "books": 350_000, "code": 250_000}
        folder = tempfile.mkdtemp(prefix="chute-order-")
        for name, size in sizes.items():
            chute.write(f"{folder}/{name}", {"x": np.zeros(size, np.int8)})
        mix = chute.mix({name: chute.open(f"{folder}/{name}") for name in sizes})
        order = Order(len(mix), bs, seed=0)
        order.prepare = mix.prepare  # as the loaders do

        def run() -> Clock:
            order._plan = None  # a fresh plan each round: nothing located yet
            with Clock(batches) as clock:
                plan = order.plan()
                for j in range(batches):
                    mix.locate(plan[j])
            return clock

        return run

    parts = [1000] * 1000
    return [
        ("shuffle=True, 1 rank", 10**6, of(10**6)),
        ("shuffle=True, 1 rank", 10**9, of(10**9)),
        ("shuffle=True, rank 3 of 8", 10**9, of(10**9, rank=3, world_size=8)),
        ("shuffle=False", 10**9, of(10**9, shuffle=False)),
        ("block_size=4096", 10**9, of(10**9, block_size=4096)),
        ("parts= (1,000 parts)", 10**6, of(10**6, parts=parts)),
        ("+ mix locate (3 sources)", 10**6, mixed()),
        ("Feistel, a batch looked up alone", 10**6, lone(10**6)),
        ("Feistel, a batch looked up alone", 10**9, lone(10**9)),
    ]


def measure(batches: int = 2000, batch_size: int = 256, rounds: int = 5) -> list[dict[str, Any]]:
    """Every row's best us per batch (wall and CPU, each the best) over ``rounds`` interleaved
    rounds."""
    todo = rows_to_run(batches, batch_size)
    rows = [{"row": r, "n": n, "us": math.inf, "cpu_us": math.inf} for r, n, _ in todo]
    for _ in range(rounds):
        for row, (_, _, run) in zip(rows, todo, strict=True):
            clock = run()
            row["us"] = min(row["us"], clock.us)
            row["cpu_us"] = min(row["cpu_us"], clock.cpu_us)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path, default=RESULTS / "order.json")
    args = ap.parse_args()
    rows = measure(args.batches, args.batch_size, args.rounds)
    print(table(rows, COLUMNS))
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(f"\nwrote {write_json(args.json, {'rows': rows})}")


if __name__ == "__main__":
    main()
