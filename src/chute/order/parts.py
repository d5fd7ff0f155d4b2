"""The part-aware shuffle (``Loader(shuffle="parts")``): each rank reads its own share of
the parts, for datasets whose parts are fetched (object storage) or slow to seek.

The epoch's global order, for ``world`` ranks and batches of ``batch``: the parts are
shuffled, then dealt to the ranks, each part to the rank with the fewest samples so far
(ranks get the same number of samples to within one part). A rank's stream is its parts'
samples shuffled within a sliding window of ``window`` parts: the samples of its ``k``-th
part are shuffled and cut into ``window`` equal slices, slice ``d`` going to stretch
``k + d`` of the stream, and each stretch is shuffled. So a sample moves at most ``window``
parts from where its part starts, a batch draws from at most ``window`` (at a stretch's
edge ``window + 1``) consecutive parts, and the stream's first stretch needs the rank's first
part alone: the first batches wait for one part, not a window of them. Global step ``j``
then gives rank ``r`` the ``j``-th ``batch`` samples of stream ``r`` (the Order's usual
split of a step into contiguous rank slices), for as many steps as the shortest stream
fills; the samples left over (at most about one part per rank) end the epoch, split the
usual way.

So it is a permutation of the samples like any global order: every sample once per epoch,
equal steps per rank, and ``state_dict`` / resume exact. The order depends on ``(world,
batch)`` as well as the seed and epoch: the Order records the pair an epoch started with, and
a job resumed with another world size or batch size finishes that epoch in its order (each
rank then reads from every part, for the rest of that epoch only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ArgumentValueError


def part_shuffle(
    sizes: Sequence[int], batch: int, world: int, window: int, rng: np.random.Generator
) -> np.ndarray:
    """The global order (int64 sample indices) of the part-aware shuffle of parts of
    ``sizes`` samples, for ``world`` ranks taking ``batch`` samples a step."""
    counts = np.asarray(sizes, np.int64)
    starts = np.cumsum(counts) - counts
    load = np.zeros(world, np.int64)
    owned: list[list[int]] = [[] for _ in range(world)]
    for p in rng.permutation(len(counts)).tolist():
        r = int(np.argmin(load))
        owned[r].append(p)
        load[r] += counts[p]
    streams = [_sliding(parts, starts, counts, window, rng) for parts in owned]
    steps = min(len(s) for s in streams) // batch
    head = np.stack([s[: steps * batch].reshape(steps, batch) for s in streams], axis=1)
    tail = [s[steps * batch :] for s in streams]
    return np.concatenate([head.reshape(-1), *tail])


def _sliding(
    parts: list[int], starts: np.ndarray, counts: np.ndarray, window: int, rng: np.random.Generator
) -> np.ndarray:
    """One rank's stream: the samples of ``parts`` (in this order) shuffled within a sliding
    window of ``window`` parts (see the module docstring)."""
    if not parts:
        return np.zeros(0, np.int64)
    slices: list[list[np.ndarray]] = [[] for _ in range(len(parts) + window - 1)]
    for k, p in enumerate(parts):
        mine = rng.permutation(np.arange(starts[p], starts[p] + counts[p], dtype=np.int64))
        for d, piece in enumerate(np.array_split(mine, window)):
            slices[k + d].append(piece)
    stream = []
    for pieces in slices:
        stretch = np.concatenate(pieces)
        rng.shuffle(stretch)
        stream.append(stretch)
    return np.concatenate(stream) if stream else np.zeros(0, np.int64)


PARTS_WINDOW = 2  # the sliding window, in parts (a reader keeps 2 mapped, 2 prefetched)


def order_options(ds: Any, shuffle: bool | str) -> dict[str, Any]:
    """The :class:`~chute.order.Order` keywords of a loader's ``shuffle``: for ``"parts"``
    the samples per part of ``ds`` (a chute Dataset), else none."""
    if shuffle != "parts":
        if isinstance(shuffle, str):
            raise ArgumentValueError(f"shuffle is True, False or 'parts', got {shuffle!r}")
        return {}
    parts = getattr(ds, "parts", None)
    if parts is None:
        raise ArgumentValueError(
            f"shuffle='parts' needs a chute Dataset (its parts), not {type(ds).__name__}; "
            "a Subset or a mix is shuffled with shuffle=True"
        )
    return {"parts": [p.num_samples for p in parts], "window": PARTS_WINDOW}
