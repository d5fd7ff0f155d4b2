"""The part-aware shuffle (``Loader(shuffle="parts")``): each rank reads its own share of
the parts, for datasets whose parts are fetched (object storage) or slow to seek.

The epoch's global order, for ``world`` ranks and batches of ``batch``: the parts are
shuffled, then dealt to the ranks, each part to the rank with the fewest samples so far
(ranks get the same number of samples to within one part); a rank's stream is its parts'
samples, shuffled within windows of ``window`` consecutive parts. Global step ``j`` then
gives rank ``r`` the ``j``-th ``batch`` samples of stream ``r`` (the Order's usual split of a
step into contiguous rank slices), for as many steps as the shortest stream fills; the
samples left over (at most about one part per rank) end the epoch, split the usual way.

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
    streams = []
    for parts in owned:
        chunks = []
        for w in range(0, len(parts), window):
            group = parts[w : w + window]
            idx = np.concatenate(
                [np.arange(starts[p], starts[p] + counts[p], dtype=np.int64) for p in group]
            )
            rng.shuffle(idx)
            chunks.append(idx)
        streams.append(np.concatenate(chunks) if chunks else np.zeros(0, np.int64))
    steps = min(len(s) for s in streams) // batch
    head = np.stack([s[: steps * batch].reshape(steps, batch) for s in streams], axis=1)
    tail = [s[steps * batch :] for s in streams]
    return np.concatenate([head.reshape(-1), *tail])


PARTS_WINDOW = 2  # parts whose samples are shuffled together (as many as a reader keeps mapped)


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
