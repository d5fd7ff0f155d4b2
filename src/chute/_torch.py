"""The one place where chute's dtypes meet torch's: the dtype table, and numpy <-> torch views
(bfloat16 has no numpy dtype and is stored as its 16 bits, ``'<u2'``)."""

from __future__ import annotations

import numpy as np
import torch

from .format import DTYPE_NAMES

# chute dtype name -> torch dtype; every name of format.DTYPE_NAMES. uint16/uint32/uint64
# exist from torch 2.3 on: the floor pyproject.toml declares.
TORCH_DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}


def to_torch(arr: np.ndarray, dtype: str) -> torch.Tensor:
    """``arr`` (stored as field dtype ``dtype``) as a tensor, sharing its memory when writable."""
    # torch only ever gets writable memory: a view of a (read-only) map is copied out first.
    # Gathers are fresh arrays already. torch.from_numpy of a read-only array warns, and a
    # write through the tensor would crash the process.
    if not arr.flags.writeable:
        arr = np.array(arr)
    t = torch.from_numpy(arr)
    return t.view(torch.bfloat16) if dtype == "bfloat16" else t


def as_numpy(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor as a numpy view (bfloat16 as its 16 bits, as stored)."""
    return t.view(torch.int16).numpy().view("<u2") if t.dtype == torch.bfloat16 else t.numpy()
