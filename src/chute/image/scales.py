"""Multi-scale training: each batch decoded at one of several sizes (DETR's and YOLO's
multi-scale training), ``decode={"image": [chute.MultiScale((480, 512, 544), chute.ResizePad
(544)), chute.RandomHorizontalFlip()]}``.

A batch's size is drawn from (the loader's seed, the epoch, the index of the batch's first
sample): a pure function, so a resumed or repeated epoch decodes every batch at the size it
had, and another epoch draws afresh. The whole batch, the masks and images that follow it
and the :class:`chute.Geometry` rows (whose ``out_height`` / ``out_width`` are the batch's
size, so :func:`chute.transform_boxes` scales the boxes to it) share that size. The loaders'
buffers are allocated at the largest size; a batch is a contiguous view of the first bytes
of its buffer (:func:`sized`), so no memory is allocated per batch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import ArgumentError
from .checks import size2
from .draws import uniforms

__all__ = ["MultiScale", "at_batch", "sized", "unwrap"]

STREAM = 0x5343414C45  # "SCALE": the draw's stream, apart from the decode ops' (0, 1, ...)


@dataclass(frozen=True)
class MultiScale:
    """The sizing op ``op`` (``Resize``, ``ResizePad``, ``RandomResizedCrop``,
    ``CenterCrop``, ``RandomCrop`` or ``ScaleJitter``) with its ``size`` drawn per batch from
    ``sizes`` (ints for squares, or ``(height, width)`` pairs), uniformly; ``op``'s own
    ``size`` is replaced. In a ``decode=`` list in the place of the sizing op."""

    sizes: Sequence[int | tuple[int, int]]
    op: Any

    def __post_init__(self) -> None:
        from .ops import DECODE_OPS

        if not isinstance(self.sizes, (tuple, list)) or not self.sizes:
            raise ArgumentError(
                f"MultiScale: sizes must be a non-empty list of sizes (ints or (height, "
                f"width) pairs), got {self.sizes!r}"
            )
        object.__setattr__(self, "sizes", tuple(size2(s, "MultiScale") for s in self.sizes))
        if not (
            isinstance(self.op, DECODE_OPS)
            and hasattr(self.op, "out_size")
            and hasattr(self.op, "size")
        ):
            raise ArgumentError(
                "MultiScale: op must be a sizing decode op (Resize, ResizePad, "
                f"RandomResizedCrop, CenterCrop, RandomCrop, ScaleJitter), got {self.op!r}"
            )
        device = getattr(self.op, "device", None)
        if device is not None:
            raise ArgumentError(
                f"MultiScale: op decodes on {device!r}; batches of several sizes are "
                "decoded in the loader's workers only (drop device=)"
            )

    @property
    def out_size(self) -> tuple[int, int]:
        """The largest height and width of ``sizes``: what the loaders' buffers hold."""
        return (max(h for h, _ in self.sizes), max(w for _, w in self.sizes))  # type: ignore[misc]

    def draw(self, seed: int, epoch: int, indices: Any) -> tuple[int, int]:
        """The size of the batch of samples ``indices``: ``sizes[floor(u * len(sizes))]``,
        ``u`` the uniform of (seed, epoch, the first index, :data:`STREAM`) (index 0 for an
        empty batch)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        first = idx[:1] if len(idx) else np.zeros(1, np.int64)
        u = float(uniforms(seed, epoch, first, STREAM, 1)[0, 0])
        sizes: tuple[tuple[int, int], ...] = self.sizes  # type: ignore[assignment]
        return sizes[min(int(u * len(sizes)), len(sizes) - 1)]

    def at(self, size: tuple[int, int]) -> Any:
        """``op`` at ``size``."""
        return dataclasses.replace(self.op, size=size)


def unwrap(ops: Any) -> tuple[Any, MultiScale | None]:
    """A ``decode=`` list with its :class:`MultiScale` (at most one) replaced by its op at
    the largest size, and the MultiScale (None without one)."""
    listed = list(ops) if isinstance(ops, (list, tuple)) else [ops]
    scales = [op for op in listed if isinstance(op, MultiScale)]
    if len(scales) > 1:
        raise ArgumentError(f"one MultiScale per decode= list, got {len(scales)} in {ops!r}")
    if not scales:
        return ops, None
    scale = scales[0]
    return [scale.at(scale.out_size) if op is scale else op for op in listed], scale


def at_batch(
    ops: tuple[Any, ...], scale: MultiScale, seed: int, epoch: int, indices: Any
) -> tuple[Any, ...]:
    """``ops`` (as :func:`unwrap` made them) with the sizing op at the size ``scale`` draws
    for the batch of samples ``indices``."""
    largest, size = scale.at(scale.out_size), scale.draw(seed, epoch, indices)
    return tuple(scale.at(size) if op == largest else op for op in ops)


def sized(dst: torch.Tensor | None, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A contiguous ``shape`` tensor to decode into: ``dst`` (cut to the batch), a view of
    the first bytes of ``dst`` (a buffer allocated for a larger size), or a new tensor when
    there is no ``dst`` or it cannot hold ``shape``."""
    if dst is not None and dst.dtype == dtype:
        if tuple(dst.shape) == shape:
            return dst
        if tuple(dst.shape[1:]) == shape[1:] and len(dst) >= shape[0]:
            return dst[: shape[0]]
        n = math.prod(shape)
        if dst.is_contiguous() and dst.numel() >= n:
            return dst.reshape(-1)[:n].view(shape)
    return torch.empty(shape, dtype=dtype)
