"""Exact per-epoch sample counts of each source of a :func:`chute.mix`, from ``weights`` (with
an epoch size) or ``repeat`` factors: exact arithmetic on the given numbers (fractions), the
rounding leftovers handed out by largest remainder, ties to the source named first."""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import numpy as np

from .._args import check_int
from ..errors import ArgumentError, ArgumentValueError


def _number(table: str, name: str, value: Any) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ArgumentError(f"{table}[{name!r}] must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ArgumentValueError(f"{table}[{name!r}] must be finite and >= 0, got {value!r}")
    return (
        Fraction(float(value)) if isinstance(value, (float, np.floating)) else Fraction(int(value))
    )


def _table(table: str, names: tuple[str, ...], values: Any) -> list[Fraction]:
    if not isinstance(values, Mapping):
        raise ArgumentError(f"{table}= takes a dict {{source name: number}}, got {values!r}")
    missing = [n for n in names if n not in values]
    unknown = [k for k in values if k not in names]
    if missing or unknown:
        raise ArgumentValueError(
            f"{table}= must name each source once: missing {missing}, unknown {unknown} "
            f"(the sources are {list(names)})"
        )
    return [_number(table, n, values[n]) for n in names]


def source_counts(
    names: tuple[str, ...],
    sizes: list[int],
    weights: Mapping[str, float] | None,
    epoch_size: int | None,
    repeat: Mapping[str, float] | None,
) -> list[int]:
    """Samples of each source per epoch (see the module docstring)."""
    if weights is not None and repeat is not None:
        raise ArgumentValueError("pass weights= or repeat=, not both")
    if repeat is not None or weights is None:
        if epoch_size is not None:
            raise ArgumentValueError(
                "epoch_size= goes with weights=; with repeat= (or neither) the epoch size is the "
                "sum of len(source) * repeat"
            )
        reps = [Fraction(1)] * len(names) if repeat is None else _table("repeat", names, repeat)
        counts = [
            math.floor(size * r + Fraction(1, 2)) for size, r in zip(sizes, reps, strict=True)
        ]
    else:
        w = _table("weights", names, weights)
        total = sum(w)
        if total == 0:
            raise ArgumentValueError(
                "weights= are all 0: at least one source needs a positive weight"
            )
        for n, size, ws in zip(names, sizes, w, strict=True):
            if ws and not size:
                raise ArgumentValueError(f"source {n!r} is empty but has weight {float(ws)}")
        if epoch_size is None:
            n_total = math.floor(
                min(size * total / ws for size, ws in zip(sizes, w, strict=True) if ws)
            )
        else:
            n_total = check_int("epoch_size", epoch_size, 1)
        quotas = [n_total * ws / total for ws in w]
        counts = [math.floor(q) for q in quotas]
        left = n_total - sum(counts)
        by_remainder = sorted(range(len(names)), key=lambda i: (-(quotas[i] - counts[i]), i))
        for i in by_remainder[:left]:
            counts[i] += 1
    for n, size, c in zip(names, sizes, counts, strict=True):
        if c and not size:
            raise ArgumentValueError(f"source {n!r} is empty but would contribute {c} samples")
    if sum(counts) == 0:
        raise ArgumentValueError(
            f"the mix has no samples per epoch (counts {dict(zip(names, counts, strict=True))})"
        )
    return counts
