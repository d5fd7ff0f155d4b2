"""Checks and defaults for user arguments, shared by every stage: ints, paths, worker counts,
and the rank / world size of a distributed job."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .errors import ArgumentError, ArgumentValueError


def one_index(i: Any, refusal: str) -> int:
    """``i`` as the int that indexes one sample of a Gatherable (an int, a numpy int, or a
    0-d tensor); anything else an :class:`ArgumentError` saying ``refusal``, then the type."""
    if isinstance(i, torch.Tensor) and i.ndim == 0:
        i = i.item()
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
        raise ArgumentError(f"{refusal}, not {type(i).__name__}")
    return int(i)


def check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int >= ``minimum``: an :class:`ArgumentError` for another type, an
    :class:`ArgumentValueError` for a value too small, each naming the argument."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentError(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise ArgumentValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


URL_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")
"""``scheme://`` at the start of a string: a URL, not a local path (group 1: the scheme)."""


def is_url(path: str) -> bool:
    """Whether ``path`` is a URL (``s3://bucket/x``, ``gs://...``, ``https://...``), not a
    local path: ``scheme://`` at its start."""
    return URL_SCHEME.match(path) is not None


def check_path(path: Any) -> Path:
    """A local dataset path given by the user (``str``, ``bytes`` or ``os.PathLike``, not
    empty). Every stage that opens or writes a local dataset takes its path through here
    (``open``, ``write``, ``Writer`` and ``convert`` route URLs to object storage first), so a
    URL anywhere else is refused in one place rather than becoming a local folder ``s3:``."""
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
            f"{path}: this takes a local path; remote datasets ({scheme}://) are opened with "
            "chute.open(url) and written with chute.write / chute.Writer / chute.convert to "
            "a URL, and `chute upload` / `chute download` copy them (docs/remote.md)"
        )
    return Path(path)


_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([kmgtp]?)(i?)b?\s*", re.IGNORECASE)
_DECIMAL = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}


def parse_size(size: int | float | str, what: str = "a size") -> int:
    """Bytes from an int, ``2e9``, ``"20GB"``, ``"1.5 GiB"``, ``"500M"``. Decimal units are
    powers of 1000, ``KiB``/``MiB``/``GiB`` powers of 1024. ``what`` names it in errors."""
    if isinstance(size, bool) or not isinstance(size, (int, float, str)):
        raise ArgumentError(f"{what} is a number of bytes or a str like '20GB', got {size!r}")
    n: float
    if isinstance(size, str):
        try:
            n = float(size)
        except ValueError:
            m = _SIZE.fullmatch(size)
            if m is None:
                raise ArgumentValueError(
                    f"{what} {size!r} is not a size like '20GB', '512MiB' or 2e9"
                ) from None
            unit = m.group(2).lower()
            scale = 1024 ** ("kmgtp".index(unit) + 1) if m.group(3) and unit else _DECIMAL[unit]
            n = float(m.group(1)) * scale
    else:
        n = size
    if not n >= 0 or n == float("inf"):
        raise ArgumentValueError(f"{what} must be a finite size >= 0, got {size!r}")
    return int(n)


def usable_cpus() -> int:
    """The CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_workers() -> int:
    """Worker threads or processes by default: the CPUs this process may use, at most 4."""
    return min(4, usable_cpus())


def dist_defaults(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """rank / world_size when not given: ``torch.distributed``'s when it is initialized, else
    the launcher's environment (``RANK`` / ``WORLD_SIZE``, set by ``torchrun`` and
    ``torch.distributed.launch`` before ``init_process_group`` is called), else 0 / 1.

    The environment is read on purpose: a loader built before ``init_process_group`` under
    torchrun must not silently be rank 0 of 1 on every rank (each would train on the same
    data). A malformed variable is an :class:`ArgumentValueError` naming it."""
    import torch.distributed as dist

    initialized = dist.is_available() and dist.is_initialized()
    if rank is None:
        rank = dist.get_rank() if initialized else _env_int("RANK", 0, 0)
    if world_size is None:
        world_size = dist.get_world_size() if initialized else _env_int("WORLD_SIZE", 1, 1)
    return rank, world_size


def _env_int(name: str, default: int, minimum: int) -> int:
    """The launcher's integer variable ``name`` (``default`` when unset or empty)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ArgumentValueError(
            f"the environment variable {name}={raw!r} (set by the launcher, e.g. torchrun) is "
            f"not an int >= {minimum}; fix it, or pass rank= and world_size= explicitly"
        )
    return value
