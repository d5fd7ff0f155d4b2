"""How :func:`chute.dataloader`'s worker processes hand batches to the main process: through
shared-memory slots allocated once per worker, instead of torch's new shared-memory segment per
tensor per batch.

NOTE (the slot protocol: who owns which slot, when one is reused, shutdown)

    Why. torch sends each tensor of a batch from a worker as a new shared-memory segment: the
    worker creates it, copies the tensor in (faulting in fresh pages), and passes its file
    descriptor over a socket; the main process connects, receives it and maps it. For a
    CIFAR-like batch (two tensors, 0.8 MB) that is several times the cost of the gather itself.

    Slots. A :class:`Handoff` is made by the main process for each set of worker processes
    (each ``iter()``, or once with ``persistent_workers``) and reaches the workers with the
    dataset (inherited under fork, pickled under spawn). Worker ``w`` owns ``slots`` byte
    arenas (one shared-memory segment each, made by the worker when first needed, or larger
    when a batch does not fit) and writes batch after batch into them in turn, 0, 1, ...,
    ``slots - 1``, 0, ...; a semaphore per worker counts its slots that the main process has
    finished reading. The worker takes a count before writing a slot, without waiting: if none
    is left (every slot is still on its way), that batch goes through torch's own hand-off
    instead, so a slow or stopped consumer never makes a worker block or overwrite a slot. The
    message then sent through torch's result queue holds the batch's structure with each CPU
    tensor replaced by its place in the slot (the arena itself only when new).

    Reading. The main process (torch's iterator, or its pin-memory thread) unpickles each
    message as it arrives from the queue: every tensor is copied out of the slot into memory
    of its own, and only then is the worker's count given back. That memory (for tensors of
    64 KiB and more) comes from a pool per position in the batch, as in the thread Loader's
    ``Pool``: a buffer is reused only once its reference count
    shows that nothing refers to it (no batch, view or array the user kept), so a plain loop
    cycles through a few warm buffers instead of faulting in fresh pages for each batch,
    which cost more than the copy itself. Messages from one worker
    arrive in the order it sent them, so the slots come back in the order they were written
    and the next slot in turn is the free one. The batch a user receives never refers to a
    slot: it stays valid for as long as it is held, as with torch's own hand-off. A message
    that is never read (the pass ended early without persistent workers, a worker died) only
    leaves its slot taken in a Handoff that is dropped with those workers; with persistent
    workers torch reads (and drops) what is left of a pass before the next one starts, which
    gives its slots back.

    Lending (``lend=True``, the stream path of ``chute/loader/streams.py``). Nothing is
    copied out: each tensor the main process unpickles is a view of its slot, and the slot
    is given back (:meth:`Handoff.give_back`, called before each batch is read) only once the
    reference count of the slot's array shows that no tensor, view or array made from it
    is left, and only in the order the slots were written: a batch the user keeps keeps its
    slot, and the worker, finding none free, sends the next batches through torch's own
    hand-off until slots come back. The batch is valid for as long as it is held, as above.

    Shutdown. The segments are created unlinked (torch's ``file_descriptor`` sharing): they
    are freed when the last process mapping them exits or drops them, killed or not, and leave
    nothing in ``/dev/shm``.
"""

from __future__ import annotations

import math
import secrets
import sys
import weakref
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ..batch import RaggedBatch
from ..buffers import idle_buffer
from ..errors import ChuteError

ALIGN = 64  # each tensor starts on a cache line (and any dtype's alignment)
POOLED = 64 << 10  # smaller tensors are copied out into new memory (malloc's heap is warm)

_LIVE: weakref.WeakValueDictionary[str, Handoff] = weakref.WeakValueDictionary()


