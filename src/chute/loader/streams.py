"""How :func:`chute.dataloader`'s worker processes make whole batches without being told which:
each computes its share of the pass from the order (a pure function of seed, epoch and rank)
and writes batch after batch into a ring of control slots in shared memory, which the main
process reads in order. No message per batch crosses a queue.

NOTE (the stream protocol: passes, slots, cancelling, errors)

    When. ``iter()`` on a ``chute.dataloader`` with worker processes and neither
    ``sample_transform`` nor ``collate_fn`` (nor a dataset in object storage, whose parts the
    main process downloads ahead in the order it sends the batches) takes this path. The
    DataLoader itself stays what frameworks see (``batch_sampler``, ``sampler``, ``dataset``:
    ``chute/loader/samplers.py``); the workers are those of a private torch ``DataLoader``
    over a :class:`Shares`, an ``IterableDataset``, which gives them torch's start-up
    (seeds, ``get_worker_info``, ``worker_init_fn``, ``multiprocessing_context``,
    ``persistent_workers``) and shutdown.

    Shares. Batch ``k`` of a pass is made by worker ``k % W``. A pass starts with the main
    process writing the order's ``state_dict()`` on the :class:`Control`'s board and giving each
    worker a start token; the worker loads the state into its copy of the order and makes
    its batches of ``plan()``, each gathered into a shared-memory slot of
    ``chute/loader/handoff.py`` and announced by a message (the pickled batch structure,
    with each tensor's place in the slot) in the worker's next control slot, or through a
    queue when larger than a control slot. Two semaphores per worker count its free and its
    filled control slots: a worker waits for a free one, the main process for the next
    filled one of the worker whose turn it is. A worker has ``prefetch_factor + 1`` control
    slots, so it runs that many messages ahead. Reading a message gives its control slot
    back; the batch is lent as views of its data slot (``chute/loader/handoff.py``).

    Cancelling. The board holds a pass number and whether the pass is live. A pass that ends
    before its last batch (``break``, a newer ``iter()``, an error, the iterator collected)
    clears ``live``; a worker looks at the board while it waits and before each batch, and
    stops. With persistent workers the next pass first reads (and drops) the messages left in
    the control slots, which gives their slots back. When the workers shut down the board is
    marked closed and a waiting worker returns at once.

    Errors. An exception in a worker (the gather, ``batch_transform``, ``worker_init_fn``)
    travels as the worker's next message and is raised in the main process as torch raises a
    worker's: its type, with the worker's traceback in the message. A worker that exits is
    found by the main process while it waits (it looks every ``POLL`` seconds) and raised as
    torch's ``RuntimeError`` about an exited worker, which ``chute/loader/dataloader.py`` turns
    into a :class:`~chute.errors.WorkerError`.
"""

from __future__ import annotations

import copy
import os
import pickle
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch

from ..errors import ChuteError
from ..order.steps import Steps
from .batch_dataset import BatchDataset, Reported
from .handoff import Handoff, swap
from .loader import GROUP_BYTES, MAX_GROUP
from .processes import worker_init

CONTROL = 16 << 10  # bytes of a message its control slot holds; larger ones go by a queue
BOARD = 16 << 10  # bytes of the order state a pass starts from (a few hundred)
POLL = 0.02  # seconds between looks at the board (workers) or at the workers (main process)
_HEAD = 16  # a control slot: kind, length (int64 each), then the message
_BATCH, _ERROR = 1, 2
_GEN, _LIVE, _CLOSED, _LEN = range(4)  # the board's int64 words, then the state

_INIT_ERROR: list[tuple[type, str]] = []  # a worker: what its worker_init_fn raised


def _failure(worker: int) -> tuple[type, str]:
    """The exception being handled, as torch's ``ExceptionWrapper`` keeps it: its type and
    the message it is raised with in the main process."""
    kind = sys.exc_info()[0] or RuntimeError
    where = f"in DataLoader worker process {worker}"
    return kind, f"Caught {kind.__name__} {where}.\nOriginal {traceback.format_exc()}"


def stream_init(user_fn: Callable[[int], None] | None, worker_id: int) -> None:
    """:func:`worker_init`, its exception kept for the worker's first message."""
    try:
        worker_init(user_fn, worker_id)
    except Exception:
        _INIT_ERROR.append(_failure(worker_id))


