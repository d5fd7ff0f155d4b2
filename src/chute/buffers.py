"""Every buffer chute reuses, and for how long what it hands out stays valid: the
:class:`~chute.Loader`'s batch buffers, and each thread's buffers for image bytes and decoding.

NOTE (buffers and their lifetime; the Loader's NOTE in ``chute/loader/threads.py`` says who takes a
buffer when, and how scheduling keeps workers within these lifetimes)

    One rule for reuse. A buffer that was handed out (inside a batch) is reused only once
    nothing refers to it any more: no tensor, view, numpy array, queue entry or traceback,
    each of which holds it through its storage. :func:`idle_buffer` reads that from reference
    counts, compared with that of an array only the pool's list refers to, read the same way,
    not with a constant (interpreters differ). A buffer someone keeps is thus never written
    over; a new one is made instead.

    Fresh (default, ``reuse_after=None``): :class:`Pool`. Each fixed-shape field of a work item is
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
    fields of an item would hold the whole epoch's images. Each
    buffer starts on a 64-byte boundary. With ``pin_memory``, buffers come from torch's caching
    host allocator (one per field and item too), which recycles freed pinned blocks the same
    way.

    Ring (``reuse_after=k``): :class:`Ring`, reused slots, the opt-in fast path. One pre-allocated
    (pinned when ``pin_memory``) buffer per fixed-shape field, cut into ``ring_size`` batch
    slots; batch ``j`` lives in slot ``j % ring_size``. Batch ``j`` handed to the consumer
    stays valid until the consumer asks for batch ``j + k``; only then may a worker overwrite
    its slot. Copy a batch (``.clone()``) to keep it longer.

    Both. Only fixed-shape fields have buffers here: ragged, bytes and string fields are
    freshly allocated per batch in both modes and have no such limit (an image field's bytes
    excepted, below).

    Per thread (:func:`thread_bytes`, :func:`thread_scratch`). An image field's gathered
    JPEG bytes (handed out in the batch: reused by the rule above) and the decoder's scratch
    (never handed out: reused by the next decode in the same thread) are kept by the thread
    that made them: fresh megabytes per batch are fresh pages in a worker thread each time
    (glibc gives a thread arena's freed top back to the kernel; numpy asks huge pages for
    it), ~15 us of the kernel's page clearing per image (perf), ~3% of a decode. Only up to
    :data:`KEEP_MAX` each: a larger one (a one-off gather of a whole dataset, a huge
    panorama's scratch) is freed after use, not held for the thread's life.
"""

from __future__ import annotations

import sys
import threading
from typing import Protocol

import numpy as np
import torch

# The largest buffer a thread keeps for its next batch (image scratch, gathered JPEG bytes).
KEEP_MAX = 64 << 20


def idle_buffer(bufs: list[np.ndarray], nbytes: int) -> np.ndarray | None:
    """A buffer of ``bufs[1:]`` of at least ``nbytes`` that nothing but ``bufs`` refers to,
    or None. ``bufs[0]`` is an array that only ``bufs`` refers to: the reference count to
    compare with (see the NOTE)."""
    idle = 0
    for i, raw in enumerate(bufs):
        if i == 0:
            idle = sys.getrefcount(raw)
        elif sys.getrefcount(raw) == idle and len(raw) >= nbytes:
            return raw
    return None


class Batches(Protocol):
    """What :class:`Pool` and :class:`Ring` ask of a dataset (any
    :class:`chute.reader.gatherable.Gatherable`): its ``out=`` buffers."""

    def empty_batch(self, batch_size: int, pin_memory: bool = False) -> dict[str, torch.Tensor]: ...


class Buffers(Protocol):
    """Where work item ``q``'s fixed-shape fields are gathered: ``take(q)`` -> one buffer per
    field, ``rows`` rows each (see the NOTE for how long what it returns stays valid)."""

    def take(self, q: int) -> dict[str, torch.Tensor]: ...


class Pool:
    """``reuse_after=None``: for each work item and fixed-shape field, a buffer that nothing else
    refers to (see the NOTE).

    ``rows``: rows of a work item; ``items``: work items given out at most at once.
    """

    def __init__(self, ds: Batches, rows: int, items: int, pin_memory: bool) -> None:
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
    """``reuse_after=k``: one buffer per fixed-shape field, cut into ``items`` work items of
    ``rows`` rows (``group`` batch slots each)."""

    def __init__(self, ds: Batches, rows: int, items: int, pin_memory: bool) -> None:
        self.items = items
        buf = ds.empty_batch(self.items * rows, pin_memory=pin_memory)
        for t in buf.values():  # fault the pages in now, not during the first epoch's gathers
            t.zero_()
        self.item_out = [
            {k: t[i * rows : (i + 1) * rows] for k, t in buf.items()} for i in range(self.items)
        ]

    def take(self, q: int) -> dict[str, torch.Tensor]:
        return self.item_out[q % self.items]


_THREAD = threading.local()  # this thread's kept buffers (see the NOTE)


def thread_bytes(nbytes: int) -> np.ndarray:
    """``nbytes`` of uint8 for a batch's JPEG bytes: this thread's buffer of its last batch
    once nothing refers to it any more (a loader decodes a batch's images and drops the
    bytes; a batch someone keeps keeps its buffer, and a new one is made)."""
    if nbytes > KEEP_MAX:
        return np.empty(nbytes, np.uint8)
    bufs = _THREAD.__dict__.setdefault("bytes", [np.empty(0, np.uint8)])
    buf = idle_buffer(bufs, nbytes)
    if buf is None:
        buf = np.empty(nbytes + nbytes // 4, np.uint8)  # batches differ in size
        bufs[1:] = [buf]
    return buf[:nbytes]


def thread_scratch(name: str, nbytes: int) -> np.ndarray:
    """This thread's scratch buffer ``name``, at least ``nbytes`` (its first ``nbytes``),
    kept across calls; the caller never hands it out."""
    if nbytes > KEEP_MAX:
        return np.empty(nbytes, np.uint8)
    bufs = _THREAD.__dict__.setdefault("scratch", {})
    buf = bufs.get(name)
    if buf is None or len(buf) < nbytes:
        buf = bufs[name] = np.empty(max(nbytes, 1 << 20), np.uint8)
    return buf[:nbytes]