class Handoff:
    """Shared-memory slots for the batches of ``workers`` worker processes, ``slots`` each
    (see the NOTE). ``context``: the multiprocessing context the workers are started with."""

    def __init__(self, workers: int, slots: int, context: Any, lend: bool = False) -> None:
        self.token = secrets.token_hex(8)
        self.lend = lend  # hand out views of the slots (see the NOTE), not copies
        self._lent: list[deque[tuple[tuple[int, int], np.ndarray]]] = [
            deque() for _ in range(workers)
        ]
        self.slots = slots
        self.free = [context.Semaphore(slots) for _ in range(workers)]
        self._arenas: dict[tuple[int, int], np.ndarray] = {}  # main process: what it read
        self._kept: dict[int, list[np.ndarray]] = {}  # main process: copy-out buffers
        self._cap = workers * slots + 2  # batches on their way and the one the user holds
        self._mine: list[torch.Tensor | None] = [None] * slots  # a worker: its arenas
        self._next = 0  # a worker: the slot it writes next
        self._new: torch.Tensor | None = None  # a worker: a new arena no message carried yet
        self._reserved: int | None = None  # a worker: bytes of its next slot gathered into
        _LIVE[self.token] = self

    def __getstate__(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "slots": self.slots,
            "free": self.free,
            "_cap": self._cap,
            "lend": self.lend,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lent = [deque() for _ in self.free]
        self._arenas = {}
        self._kept = {}
        self._mine = [None] * self.slots
        self._next = 0
        self._new = None
        self._reserved = None

    def idle(self, k: int, nbytes: int) -> np.ndarray:
        """In the main process: a buffer of at least ``nbytes`` for the ``k``-th tensor of a
        batch that nothing refers to any more (see the NOTE), pooled or new. Called by one
        thread at a time: the one unpickling (torch's iterator or its pin-memory thread)."""
        bufs = self._kept.setdefault(k, [np.empty(0, np.uint8)])
        raw = idle_buffer(bufs, nbytes)
        if raw is None:
            raw = np.empty(nbytes, np.uint8)
            bufs.append(raw)
            if len(bufs) > self._cap + 1:  # the user keeps batches: stop tracking the oldest
                del bufs[1]
        return raw

    def give_back(self) -> None:
        """In the main process (``lend``): each worker's lent slots that nothing refers to any
        more, oldest first, given back to it (see the NOTE)."""
        for free, lent in zip(self.free, self._lent, strict=True):
            while lent:
                key, arena = lent[0]
                # idle: referred to by the deque's tuple, ``arena``, getrefcount's argument
                # and, unless a larger arena replaced it, ``_arenas``: no tensor is left
                if sys.getrefcount(arena) > 3 + (self._arenas.get(key) is arena):
                    break
                lent.popleft()
                free.release()

    def reserve(
        self, worker: int, fields: Mapping[str, tuple[torch.dtype, tuple[int, ...]]]
    ) -> dict[str, torch.Tensor] | None:
        """In worker ``worker``: its next slot taken for the batch about to be made, with a
        tensor in it per entry of ``fields`` (name -> dtype, shape) to gather into (``out=``),
        so the batch is written into shared memory once; None when no slot is free. The
        slot is then :meth:`pack`'s, or given back with :meth:`unreserve`."""
        if not self.free[worker].acquire(block=False):
            return None
        size, places = 0, {}
        for name, (dtype, shape) in fields.items():
            off = -(-size // ALIGN) * ALIGN
            size = off + math.prod(shape) * dtype.itemsize
            places[name] = (off, size, dtype, shape)
        arena = self._room(size)
        self._reserved = size
        return {k: arena[a:b].view(dt).view(sh) for k, (a, b, dt, sh) in places.items()}

    def unreserve(self, worker: int) -> None:
        """In worker ``worker``: the slot :meth:`reserve` took given back (no batch came)."""
        if self._reserved is not None:
            self._reserved = None
            self.free[worker].release()

    def _room(self, size: int) -> torch.Tensor:
        """The next slot's arena, new when it holds fewer than ``size`` bytes (room for some
        more); ``_new`` holds a new one until a message carries it."""
        arena = self._mine[self._next]
        if arena is None or arena.numel() < size:
            arena = torch.empty(size + size // 4, dtype=torch.uint8).share_memory_()
            self._mine[self._next] = self._new = arena
        return arena

    def pack(self, batch: Any, worker: int) -> Any:
        """In worker ``worker``: ``batch`` written into its next slot (tensors already in the
        slot :meth:`reserve` took are left where they are), as the message that carries it;
        ``batch`` itself when no slot is free or it holds no CPU tensor."""
        reserved, self._reserved = self._reserved, None
        if reserved is None and not self.free[worker].acquire(block=False):
            return batch
        s = self._next
        mine = self._mine[s]
        base = mine.data_ptr() if reserved is not None and mine is not None else -1
        pieces: list[tuple[_Piece, torch.Tensor]] = []
        size = reserved or 0

        def place(t: torch.Tensor) -> Any:
            nonlocal size
            if not _plain(t):
                return t  # torch pickles it, as without slots
            nbytes = t.numel() * t.element_size()
            at = t.data_ptr() - base
            if base < 0 or not t.is_contiguous() or not 0 <= at <= (reserved or 0) - nbytes:
                at = -(-size // ALIGN) * ALIGN
                size = at + nbytes
            piece = _Piece(self.token, worker, s, at, nbytes, t.dtype, tuple(t.shape))
            piece.k = len(pieces)
            pieces.append((piece, t))
            return piece

        try:
            payload = swap(batch, place)
            if not pieces:
                self.free[worker].release()
                return batch
            arena = self._room(size)
            for piece, t in pieces:
                dst = arena[piece.off : piece.off + piece.nbytes]
                if dst.data_ptr() != t.data_ptr():  # gathered elsewhere, or the arena grew
                    dst.view(t.dtype).view(t.shape).copy_(t)
        except BaseException:
            self.free[worker].release()
            raise
        self._next = (s + 1) % self.slots
        new, self._new = self._new, None
        return _Message(self.token, worker, s, new, payload)


def _plain(t: torch.Tensor) -> bool:
    """Whether ``t`` is fully described by its dtype, shape and bytes: a plain CPU tensor
    (no subclass, autograd, quantization or sparse layout, which torch's pickling keeps)."""
    return (
        type(t) is torch.Tensor
        and t.device.type == "cpu"
        and t.layout == torch.strided
        and not t.requires_grad
        and not t.is_quantized
    )


def swap(obj: Any, fn: Any) -> Any:
    """``obj`` with each tensor ``t`` in it replaced by ``fn(t)``: through dicts, lists,
    tuples and RaggedBatches (anything else is left as it is, tensors inside included)."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, RaggedBatch):
        return obj.map(fn)
    if type(obj) is dict:
        return {k: swap(v, fn) for k, v in obj.items()}
    if type(obj) in (list, tuple):
        if obj and isinstance(obj[0], str):  # strings: nothing inside
            return obj
        return type(obj)(swap(v, fn) for v in obj)
    return obj


class _Piece:
    """A tensor's place in a slot; unpickled (in the main process) as a copy of it."""

    __slots__ = ("dtype", "k", "nbytes", "off", "shape", "slot", "token", "worker")

    def __init__(
        self,
        token: str,
        worker: int,
        slot: int,
        off: int,
        nbytes: int,
        dtype: torch.dtype,
        shape: tuple[int, ...],
    ) -> None:
        self.token, self.worker, self.slot = token, worker, slot
        self.off, self.nbytes, self.dtype, self.shape = off, nbytes, dtype, shape
        self.k = 0  # its position among the batch's tensors

    def __reduce__(self) -> tuple[Any, ...]:
        return _copy_out, (
            self.token,
            self.worker,
            self.slot,
            self.k,
            self.off,
            self.nbytes,
            self.dtype,
            self.shape,
        )


class _Message:
    """What a worker sends for a batch in a slot. Unpickled left to right: the new arena is
    registered first, then each tensor is copied out, then the slot is given back."""

    def __init__(self, token: str, worker: int, slot: int, new: Any, payload: Any) -> None:
        self.args = (token, worker, slot, new, payload)

    def __reduce__(self) -> tuple[Any, ...]:
        token, worker, slot, new, payload = self.args
        arena = None if new is None else _Arena(token, worker, slot, new)
        return _received, (arena, payload, token, worker, slot)


class _Arena:
    """A worker's new arena for a slot; unpickled (in the main process) as its registration."""

    def __init__(self, token: str, worker: int, slot: int, arena: torch.Tensor) -> None:
        self.args = (token, worker, slot, arena)

    def __reduce__(self) -> tuple[Any, ...]:
        return _register, self.args


def _live(token: str) -> Handoff:
    h = _LIVE.get(token)
    if h is None:
        raise ChuteError(
            "a chute.dataloader worker sent a batch of worker processes this process no longer "
            "reads from; this is a bug in chute, please report it"
        )
    return h


def _register(token: str, worker: int, slot: int, arena: torch.Tensor) -> None:
    _live(token)._arenas[worker, slot] = arena.numpy()


def _copy_out(
    token: str,
    worker: int,
    slot: int,
    k: int,
    off: int,
    nbytes: int,
    dtype: torch.dtype,
    shape: tuple[int, ...],
) -> torch.Tensor:
    h = _live(token)
    arena = h._arenas[worker, slot]
    if h.lend:  # a view: the slot comes back once nothing refers to it (see the NOTE)
        return torch.from_numpy(arena)[off : off + nbytes].view(dtype).view(shape)
    raw = h.idle(k, nbytes) if nbytes >= POOLED else np.empty(nbytes, np.uint8)
    np.copyto(raw[:nbytes], arena[off : off + nbytes])  # numpy: one thread
    # from raw itself: a numpy view of it would refer to its base, not to raw (see idle())
    return torch.from_numpy(raw)[:nbytes].view(dtype).view(shape)


def _received(_arena: None, payload: Any, token: str, worker: int, slot: int) -> Any:
    h = _live(token)
    if h.lend:
        h._lent[worker].append(((worker, slot), h._arenas[worker, slot]))
    else:
        h.free[worker].release()
    return payload
