"""A dataset seen through another: the one base of the views the loaders put over a dataset
(a torch Subset's :class:`~chute.reader.subset.SubsetDataset`, ``max_length=``'s
:class:`~chute.reader.truncate.Truncated`, ``decode=``'s
:class:`~chute.loader.decode.Decoded`, ``dtype=`` / ``pad_to=``'s
:class:`~chute.loader.finish.Finished`).

:class:`Wrapper` forwards the :class:`~chute.reader.gatherable.Gatherable` protocol to
``self.dataset``, so each view writes only what it changes: ``schema``, ``len()`` and
``empty_batch`` are the dataset's unless overridden; ``at_epoch`` and ``prefetch`` exist only
where the dataset has them (the loaders ask ``isinstance(ds, PerEpoch)`` / ``Prefetching``,
which look for the attribute), ``at_epoch(e)`` being this view over the dataset bound to
``e`` (:meth:`Wrapper.over`). ``gather`` and ``ds[i]`` are each view's own.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, TypeVar

import torch

from .. import kinds
from .gatherable import Gatherable, PerEpoch, Prefetching
from .samples import ReadsBatches

__all__ = ["Wrapper"]

W = TypeVar("W", bound="Wrapper")


class Wrapper(ReadsBatches):
    """A Gatherable over the Gatherable ``self.dataset`` (see the module doc)."""

    dataset: Gatherable

    @property
    def schema(self) -> Mapping[str, kinds.Field]:
        return self.dataset.schema

    def __len__(self) -> int:
        return len(self.dataset)

    def empty_batch(self, batch_size: int, pin_memory: bool = False) -> dict[str, torch.Tensor]:
        return self.dataset.empty_batch(batch_size, pin_memory=pin_memory)

    def over(self: W, ds: Gatherable) -> W:
        """This view over ``ds``, a view of the same dataset (one bound to an epoch, or
        splitting its decodes: ``chute/loader/decode.py``): a shallow copy."""
        view = copy.copy(self)
        view.dataset = ds
        return view

    def _at_epoch(self: W, epoch: int) -> W:
        """This view over the dataset bound to ``epoch`` where its samples depend on it (a
        mix, decode= crops), else over the dataset itself."""
        inner = self.dataset
        return self.over(inner.at_epoch(epoch) if isinstance(inner, PerEpoch) else inner)

    def __getattr__(self, name: str) -> Any:
        """``at_epoch`` and ``prefetch`` only where the dataset has them."""
        inner = self.__dict__.get("dataset")  # absent while unpickling
        if name == "at_epoch" and isinstance(inner, PerEpoch):
            return self._at_epoch
        if name == "prefetch" and isinstance(inner, Prefetching):
            return inner.prefetch
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
