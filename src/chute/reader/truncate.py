"""``Loader(max_length=N)``: the Ragged fields of a dataset cut to their first ``N`` rows.

A corpus with a few very long documents pads every batch that holds one to its length; a
model has a context length anyway. :class:`Truncated` is the dataset as the loaders read it
with ``max_length``: each sample of a :class:`chute.Ragged` field (one variable dimension)
keeps its first ``max_length`` rows, cut in one vectorized take per batch (no Python per
sample), before ``pad=`` pads it (so ``FIELD_lengths`` are the kept lengths). Other fields,
and Ragged fields with several variable dimensions (images), are read as they are.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._args import check_int
from ..batch import RaggedBatch, as_signed, pad_batch
from ..columns.segments import segments
from ..errors import ArgumentValueError
from .gatherable import Batch, Buffers, Gatherable, Pad
from .tokens import row_length
from .wrapper import Wrapper

__all__ = ["Truncated", "truncate_batch"]


def truncate_batch(rb: RaggedBatch, max_length: int) -> RaggedBatch:
    """``rb`` with each sample cut to its first ``max_length`` rows (itself when none is
    longer)."""
    offsets = rb.offsets.numpy()
    lengths = np.diff(offsets)
    if not len(lengths) or lengths.max() <= max_length:
        return rb
    kept = np.minimum(lengths, max_length)
    new = np.zeros(len(offsets), np.int64)
    np.cumsum(kept, out=new[1:])
    idx = torch.from_numpy(segments(offsets[:-1], kept, len(rb.values)).astype(np.int64))
    values = as_signed(rb.values).index_select(0, idx).view(rb.values.dtype)  # uint16 too
    return RaggedBatch(values, torch.from_numpy(new), rb.shapes)


class Truncated(Wrapper):
    """``ds`` with its Ragged fields cut to ``max_length`` rows a sample (see the module
    doc): a Gatherable, as ``ds`` is."""

    def __init__(self, ds: Gatherable, max_length: int) -> None:
        self.dataset = ds
        self.max_length = check_int("max_length", max_length, 1)
        if row_length(ds) is not None:  # would cut a packed row's cu_seqlens, and nothing else
            raise ArgumentValueError(
                f"max_length={max_length}: the rows of {ds!r} are {row_length(ds)} tokens "
                "each already; choose their length in chute.pack / chute.windows (length=), "
                "without max_length="
            )
        self.fields = [
            k for k, f in ds.schema.items() if f.numeric and not f.fixed and not f.variable_dims
        ]

    def __getitem__(self, i: int) -> dict[str, Any]:
        sample = dict(self.dataset[i])
        for name in self.fields:
            sample[name] = sample[name][: self.max_length]
        return sample

    def gather(self, indices: Any, out: Buffers | None = None, pad: Pad | None = None) -> Batch:
        """The dataset's batch, its Ragged fields truncated, then padded under ``pad=``."""
        if pad is not None:  # checked as the dataset checks it, before any work
            self.dataset.gather(np.zeros(0, np.int64), pad=pad)
        batch = self.dataset.gather(indices, out=out)
        for name in self.fields:
            rb = truncate_batch(batch[name], self.max_length)
            if pad is None:
                batch[name] = rb
            else:
                batch[name], batch[f"{name}_lengths"] = pad_batch(rb, pad, name)
        if pad is not None:  # the other variable-size fields, as the dataset pads them
            for name, f in self.schema.items():
                if name not in self.fields and f.pads:
                    batch[name], batch[f"{name}_lengths"] = pad_batch(batch[name], pad, name)
        return batch

    def __repr__(self) -> str:
        return f"{self.dataset!r} (max_length={self.max_length})"
