"""The shared shape of :func:`chute.windows` and :func:`chute.pack`: datasets whose samples are
rows of ``length`` tokens (and aligned per-token fields) built from a token stream, each batch
written into the caller's ``out=`` buffers where given, else into fresh arrays."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from .. import format as fmt
from .. import kinds
from .._args import one_index
from .._torch import to_torch
from ..columns.gather import out_rows
from ..errors import ArgumentError, ArgumentValueError
from ..kinds import empty_buffers
from .gatherable import Batch, Buffers, Pad
from .samples import ReadsBatches

__all__ = ["TokenRows", "token_id"]


class TokenRows(ReadsBatches, ABC):
    """Base of :class:`~chute.reader.windows.Windows` and :class:`~chute.reader.pack.Pack`:
    ``schema`` holds their ``(length,)`` fields; ``gather`` is each one's own."""

    who: str  # the function that makes it, for messages ("chute.windows")
    schema: dict[str, kinds.Field]
    length: int

    @abstractmethod
    def gather(self, indices: Any, out: Buffers | None = None, pad: Pad | None = None) -> Batch:
        """Samples ``indices`` as one batch (see the subclass)."""

    def empty_batch(self, batch_size: int, pin_memory: bool = False) -> dict[str, torch.Tensor]:
        """Pre-allocated ``out=`` buffers for :meth:`gather` (the fixed-shape fields)."""
        return empty_buffers(self.schema, batch_size, pin_memory)

    def __getitem__(self, i: Any) -> dict[str, Any]:
        """Sample ``i`` (an int): row 0 of a batch of one."""
        i = one_index(i, f"{self.who} is indexed by an int")
        return {k: v[0] for k, v in self.gather([i]).items()}

    def _rows(self, names: Iterable[str], out: Buffers | None, b: int) -> dict[str, np.ndarray]:
        """``(b, length)`` arrays to build fields ``names`` in: the first ``b`` rows of
        ``out[name]`` where given (checked), else fresh."""
        rows = {}
        for name in names:
            f = self.schema[name]
            if out is not None and name in out:
                rows[name] = out_rows(out[name], name, f, b)  # type: ignore[arg-type]
            else:
                rows[name] = np.empty((b, self.length), fmt.storage_dtype(f.dtype))
        return rows

    def _handed(
        self, rows: dict[str, np.ndarray], names: Iterable[str], out: Buffers | None, b: int
    ) -> Batch:
        """Fields ``names`` of the batch built in ``rows``, as tensors (``out``'s own where
        they were built there)."""
        batch: Batch = {}
        for name in names:
            if out is not None and name in out:
                batch[name] = out[name] if len(out[name]) == b else out[name][:b]
            else:
                batch[name] = to_torch(rows[name], self.schema[name].dtype)  # type: ignore[arg-type]
        return batch


def token_id(name: str, value: Any, dtype: np.dtype) -> int:
    """``value`` as a token id that fits ``dtype``; else an error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentError(f"{name} must be an int token id, got {value!r}")
    info = np.iinfo(dtype)
    if not info.min <= value <= info.max:
        raise ArgumentValueError(
            f"{name}={value} does not fit the token field's {dtype} ({info.min} to {info.max})"
        )
    return int(value)
