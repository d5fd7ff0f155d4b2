"""Shared fixtures: small real datasets on disk and a checker for what the reader gives back.

Other test modules may add fixtures here (surgical edits, please).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import chute


def pytest_configure(config: pytest.Config) -> None:
    # A job started in the background by a non-interactive shell (as some CI runners start
    # theirs) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt, nor do
    # the processes it starts. Restore Python's handler so that the Ctrl-C tests test chute.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def mixed_samples(n: int) -> list[dict[str, Any]]:
    """``n`` deterministic samples covering every field kind (and empty ragged samples)."""
    return [
        {
            "x": np.arange(i * 6, i * 6 + 6, dtype=np.float32).reshape(2, 3),
            "label": np.int64(i % 3),
            "tokens": np.arange(i % 4, dtype=np.int32) + i,
            "image": np.full((i % 3 + 1, i % 2 + 2, 3), i, np.uint8),
            "blob": bytes(range(i % 5)),
            "text": f"sample {i} · ü{'é' * (i % 3)}",
        }
        for i in range(n)
    ]


MIXED_SCHEMA = {
    "x": chute.fields.Tensor((2, 3), "float32"),
    "label": chute.fields.Tensor((), "int64"),
    "tokens": chute.Ragged("int32"),
    "image": chute.Ragged("uint8", (None, 3)),
    "blob": chute.Bytes(),
    "text": chute.String(),
}


def _check_sample(got: dict[str, Any], want: dict[str, Any]) -> None:
    """``ds[i]`` (tensors / str) equals the sample as written (arrays / scalars / bytes / str)."""
    assert set(got) == set(want)
    for name, value in want.items():
        if isinstance(value, str):
            assert got[name] == value, name
        elif isinstance(value, bytes):
            assert got[name].dtype == torch.uint8
            assert got[name].numpy().tobytes() == value, name
        elif isinstance(value, torch.Tensor):
            assert got[name].dtype == value.dtype, name
            assert torch.equal(got[name], value), name
        else:
            value = np.asarray(value)
            assert tuple(got[name].shape) == value.shape, name
            # bytewise: NaN payloads and -0.0 must survive too
            assert got[name].numpy().tobytes() == value.tobytes(), name


@pytest.fixture(scope="session")
def check_sample() -> Callable[[dict[str, Any], dict[str, Any]], None]:
    """``check_sample(ds[i], sample_as_written)``: equal values, dtypes and shapes."""
    return _check_sample


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