class Control:
    """The control slots of ``workers`` worker processes, ``slots`` each, and the board
    (see the NOTE). Made by the main process for each set of workers."""

    def __init__(self, workers: int, slots: int, context: Any) -> None:
        self.slots = slots
        self.free = [context.Semaphore(slots) for _ in range(workers)]
        self.filled = [context.Semaphore(0) for _ in range(workers)]
        self.start = [context.Semaphore(0) for _ in range(workers)]
        self.spill = [context.Queue() for _ in range(workers)]
        # one segment: the board (4 words, the state), then the control slots
        self.shared = torch.empty(
            32 + BOARD + workers * slots * (_HEAD + CONTROL), dtype=torch.uint8
        )
        self.shared.share_memory_()
        self.shared[:32] = 0
        self.read = [0] * workers  # main process: messages read from each worker
        self.wrote = 0  # a worker: messages it wrote
        self._views()

    def _views(self) -> None:
        whole = self.shared.numpy()
        self._words = whole[:32].view(np.int64)
        self._state = whole[32 : 32 + BOARD]
        self._ctl = whole[32 + BOARD :]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for k in ("_ctl", "_words", "_state"):
            del state[k]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._views()

    # ------------------------------------------------------------------ the main process

    def begin(self, state: dict[str, Any]) -> None:
        """Start a pass from order ``state``: on the board, and a start token each."""
        data = pickle.dumps(state)
        if len(data) > BOARD:
            raise ChuteError(
                f"an order state of {len(data)} bytes does not fit the {BOARD} the worker "
                "processes read it from; this is a bug in chute, please report it"
            )
        self._state[: len(data)] = np.frombuffer(data, np.uint8)
        self._words[_LEN] = len(data)
        self._words[_LIVE] = 1
        for start in self.start:
            start.release()

    def cancel(self, closed: bool = False) -> None:
        """End the live pass (and with ``closed`` any wait of the workers, which are woken:
        the counts no longer matter)."""
        self._words[_LIVE] = 0
        self._words[_GEN] += 1
        if closed and not self._words[_CLOSED]:
            self._words[_CLOSED] = 1
            for sem in (*self.free, *self.start):
                sem.release()

    def drain(self) -> None:
        """Read and drop what workers wrote that no pass read (their slots come back)."""
        for w, filled in enumerate(self.filled):
            while filled.acquire(block=False):
                self.take(w)

    def take(self, w: int) -> tuple[int, Any]:
        """Worker ``w``'s next message (kind, unpickled: the batch copied out of its slot)."""
        at = (w * self.slots + self.read[w] % self.slots) * (_HEAD + CONTROL)
        kind, n = (int(x) for x in self._ctl[at : at + _HEAD].view(np.int64))
        data = self.spill[w].get() if n < 0 else self._ctl[at + _HEAD : at + _HEAD + n].tobytes()
        self.read[w] += 1
        try:
            return kind, pickle.loads(data)
        finally:
            self.free[w].release()

    # ------------------------------------------------------------------ a worker

    def wait(self, sem: Any, gen: int | None) -> bool:
        """Take ``sem``, waiting while the pass ``gen`` (None: any) is live and the main
        process runs; False when it is over."""
        parent = os.getppid()
        while not sem.acquire(timeout=POLL):
            if self._over(gen) or os.getppid() != parent:
                return False
        if self._over(gen):
            sem.release()
            return False
        return True

    def _over(self, gen: int | None) -> bool:
        words = self._words
        return bool(words[_CLOSED]) or (
            gen is not None and (words[_GEN] != gen or not words[_LIVE])
        )

    def pass_state(self) -> tuple[int, dict[str, Any]] | None:
        """The live pass's number and order state, or None."""
        words = self._words
        gen, live, n = int(words[_GEN]), words[_LIVE], int(words[_LEN])
        return (gen, pickle.loads(self._state[:n].tobytes())) if live else None

    def post(self, w: int, kind: int, message: Any) -> None:
        """Write ``message`` into worker ``w``'s next control slot (taken with ``wait``)."""
        data = bytes(ForkingPickler.dumps(message))
        at = (w * self.slots + self.wrote % self.slots) * (_HEAD + CONTROL)
        if len(data) <= CONTROL:
            self._ctl[at + _HEAD : at + _HEAD + len(data)] = np.frombuffer(data, np.uint8)
            n = len(data)
        else:
            self.spill[w].put(data)
            n = -1
        self._ctl[at : at + _HEAD].view(np.int64)[:] = (kind, n)
        self.wrote += 1
        self.filled[w].release()


