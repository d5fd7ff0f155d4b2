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

    Variable-size values (:class:`Values`, both modes). The values of ragged, bytes and string
    fields, whose size is known only once the batch's offsets are, are gathered into buffers
    shared by a loader's workers, a pool per variable-size field of a work item (its first,
    its second...; a kept batch's values keep the buffer of its work item's values of that
    field, as for fixed-shape fields), reused by the same rule: an idle buffer at least the
    item's size (as items differ in size, a new one is as large as the pool's largest and a
    quarter larger than asked, and replaces an idle one too small), so they are never
    limited to ``reuse_after`` either. A new array per batch cost up to half the copy into
    it: the allocator gives the heap's freed top back to the kernel and the next batch faults
    its pages in again (shuffled token documents, ~600 KB a batch: 37-40 page faults and
    14-72 us of the kernel's time a batch). ``ds.gather`` called outside a loader allocates a
    new array.

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

import itertools
import sys
import threading
from collections.abc import Callable
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


class Values:
    """The memory of variable-size fields' values gathered by a loader's workers (see the
    NOTE), a pool per output of a batch (its first variable-size field, its second...):
    ``batch()`` -> an allocator for one batch, whose ``k``-th call ``(nbytes)`` gives uint8,
    a view of a buffer of pool ``k`` that nothing else refers to. ``cap``: buffers tracked
    at most per pool (those of the batches in flight and held)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        # Each pool starts with an array that the list alone refers to, then the buffers
        # (each owns its memory: a view handed out refers to it, as its reference count shows).
        self.pools: list[list[np.ndarray]] = []
        self.lock = threading.Lock()

    def batch(self) -> Callable[[int], np.ndarray]:
        calls = itertools.count()
        return lambda nbytes: self.take(next(calls), nbytes)

    def take(self, k: int, nbytes: int) -> np.ndarray:
        """``nbytes`` of a buffer of pool ``k`` that nothing refers to, pooled or new."""
        with self.lock:  # the view below exists before another worker looks
            while len(self.pools) <= k:
                self.pools.append([np.empty(0, np.uint8)])
            bufs = self.pools[k]
            idle = sys.getrefcount(bufs[0])
            spare = None  # an idle buffer too small: replaced by the new one
            for i in range(1, len(bufs)):
                if sys.getrefcount(bufs[i]) == idle:
                    if len(bufs[i]) >= nbytes:
                        return bufs[i][:nbytes]
                    spare = i
            # batches differ in size: as large as the largest yet, and a quarter above this one
            raw = np.empty(max(nbytes + nbytes // 4, *map(len, bufs)), np.uint8)
            if spare is not None:
                bufs[spare] = raw
            else:
                bufs.append(raw)
                if len(bufs) > self.cap + 1:  # the user keeps batches: stop tracking the oldest
                    del bufs[1]
            return raw[:nbytes]


class Buffers(Protocol):
    """Where work item ``q``'s fixed-shape fields are gathered: ``take(q)`` -> one buffer per
    field, ``rows`` rows each; ``values``: where variable-size fields' values are (see the
    NOTE for how long what they return stays valid)."""

    values: Values

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
        self.values = Values(items + 4)  # in flight, held, being released, and spares

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
        self.values = Values(items + 4)

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
