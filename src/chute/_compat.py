"""Every private API of another library that chute uses, in one place: each is resolved on
first use (``import chute`` resolves none), checked by a small call where a changed signature
could break it, and has a fallback built on public API only, which gives the same results
(pixels, registrations) at some cost in speed.

==================  ====================================  ======================================
name                fast path (private)                   fallback (public)
==================  ====================================  ======================================
``resize_aa``       ``torch._C._nn._upsample_bilinear2d_  ``F.interpolate(antialias=True)``,
                    aa(out=)``: writes the kernel's own   then a copy into ``out``
                    channels-last layout in place
``pil_raw``         ``PIL.Image.core.map_buffer`` and     ``Image.frombuffer`` (maps the same
                    the core image's ``paste``            memory) and a numpy copy
``pytree``          ``torch.utils._pytree.register_       none: RaggedBatch is a leaf for
                    pytree_node``                         ``tree_map``
``collate``         ``torch.utils.data._utils.collate``   none: ``default_collate`` does not
                    (``collate``, ``default_collate_fn_   know RaggedBatch
                    map``)
``batch_sharder``   the caller's frame (``sys._getframe``)  none: the batch sampler is sharded
                    holding accelerate's ``BatchSampler-   again (a test with the real
                    Shard`` (``num_processes``, ...)       accelerate fails first)
==================  ====================================  ======================================

Each ``resolve_*`` function tries the fast path and returns the fallback when it is missing
or its signature changed (AttributeError, ImportError, TypeError, ...); :data:`RESOLVED` caches
the result by name. ``fallback(name)`` is the fallback alone (the tests compare the two).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = [
    "RESOLVED",
    "Collate",
    "PilRaw",
    "Sharder",
    "batch_sharder",
    "collate",
    "fallback",
    "pil_raw",
    "pytree_register",
    "resize_aa",
]

# name -> what it resolved to (the fast path or its fallback); empty until first use.
RESOLVED: dict[str, Any] = {}

# Errors a changed private API raises when looked up or called the old way.
_CHANGED = (AttributeError, ImportError, TypeError, ValueError, RuntimeError)

Resize = Callable[[torch.Tensor, tuple[int, int], torch.Tensor], None]


def _cached(name: str, resolve: Callable[[], Any]) -> Any:
    got = RESOLVED.get(name)
    if got is None:
        got = RESOLVED[name] = resolve()
    return got


# ---------------------------------------------------------------------- antialiased resize


def resize_aa() -> Resize:
    """``resize(src, (h, w), out)``: bilinear with antialiasing (torchvision's resize), of
    ``src`` (1, C, h0, w0) uint8 into ``out`` (1, C, h, w), which may be a channels-last view
    (``F.interpolate`` has no ``out=``; the op under it writes its own layout in place and
    skips a repacking pass)."""
    return _cached("resize_aa", _resolve_resize)  # type: ignore[no-any-return]


def _resolve_resize() -> Resize:
    try:
        op: Any = torch._C._nn._upsample_bilinear2d_aa  # typed without its out=

        def fast(src: torch.Tensor, size: tuple[int, int], out: torch.Tensor) -> None:
            op(src, size, False, None, out=out)

        # as chute calls it: uint8, channels last in and out
        probe = torch.zeros((1, 4, 4, 3), dtype=torch.uint8).permute(0, 3, 1, 2)
        fast(probe, (2, 2), torch.empty((1, 2, 2, 3), dtype=torch.uint8).permute(0, 3, 1, 2))
    except _CHANGED:
        return _resize_fallback
    return fast


def _resize_fallback(src: torch.Tensor, size: tuple[int, int], out: torch.Tensor) -> None:
    out.copy_(
        torch.nn.functional.interpolate(
            src, size=size, mode="bilinear", align_corners=False, antialias=True
        )
    )


# ---------------------------------------------------------------------- PIL on raw memory


class PilRaw(NamedTuple):
    """PIL images over numpy memory, without copies.

    ``view(buffer, (w, h), offset, stride)``: an image whose pixels are ``buffer``'s RGBX
    rows (``stride`` bytes apart, from byte ``offset``); it has ``resize(size, resample,
    box)``. ``paster(hwc)``: a function that writes such a resized image into ``hwc``
    ((h, w, 4) uint8)."""

    view: Callable[[np.ndarray, tuple[int, int], int, int], Any]
    paster: Callable[[np.ndarray], Callable[[Any], None]]


def pil_raw() -> PilRaw:
    """PIL's core on raw memory (the calls ``Image.frombuffer`` / ``resize`` / ``paste``
    make, without their Python checks: ~10-20 us an image), or the public calls."""
    return _cached("pil_raw", _resolve_pil)  # type: ignore[no-any-return]


def _resolve_pil() -> PilRaw:
    from PIL import Image

    try:
        map_buffer = Image.core.map_buffer

        def view(buf: np.ndarray, size: tuple[int, int], offset: int, stride: int) -> Any:
            return map_buffer(buf, size, "raw", offset, ("RGBX", stride, 1))

        def paster(hwc: np.ndarray) -> Callable[[Any], None]:
            h, w = hwc.shape[:2]
            paste, extent = view(hwc, (w, h), 0, 0).paste, (0, 0, w, h)
            return lambda small: paste(small, extent)

        probe = np.zeros((2, 2, 4), np.uint8)
        small = view(probe, (2, 2), 0, 8).resize(
            (1, 1), int(Image.Resampling.BILINEAR), (0, 0, 2, 2)
        )
        paster(np.zeros((1, 1, 4), np.uint8))(small)
    except _CHANGED:
        return fallback("pil_raw")  # type: ignore[no-any-return]
    return PilRaw(view, paster)


def _pil_view(buf: np.ndarray, size: tuple[int, int], offset: int, stride: int) -> Any:
    from PIL import Image

    data = buf.reshape(-1).view(np.uint8)[offset:]  # a view: frombuffer maps its memory
    return Image.frombuffer("RGBX", size, data, "raw", "RGBX", stride, 1)


def _pil_paster(hwc: np.ndarray) -> Callable[[Any], None]:
    return lambda small: np.copyto(hwc, np.asarray(small))


# ---------------------------------------------------------------------- torch integration


def pytree_register() -> Callable[..., None] | None:
    """``register(cls, flatten, unflatten, name)``: make ``cls`` a pytree node for torch
    (``tree_map``, ``torch.compile``), or None where this torch has no such registry."""
    got = _cached("pytree", _resolve_pytree)
    return got or None


def _resolve_pytree() -> Callable[..., None] | bool:
    try:
        from torch.utils import _pytree

        register = _pytree.register_pytree_node
    except _CHANGED:
        return False

    def call(cls: type, flatten: Any, unflatten: Any, name: str) -> None:
        try:
            register(cls, flatten, unflatten, serialized_type_name=name)
        except TypeError:  # a torch whose register takes no serialized_type_name
            register(cls, flatten, unflatten)

    return call


class Collate(NamedTuple):
    """torch's ``collate(batch, collate_fn_map=)`` and the type -> function table that
    ``default_collate`` consults."""

    collate: Callable[..., Any]
    fn_map: dict[Any, Callable[..., Any]]


def collate() -> Collate | None:
    """torch's collate table, to register a batch type in, or None where it moved."""
    got = _cached("collate", _resolve_collate)
    return got or None