class Shares(torch.utils.data.IterableDataset[int]):
    """What each worker iterates: its share of the pass the board names, made into its
    control slots (see the NOTE); yields the number of messages it wrote (nobody reads it).

    ``group``: batches per message, gathered at once (small batches of fixed-shape fields,
    as the thread Loader groups them: ``chute/loader/threads.py``), except the first
    message of a pass, which holds the first batch alone (it comes no later than one batch).
    Message ``g`` is worker ``g % W``'s."""

    def __init__(self, batches: BatchDataset, order: Steps, with_epoch: bool) -> None:
        self.batches = batches
        self.order = order
        self.with_epoch = with_epoch
        self.ring: Control | None = None  # set by the DataLoader for each set of workers
        ds, group = batches.dataset, 1
        plain = batches.pad is None and batches.batch_transform is None and not with_epoch
        if plain and batches.skipped is None:
            probe = ds.empty_batch(1)  # the fixed-shape fields, one row each
            if probe.keys() == ds.schema.keys():
                batch_bytes = order.batch_size * sum(t.nbytes for t in probe.values())
                group = max(1, min(MAX_GROUP, GROUP_BYTES // max(1, batch_bytes)))
        self.group = group

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        order = state["order"] = copy.copy(self.order)
        if "_plan" in vars(order):  # a cached plan may hold an unpicklable hook
            vars(order)["_plan"] = None
        return state

    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        assert info is not None and self.ring is not None
        return self._share(self.ring, info.id, info.num_workers)

    def _share(self, ring: Control, w: int, workers: int) -> Iterator[int]:
        if not ring.wait(ring.start[w], None):
            return
        got = ring.pass_state()
        if got is None:
            return
        gen, state = got
        made = 0
        try:
            if _INIT_ERROR:
                raise _InitError
            order = self.order
            order.load_state_dict(state)
            plan, epoch = order.plan(), order.epoch
            for g in range(w, self.message_of(len(plan) - 1) + 1, workers):
                if not ring.wait(ring.free[w], gen):
                    break
                ring.post(w, _BATCH, self._make(plan, self.span(g), epoch))
                made += 1
        except Exception as exc:
            failure = _INIT_ERROR.pop() if isinstance(exc, _InitError) else _failure(w)
            if ring.wait(ring.free[w], gen):
                ring.post(w, _ERROR, failure)
        yield made

    def message_of(self, k: int) -> int:
        """The message that carries batch ``k`` of a pass (see the class doc)."""
        return 0 if k == 0 else 1 + (k - 1) // self.group

    def span(self, g: int) -> range:
        """The batches of message ``g`` (those past the pass's end excepted)."""
        return range(1) if g == 0 else range(1 + (g - 1) * self.group, 1 + g * self.group)

    def _make(self, plan: Sequence[np.ndarray], js: range, epoch: int) -> Any:
        """The message of batches ``js`` of ``plan`` (those it has): a list of batches."""
        js = range(js.start, min(js.stop, len(plan)))
        rows = getattr(plan, "rows", None)  # an Order's Plan: just these batches
        parts = rows(js.start, js.stop) if rows is not None else [plan[j] for j in js]
        if self.group > 1:
            return self.batches.group(parts)
        idx = parts[0]
        return [self.batches.__getitems__((epoch, idx) if self.with_epoch else idx)]


class _InitError(Exception):
    """The worker's ``worker_init_fn`` failed: its first message is that error."""


def reraise(failure: tuple[type, str]) -> None:
    """Raise a worker's exception as torch does: its type, the worker's traceback in the
    message (a type that takes no message: ``RuntimeError``)."""
    kind, msg = failure
    try:
        exc = kind(msg)
    except Exception:
        raise RuntimeError(msg) from None
    raise exc


class Stream:
    """The main process's side of one pass: ``n`` batches, read in order (see the NOTE).
    ``it``: the private torch iterator whose workers make them; ``pin``: pin each batch."""

    def __init__(
        self,
        it: Any,
        ring: Control,
        handoff: Handoff,
        n: int,
        shares: Shares,
        persistent: bool,
        pin: bool,
        timeout: float,
    ) -> None:
        self._it = it
        self._handoff = handoff
        self._shares = shares
        self._got: list[Any] = []  # the batches of the group read last
        self._ring = ring
        self._n = n
        self._k = 0
        self._persistent = persistent
        self._pin = pin
        self._timeout = timeout
        self._workers = list(getattr(it, "_workers", []))

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Stream:
        return self

    def __del__(self) -> None:
        if self._k < self._n:
            self._end()

    def _end(self) -> None:
        """The pass is over: workers stop (and without persistent workers exit)."""
        self._ring.cancel(closed=not self._persistent)
        if not self._persistent:
            self._it._shutdown_workers()

    def _shutdown_workers(self) -> None:
        self._ring.cancel(closed=True)
        self._it._shutdown_workers()

    def __next__(self) -> Any:
        k = self._k
        if k >= self._n:
            self._end()
            raise StopIteration
        g = self._shares.message_of(k)
        j = k - self._shares.span(g).start
        if j == 0:
            self._got = []
            self._handoff.give_back()
            self._got = self._read(g % len(self._ring.filled))
        self._k += 1
        got = self._got[j]
        if self._pin:
            got = _pinned(got)
        if self._k == self._n and not self._persistent:
            self._end()
        return got

    def _read(self, w: int) -> list[Any]:
        """Worker ``w``'s next message: its batches (or its error, raised)."""
        ring = self._ring
        waited = 0.0
        while not ring.filled[w].acquire(timeout=POLL):
            dead = [p.pid for p in self._workers if p.exitcode is not None]
            if dead:
                pids = ", ".join(str(pid) for pid in dead)
                raise RuntimeError(f"DataLoader worker (pid(s) {pids}) exited unexpectedly")
            waited += POLL
            if self._timeout and waited >= self._timeout:
                raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds")
        kind, got = ring.take(w)
        if kind == _ERROR:
            self._k = self._n  # nothing more comes
            reraise(got)
        return got  # type: ignore[no-any-return]


def _pinned(got: Any) -> Any:
    if type(got) is Reported:
        return Reported(_pinned(got.batch), got.skipped)
    return swap(got, lambda t: t.pin_memory())
