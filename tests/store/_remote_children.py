"""Functions run in spawned child processes by tests/store/test_remote_dataset.py."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def read_all(url: str, cache_dir: str, env: dict[str, str], out: str) -> None:
    """Open ``url`` with its own client and read every sample with a Loader; write the
    sample ids seen."""
    os.environ.update(env)
    import chute

    ds = chute.open(url, cache_dir=cache_dir)
    seen: list[int] = []
    for b in chute.Loader(ds, 16, shuffle=True, num_workers=2):
        seen += b["x"][:, 0].long().tolist()
    Path(out).write_text(json.dumps(seen))


def read_rank(
    url: str, cache_dir: str, env: dict[str, str], rank: int, world: int, epochs: int, out: str
) -> None:
    """One rank of a simulated multi-node job: the part-aware shuffle, ``epochs`` epochs;
    write the sample ids of each epoch and the bytes this process downloaded by its end."""
    os.environ.update(env)
    import chute

    ds: Any = chute.open(url, cache_dir=cache_dir)
    loader = chute.Loader(
        ds, 10, shuffle="parts", seed=3, rank=rank, world_size=world, num_workers=2
    )
    epochs_seen, downloaded = [], []
    for e in range(epochs):
        loader.set_epoch(e)
        seen: list[int] = []
        for b in loader:
            seen += b["x"][:, 0].long().tolist()
        epochs_seen.append(seen)
        downloaded.append(ds.cache.store.stats["bytes_in"])  # this process, so far
    Path(out).write_text(json.dumps({"epochs": epochs_seen, "bytes": downloaded}))


def slow(batch: Any) -> Any:
    """A batch_transform that takes a while, as training does: the prefetch gets ahead."""
    import time

    time.sleep(0.03)
    return batch
