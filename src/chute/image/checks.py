"""Checks at the edges of the augmentations: each op's parameters when it is built, and the
batch, draws and sample rows each public entry is given, so that nothing reaches the
compiled kernels of :mod:`chute.image.kernels` (which check no index) that could make them
read or write outside the batch. Every check is O(1) or one pass over the rows.

A wrong type is an :class:`~chute.errors.ArgumentError` (a ``TypeError``), a value that cannot
work an :class:`~chute.errors.ArgumentValueError` (a ``ValueError``); each message names the
op, the parameter and what it accepts."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..errors import ArgumentError, ArgumentValueError

__all__ = [
    "check_batch",
    "check_draws",
    "check_exact",
    "check_rows",
    "integer",
    "number",
    "pair",
    "probability",
    "size2",
]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def number(
    op: str,
    name: str,
    value: Any,
    lo: float = -math.inf,
    hi: float = math.inf,
    *,
    above: bool = False,
) -> float:
    """``value`` as a finite float in ``[lo, hi]`` (``(lo, hi]`` when ``above``)."""
    if not _is_number(value):
        raise ArgumentError(f"{op}: {name} must be a number, got {value!r}")
    v = float(value)
    low_ok = v > lo if above else v >= lo
    if not (math.isfinite(v) and low_ok and v <= hi):
        span = f"{'(' if above else '['}{lo:g}, {hi:g}]"
        raise ArgumentValueError(f"{op}: {name} must be a finite number in {span}, got {value!r}")
    return v


def probability(op: str, name: str, value: Any) -> float:
    """``value`` as a probability in [0, 1]."""
    return number(op, name, value, 0.0, 1.0)


def pair(
    op: str, name: str, value: Any, lo: float = 0.0, hi: float = math.inf
) -> tuple[float, float]:
    """``value`` as a ``(low, high)`` pair of finite numbers, ``lo < low <= high <= hi``."""
    if not (isinstance(value, (tuple, list)) and len(value) == 2 and all(map(_is_number, value))):
        raise ArgumentError(f"{op}: {name} must be a (low, high) pair of numbers, got {value!r}")
    a, b = float(value[0]), float(value[1])
    if not (math.isfinite(a) and math.isfinite(b) and lo < a <= b <= hi):
        raise ArgumentValueError(
            f"{op}: {name} must be finite with {lo:g} < low <= high <= {hi:g}, got {value!r}"
        )
    return a, b


def integer(op: str, name: str, value: Any, lo: int, hi: int) -> int:
    """``value`` as an int in ``[lo, hi]``."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise ArgumentError(f"{op}: {name} must be an int, got {value!r}")
    if not lo <= value <= hi:
        raise ArgumentValueError(f"{op}: {name} must be an int in [{lo}, {hi}], got {value!r}")
    return int(value)


def check_batch(
    op: str, out: Any, channels: tuple[int, ...] | None = (3,), contiguous: bool = True
) -> None:
    """``out`` is what the kernels work on in place: a uint8 ``(B, C, H, W)`` tensor on the
    CPU, ``C`` one of ``channels`` (None: any), contiguous when ``contiguous``."""
    c = "C" if channels is None else " or ".join(map(str, channels))
    want = f"a{' contiguous' if contiguous else ''} uint8 (B, {c}, H, W) tensor on the CPU"
    if not isinstance(out, torch.Tensor):
        raise ArgumentError(f"{op} takes {want}, got {type(out).__name__}")
    got = f"{out.dtype} {tuple(out.shape)} on {out.device}"
    if out.dtype != torch.uint8 or out.device.type != "cpu":
        raise ArgumentError(f"{op} takes {want}, got {got}")
    if out.dim() != 4 or (channels is not None and out.shape[1] not in channels):
        raise ArgumentValueError(f"{op} takes {want}, got {got}")
    if contiguous and not out.is_contiguous():
        raise ArgumentValueError(f"{op} takes {want}, got a non-contiguous {got} (.contiguous())")


def check_draws(op: str, out: torch.Tensor, u: Any, draws: int) -> None:
    """``u`` is the op's uniforms for the batch ``out``: a float ``(B, draws)`` array, one row
    per sample (the op picks its samples by row)."""
    if not isinstance(u, np.ndarray) or u.dtype.kind != "f":
        raise ArgumentError(f"{op}: u must be a float numpy array, got {type(u).__name__}")
    if u.shape != (len(out), draws):
        raise ArgumentValueError(
            f"{op}: u must have one row of {draws} draws per sample of the batch, shape "
            f"{(len(out), draws)}, got {u.shape} for a batch of {len(out)}"
        )


def check_rows(op: str, rows: Any, n: int, what: str = "row") -> np.ndarray:
    """``rows`` as int64, each in ``[0, n)`` (sample positions in a batch of ``n``, or
    numbers of ``n`` choices): a 1-d integer array; ``what`` names one in errors."""
    arr = np.asarray(rows)
    if arr.ndim != 1 or (arr.dtype.kind not in "iu" and arr.size):
        got = f"{arr.dtype} {arr.shape}"
        raise ArgumentError(f"{op}: {what}s must be a 1-d integer array, got {got}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and (arr.min() < 0 or arr.max() >= n):
        bad = int(arr[(arr < 0) | (arr >= n)][0])
        raise ArgumentValueError(f"{op}: {what} {bad} is outside [0, {n})")
    return arr


def size2(size: Any, name: str) -> tuple[int, int]:
    """``size`` (an int or ``(height, width)`` of positive ints) as ``(height, width)``."""
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return (size, size)
    if (
        isinstance(size, (tuple, list))
        and len(size) == 2
        and all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in size)
    ):
        return (int(size[0]), int(size[1]))
    raise ArgumentError(f"{name}: size must be a positive int or (height, width), got {size!r}")


def check_exact(name: str, exact: Any) -> None:
    """``exact`` (a geometric op's) must be a bool."""
    if not isinstance(exact, bool):
        raise ArgumentError(f"{name}: exact must be True or False, got {exact!r}")
