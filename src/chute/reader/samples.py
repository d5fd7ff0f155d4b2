"""A batch as a list of samples: what a torch ``DataLoader`` that a framework builds over a
chute dataset asks for (``__getitems__``), read with one gather per batch instead of one
``ds[i]`` per sample."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..columns.encoded_images import EncodedImages, decode_sample
from .gatherable import Gatherable

__all__ = ["ReadsBatches", "split_batch"]

Sample = dict[str, Any]


class ReadsBatches:
    """Mixin of the chute datasets: ``__getitems__(indices)``, the samples ``indices`` as
    ``ds[i]`` returns each, from one ``gather`` (torch's ``DataLoader`` calls it with a
    batch's indices when a dataset has it, then ``collate_fn`` on the list)."""

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[Sample]:
        ds: Any = self
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        return split_batch(ds, ds.gather(idx), idx)


def split_batch(
    ds: Gatherable, batch: dict[str, Any], indices: Sequence[int] | np.ndarray
) -> list[Sample]:
    """The samples of ``batch`` (``ds.gather(indices)``), each as ``ds[i]`` returns it: views of
    the batch's fresh tensors (one row or one ragged slice each; writable, and nothing else
    refers to that memory), ``str``, and images decoded (as ``ds[i]`` does, the error naming
    the field and sample)."""
    columns: list[Sequence[Any]] = []
    for name, col in batch.items():
        if isinstance(col, torch.Tensor):
            columns.append(col.unbind(0))
        elif isinstance(col, EncodedImages):
            columns.append(
                [
                    decode_sample(col.sample(k).numpy(), col.sizes[k].numpy(), ds, name, int(i))
                    for k, i in enumerate(indices)
                ]
            )
        else:  # a RaggedBatch (a view per sample) or a list of str
            columns.append(list(col))
    names = list(batch)
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]
