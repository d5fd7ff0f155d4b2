"""Batch buffers of the :class:`~chute.Loader`: what a worker gathers into, and for how
long a batch handed out stays valid.

NOTE (buffers and their lifetime; the Loader's NOTE in ``chute/loader/threads.py`` says who takes a
buffer when, and how scheduling keeps workers within these lifetimes)

    Fresh (default, ``keep=None``): :class:`Pool`. Each fixed-shape field of a work item is
    gathered into a buffer of its own that nothing else refers to, and the batches' tensors of
    that field are views of it: a batch stays valid for as long as anyone holds it, as with
    torch's DataLoader (``list(loader)``, a batch kept for visualisation, gradient
    accumulation). Allocating (and faulting in) that memory for every item cost ImageNet-like
    epochs (38 MB batches) 40-60% of the ring's throughput, so the buffers come from a small
    pool per field: one is handed out again only when its reference count shows that nothing
    refers to it any more (no tensor, view, numpy array, queue entry or traceback: each holds
    the buffer through its tensor's storage), else a new one is allocated. The count is
    compared with that of an array only the pool's list refers to, read the same way, not with
    a constant (interpreters differ). A plain ``for`` loop, which drops each batch for the
    next, thus cycles through ``items + 1`` warm buffers per field; tensors a user keeps are
    never touched, and the pool stops tracking the oldest beyond ``items + 2`` (freed when the
    user drops them). What a kept tensor keeps alive: the buffer of ITS field for its work
    item, i.e. at most ``group`` batches of that field (``loader.group``: 1 unless batches are
    small), never another field's. So keeping ``batch["label"]`` for an epoch holds the labels
    (in buffers of ``group`` batches of labels), not the images: a buffer shared by all the
    fields of an item made that hold the whole epoch's images (a second new-user review). Each
    buffer starts on a 64-byte boundary. With ``pin_memory``, buffers come from torch's caching
    host allocator (one per field and item too), which recycles freed pinned blocks the same
    way.

    Ring (``keep=k``): :class:`Ring`, reused slots, the opt-in fast path. One pre-allocated
    (pinned when ``pin_memory``) buffer per fixed-shape field, cut into ``ring_size`` batch
    slots; batch ``j`` lives in slot ``j % ring_size``. Batch ``j`` handed to the consumer
    stays valid until the consumer asks for batch ``j + k``; only then may a worker overwrite
    its slot. Copy a batch (``.clone()``) to keep it longer.

    Both. Only fixed-shape fields have buffers here: ragged, bytes and string fields are
    freshly allocated per batch in both modes and have no such limit.
"""

from __future__ import annotations

import threading
from typing import Protocol

import numpy as np
import torch

from .._arrays import idle_buffer
from ..reader.gatherable import Gatherable


class Buffers(Protocol):
    """Where work item ``q``'s fixed-shape fields are gathered: ``take(q)`` -> one buffer per
    field, ``rows`` rows each (see the NOTE for how long what it returns stays valid)."""

    def take(self, q: int) -> dict[str, torch.Tensor]: ...


class Pool:
    """``keep=None``: for each work item and fixed-shape field, a buffer that nothing else
    refers to (see the NOTE).

    ``rows``: rows of a work item; ``items``: work items given out at most at once.
    """

    def __init__(self, ds: Gatherable, rows: int, items: int, pin_memory: bool) -> None:
        self.ds = ds
        self.pin = pin_memory
        self.rows = rows
        self.cap = items + 2  # the items in flight and the batch the consumer holds
        # (name, dtype, shape, bytes) of each fixed-shape field's buffer
        self.fields = [
            (name, t.dtype, (rows, *t.shape[1:]), rows * t.nbytes)
            for name, t in ds.empty_batch(1).items()
        ]
        # Each field's list starts with an array that the list alone refers to: its reference
        # count, read the same way as the buffers', is that of a buffer that no batch, view or
        # array refers to any more.
        self.bufs: dict[str, list[np.ndarray]] = {
            name: [np.empty(0, np.uint8)] for name, *_ in self.fields
        }
        self.lock = threading.Lock()

    def take(self, q: int) -> dict[str, torch.Tensor]:
        if self.pin:  # torch's caching host allocator recycles freed pinned blocks itself
            return self.ds.empty_batch(self.rows, pin_memory=True)
        with self.lock:  # the tensors below exist before another worker looks
            return {
                name: torch.from_numpy(self._idle(name, nbytes)).view(dtype).view(shape)
                for name, dtype, shape, nbytes in self.fields
            }

    def _idle(self, name: str, nbytes: int) -> np.ndarray:
        """A buffer of field ``name`` that nothing refers to: a pooled one, or a new one."""
        bufs = self.bufs[name]
        raw = idle_buffer(bufs, nbytes)
        if raw is not None:
            return raw
        raw = _aligned(nbytes)
        bufs.append(raw)
        if len(bufs) > self.cap + 1:  # the user keeps batches: stop tracking the oldest,
            del bufs[1]  # which is freed when they drop it
        return raw


def _aligned(nbytes: int) -> np.ndarray:
    """``nbytes`` of uninitialized memory starting on a 64-byte boundary."""
    base = np.empty(nbytes + 64, np.uint8)
    start = -base.ctypes.data % 64
    return base[start : start + nbytes]


class Ring:
    """``keep=k``: one buffer per fixed-shape field, cut into ``items`` work items of ``rows``
    rows (``group`` batch slots each)."""

    def __init__(self, ds: Gatherable, rows: int, items: int, pin_memory: bool) -> None:
        self.items = items
        buf = ds.empty_batch(self.items * rows, pin_memory=pin_memory)
        for t in buf.values():  # fault the pages in now, not during the first epoch's gathers
            t.zero_()
        self.item_out = [
            {k: t[i * rows : (i + 1) * rows] for k, t in buf.items()} for i in range(self.items)
        ]

    def take(self, q: int) -> dict[str, torch.Tensor]:
        return self.item_out[q % self.items]
