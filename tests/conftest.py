"""Shared fixtures: small real datasets on disk and a checker for what the reader gives back.

Other test modules may add fixtures here (surgical edits, please).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _helpers import MIXED_SCHEMA, mixed_samples
from _helpers import check_sample as check_sample_equal

import chute


def pytest_configure(config: pytest.Config) -> None:
    # A job started in the background by a non-interactive shell (as some CI runners start
    # theirs) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt, nor do
    # the processes it starts. Restore Python's handler so that the Ctrl-C tests test chute.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def check_sample() -> Callable[[dict[str, Any], dict[str, Any]], None]:
    """``check_sample(ds[i], sample_as_written)``: equal values, dtypes and shapes."""
    return check_sample_equal


@pytest.fixture(scope="session")
def make_mixed(tmp_path_factory) -> Callable[..., tuple[Path, list[dict[str, Any]]]]:
    """``make_mixed(n=12, part_size=None)`` -> (path of a new mixed dataset, its samples)."""

    def make(n: int = 12, part_size: int | None = None) -> tuple[Path, list[dict[str, Any]]]:
        path = tmp_path_factory.mktemp("mixed") / "mixed.chute"
        samples = mixed_samples(n)
        with chute.Writer(path, MIXED_SCHEMA, part_size=part_size, metadata={"n": n}) as w:
            for s in samples:
                w.append(s)
        return path, samples

    return make


@pytest.fixture
def mixed(make_mixed) -> tuple[Path, list[dict[str, Any]]]:
    """A fresh 12-sample dataset of every field kind, in one part."""
    return make_mixed()


@pytest.fixture
def mixed_parts(make_mixed) -> tuple[Path, list[dict[str, Any]]]:
    """A fresh 12-sample dataset of every field kind, split into parts of 5."""
    return make_mixed(part_size=5)
