"""Compiled per-pixel kernels of the augmentations (numba, in the ``image`` extra): each one
loop over a sample's pixels doing all of an op's arithmetic in registers, one pass where
torch or numpy would make one pass per elementary op. They run without the GIL, so the
loader's worker threads augment in parallel.

The modules here import numba; the augmentations reach them through :func:`load`, so
``import chute`` needs no numba. Each kernel is compiled on its first call and cached on
disk (numba's ``cache=True``): the first run on a machine pays about 5 s to compile them
all, a later process about 0.6 s to import numba and load them.

The kernels check no shape, dtype or index (numba does not either): a row outside the batch
would write outside it. Their callers check what they pass (the ops' ``apply``,
:func:`chute.image.augment.augment`, :func:`chute.image.blur_taps.blur`,
:func:`chute.image.randaugment.apply_ops`, with :mod:`chute.image.checks`)."""

from __future__ import annotations

import importlib
from types import ModuleType

from ...errors import require

__all__ = ["load"]


def load(name: str) -> ModuleType:
    """The kernel module ``chute.image.kernels.<name>``, or :class:`chute.MissingDependencyError`
    saying how to install numba."""
    require("numba", "image")
    return importlib.import_module(f"{__name__}.{name}")
