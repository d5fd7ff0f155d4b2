"""Checks and defaults for user arguments, shared by every stage: ints, paths, worker counts,
and the rank / world size of a distributed job."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ArgumentError, ArgumentValueError


def check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int >= ``minimum``: an :class:`ArgumentError` for another type, an
    :class:`ArgumentValueError` for a value too small, each naming the argument."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentError(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise ArgumentValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path: str) -> bool:
    """Whether ``path`` is a URL (``s3://bucket/x``, ``gs://...``, ``https://...``), not a
    local path: ``scheme://`` at its start."""
    return _URL.match(path) is not None


def check_path(path: Any) -> Path:
    """A local dataset path given by the user (``str``, ``bytes`` or ``os.PathLike``, not
    empty). Every stage that opens or writes a dataset (``open``, ``write``, ``Writer``,
    ``convert``, ``cache``) takes its path through here, so a URL is refused in one place
    rather than becoming a local folder named ``s3:``."""
    raw = path
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        raise ArgumentError(
            f"a dataset path is a str or os.PathLike, got {type(raw).__name__} {raw!r}"
        )
    if not path:
        raise ArgumentValueError("the dataset path is empty; name the folder, e.g. 'train.chute'")
    if is_url(path):
        scheme = path.partition("://")[0]
        raise ArgumentValueError(
            f"{path}: remote datasets ({scheme}://) are not supported here yet; copy the "
            "dataset to a local folder (or a mounted filesystem) and give that path"
        )
    return Path(path)


def parse_size(text: str | float) -> float:
    """A byte count: ``2e9``, ``"500MB"``, ``"2GB"``, ``"64MiB"`` (a number passes as it is)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str):
        raise ArgumentError(f"a size is a number of bytes or a str like '20GB', got {text!r}")
    units: dict[str, float] = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
    units |= {"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "b": 1}
    t = text.strip().lower()
    mult: float = 1
    for unit, m in units.items():
        if t.endswith(unit):
            t, mult = t[: -len(unit)], m
            break
    try:
        value = float(t) * mult
    except ValueError:
        raise ArgumentValueError(f"not a size: {text!r} (e.g. 2e9, 500MB, 2GB)") from None
    if not value >= 0:
        raise ArgumentValueError(f"a size must be >= 0, got {text!r}")
    return value


def default_workers() -> int:
    """Worker threads or processes by default: the CPUs this process may use, at most 4."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return min(4, cpus)


def dist_defaults(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """rank / world_size, defaulting to torch.distributed's when it is initialized."""
    import torch.distributed as dist

    initialized = dist.is_available() and dist.is_initialized()
    if rank is None:
        rank = dist.get_rank() if initialized else 0
    if world_size is None:
        world_size = dist.get_world_size() if initialized else 1
    return rank, world_size
