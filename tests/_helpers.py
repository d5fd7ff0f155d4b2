"""Test helpers shared by importing them (``from _helpers import mixed_samples``): samples of
every field kind and a checker for what the reader gives back. Fixtures built on them live in
tests/conftest.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import chute


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


def check_sample(got: dict[str, Any], want: dict[str, Any]) -> None:
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
