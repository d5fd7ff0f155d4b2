"""Batch buffers of the :class:`~chute.loader.Loader`: what a worker gathers into, and for how
long a batch handed out stays valid.

NOTE (buffers and their lifetime; the Loader's NOTE in ``chute/loader.py`` says who takes a
buffer when, and how scheduling keeps workers within these lifetimes)

    Fresh (default, ``keep=None``): :class:`Pool`. Each work item is gathered into a buffer
    that nothing else refers to, and its batches are views of it: a batch stays valid for as
    long as anyone holds it, as with torch's DataLoader (``list(loader)``, a batch kept for
    visualisation, gradient accumulation). Allocating (and faulting in) that memory for every
    item cost ImageNet-like epochs (38 MB batches) 40-60% of the ring's throughput, so the
    buffers come from a small pool: one is handed out again only when its reference count
    shows that nothing refers to it any more (no batch, view, numpy array, queue entry or
    traceback: each holds the buffer through its tensor's storage), else a new one is
    allocated. The count is compared with that of an array only the pool's list refers to,
    read the same way, not with a constant (interpreters differ). A plain ``for`` loop, which
    drops each batch for the next, thus cycles through ``items + 1`` warm buffers; batches a
    user keeps are never touched, and the pool stops tracking the oldest beyond ``items + 2``
    (freed when the user drops them). With ``pin_memory``, buffers come from torch's caching
    host allocator, which recycles freed pinned blocks the same way.

    Ring (``keep=k``): :class:`Ring`, reused slots, the opt-in fast path. One pre-allocated
    (pinned when ``pin_memory``) buffer per fixed-shape field, cut into ``ring_size`` batch
    slots; batch ``j`` lives in slot ``j % ring_size``. Batch ``j`` handed to the consumer
    stays valid until the consumer asks for batch ``j + k``; only then may a worker overwrite
    its slot. Copy a batch (``.clone()``) to keep it longer.

    Both. Only fixed-shape fields have buffers here: ragged, bytes and string fields are
    freshly allocated per batch in both modes and have no such limit.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np
import torch


class Pool:
    """``keep=None``: for each work item, a buffer that nothing else refers to (see the NOTE).

    ``rows``: rows of a work item; ``items``: work items given out at most at once.
    """

    def __init__(self, ds: Any, rows: int, items: int, pin_memory: bool) -> None:
        self.ds = ds
        self.pin = pin_memory
        self.rows = rows
        self.cap = items + 2  # the items in flight and the batch the consumer holds
        self.fields: list[tuple[str, torch.dtype, tuple[int, ...], int, int]] = []
        nbytes = 0
        for name, t in self.ds.empty_batch(1).items():  # (name, dtype, shape, offset, count)
            count = self.rows * t.numel()
            self.fields.append((name, t.dtype, (self.rows, *t.shape[1:]), nbytes, count))
            nbytes += -(-count * t.element_size() // 64) * 64  # each field 64-byte aligned
        self.nbytes = nbytes
        # bufs[0] is referred to by this list alone: its reference count, read the same way as
        # the buffers', is that of a buffer that no batch, view or array refers to any more.
        self.bufs: list[np.ndarray] = [np.empty(0, np.uint8)]
        self.lock = threading.Lock()

    def take(self, q: int) -> dict[str, torch.Tensor]:
        if self.pin:  # torch's caching host allocator recycles freed pinned blocks itself
            return self.ds.empty_batch(self.rows, pin_memory=True)
        with self.lock:  # the tensors below exist before another worker looks
            idle = 0
            for i, raw in enumerate(self.bufs):
                if i == 0:
                    idle = sys.getrefcount(raw)
                elif sys.getrefcount(raw) == idle:
                    break
            else:
                raw = np.empty(self.nbytes, np.uint8)
                self.bufs.append(raw)
                if len(self.bufs) > self.cap + 1:  # the user keeps batches: stop tracking the
                    del self.bufs[1]  # oldest, which is freed when they drop it
            return {
                name: torch.frombuffer(raw, dtype=dtype, count=count, offset=offset).view(shape)
                for name, dtype, shape, offset, count in self.fields
            }


class Ring:
    """``keep=k``: one buffer per fixed-shape field, cut into ``items`` work items of ``rows``
    rows (``group`` batch slots each)."""

    def __init__(self, ds: Any, rows: int, items: int, pin_memory: bool) -> None:
        self.items = items
        buf = ds.empty_batch(self.items * rows, pin_memory=pin_memory)
        for t in buf.values():  # fault the pages in now, not during the first epoch's gathers
            t.zero_()
        self.item_out = [
            {k: t[i * rows : (i + 1) * rows] for k, t in buf.items()} for i in range(self.items)
        ]

    def take(self, q: int) -> dict[str, torch.Tensor]:
        return self.item_out[q % self.items]
