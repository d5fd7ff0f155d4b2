"""Float32 work on a uint8 image batch a chunk of samples at a time: each chunk converted into
one reused scratch buffer of about 4 MB, worked on in place and rounded back, so every pass of
an op runs in cache and no whole-batch float copy is made."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

__all__ = ["CHUNK_ELEMENTS", "chunks", "store"]

CHUNK_ELEMENTS = 1 << 20
"""float32 elements of a scratch chunk (4 MB): small enough for the cache of a core."""


def chunks(out: torch.Tensor) -> Iterator[tuple[int, int, torch.Tensor]]:
    """``(a, b, x)`` over ``out`` (uint8, samples first): ``x`` is ``out[a:b]`` as float32 in
    one scratch buffer, reused for the next chunk once the caller has stored it back."""
    n = len(out)
    per = max(1, CHUNK_ELEMENTS // max(1, out[0].numel())) if n else 1
    scratch = torch.empty((min(per, n), *out.shape[1:]), dtype=torch.float32)
    for a in range(0, n, per):
        b = min(a + per, n)
        x = scratch[: b - a]
        x.copy_(out[a:b])
        yield a, b, x


def store(x: torch.Tensor, out: torch.Tensor) -> None:
    """Round float ``x`` (clamped to [0, 255]; ``x`` is overwritten) into uint8 ``out`` of the
    same shape: half up, then numpy's truncating cast (torch's float to uint8 copy is several
    times slower)."""
    x.add_(0.5).clamp_(0.5, 255.5)
    np.copyto(out.numpy(), x.numpy(), casting="unsafe")