def _resolve_collate() -> Collate | bool:
    try:
        from torch.utils.data._utils import collate as c

        got = Collate(c.collate, c.default_collate_fn_map)
        if not callable(got.collate) or not isinstance(got.fn_map, dict):
            return False
    except _CHANGED:
        return False
    return got


# ---------------------------------------------------------------------- accelerate's sharder


class Sharder(NamedTuple):
    """What an accelerate ``BatchSamplerShard`` does with the batches it iterates."""

    world: int  # num_processes: batch k goes to process k % world
    rank: int  # process_index: the batches this process keeps
    split: bool  # split_batches: each batch split between the processes instead


def batch_sharder() -> Sharder | None:
    """The accelerate ``BatchSamplerShard`` iterating (or taking ``len()`` of) the batch
    sampler that calls this, or None: found as ``self`` of the first frame outside the
    sampler's module (``chute/loader/samplers.py``). Not cached: it is the caller's."""
    module = sys.modules.get("accelerate.data_loader")
    shard = getattr(module, "BatchSamplerShard", None)
    getframe = getattr(sys, "_getframe", None)
    if shard is None or getframe is None:
        return None
    frame = getframe(1)
    while frame is not None and frame.f_code.co_filename in _SAMPLERS:
        frame = frame.f_back
    wrapper = None if frame is None else frame.f_locals.get("self")
    if not isinstance(wrapper, shard):
        return None
    try:
        world, rank = int(wrapper.num_processes), int(wrapper.process_index)
        return Sharder(world, rank, bool(wrapper.split_batches))
    except _CHANGED:
        return None


# the frames batch_sharder looks past: its own and the batch sampler's
_SAMPLERS = {__file__, os.path.join(os.path.dirname(__file__), "loader", "samplers.py")}


_FALLBACKS: dict[str, Any] = {
    "resize_aa": _resize_fallback,
    "pil_raw": PilRaw(_pil_view, _pil_paster),
    "pytree": False,
    "collate": False,
}


def fallback(name: str) -> Any:
    """The public-API fallback of ``name`` (a key of the table above), what ``RESOLVED[name]``
    holds when the fast path is missing."""
    return _FALLBACKS[name]
