"""Loader: batches of a chute Dataset, gathered by worker threads into a ring of reused buffers.

NOTE (threads, slots, lifetimes, shutdown; the whole protocol, written down once)

    Who does what. ``iter(loader)`` takes this rank's remaining batches of the epoch from the
    :class:`~chute.order.Order` (its ``plan()``: index arrays, computed up front) and starts
    ``num_workers`` daemon threads. A work item is a group of ``group`` consecutive batches
    (``group`` > 1 only when every field is fixed-shape and a batch is smaller than
    ``GROUP_BYTES``): a worker gathers the whole group with one ``ds.gather(idx, out=...)`` into
    consecutive slots, runs ``transform`` on each batch, and posts the group's batches at once.
    Small batches (CIFAR-like: 0.8 MB) thus share one gather call and one hand-off, whose
    fixed costs (Python, waking the consumer, passing the GIL: ~40 us) would otherwise add 40%
    to the gather itself (~100 us on 2 vCPUs). The consumer (the thread calling ``next()``)
    hands batches out strictly in order; ``Order.batches()`` is advanced only then, so
    ``state_dict()`` counts what the consumer received, never what the workers prefetched.

    Why threads. The gather is numpy ``take`` into the slot (no per-sample Python, no torch op)
    and releases the GIL; a batch never crosses a process boundary. Torch ops in a worker (a
    transform, ``pad=``) run with ONE intra-op thread: set deliberately in each worker, because
    OpenMP gives every calling thread its own team and ``workers x torch threads`` on a few
    cores collapses (``index_select`` went 25x slower on 2 vCPUs). The setting is per thread;
    the consumer thread keeps its own.

    Slot lifetime (enforced). The ring is one pre-allocated (pinned when ``pin_memory``)
    buffer per fixed-shape field, cut into ``ring_size`` batch slots; batch ``j`` lives in slot
    ``j % ring_size``. Batch ``j`` handed to the consumer stays valid until the consumer asks
    for batch ``j + keep``; only then may a worker overwrite its slot. The consumer gives work
    items out itself, and gives out group ``q`` only once every batch of group
    ``q - ring_size / group`` (the one whose slots it reuses) was released, so no worker can get
    ahead of the rule. Copy a batch (``.clone()``) to keep it longer. Ragged, bytes and string
    fields are freshly allocated per batch and have no such limit.

    Errors. A worker catches everything its group raises and posts it in place of the batches;
    the consumer raises :class:`~chute.errors.WorkerError` from it (the original exception,
    with its traceback, is the ``__cause__``) when it reaches that batch, and stops the others.

    Shutdown. Exhaustion, ``close()``, ``break`` or ``del`` (the iterator's finalizer),
    garbage collection, interpreter exit, an exception or Ctrl-C while waiting for a batch, a
    new ``iter()`` on the same loader (the ring is shared: the older iterator ends) and
    ``set_epoch`` / ``load_state_dict`` all stop the pass: a flag is set, each worker is woken
    with a sentinel, finishes at most the work item it holds, and is joined. Workers reference the
    run state only, never the iterator, so dropping the iterator is enough to stop them.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .errors import SchemaError, WorkerError
from .order import Order, check_int

__all__ = ["Loader", "LoaderStats"]

_Outcome = tuple[Any, "BaseException | None", str]  # a batch, or the error and where it arose
GROUP_BYTES = 4 << 20  # small batches are gathered in groups of about this many bytes
MAX_GROUP = 32


@dataclass(frozen=True)
class LoaderStats:
    """Where the time of the current (or last) pass went: is training input-bound?"""

    batches: int  # handed to the consumer
    samples: int
    total_s: float  # from iter() to the end of the pass (or now)
    wait_s: float  # time the consumer spent blocked in next(), waiting for data
    busy_s: float  # summed over workers: gathering and transforming
    workers: int

    @property
    def wait_fraction(self) -> float:
        """Share of the pass spent waiting for data (near 1: input-bound)."""
        return self.wait_s / self.total_s if self.total_s > 0 else 0.0

    @property
    def worker_utilization(self) -> float:
        """Busy time over the time the workers had (near 1: the workers are saturated)."""
        return self.busy_s / (self.total_s * self.workers) if self.total_s and self.workers else 0.0

    def __str__(self) -> str:
        rate = self.samples / self.total_s if self.total_s > 0 else 0.0
        return (
            f"{self.batches} batches, {self.samples} samples in {self.total_s:.3f} s "
            f"({rate:,.0f}/s); consumer waited {self.wait_fraction:.0%}; "
            f"workers busy {self.worker_utilization:.0%} ({self.workers})"
        )


def _default_workers() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return min(4, cpus)


def _dist_defaults(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """rank / world_size, defaulting to torch.distributed's when it is initialized."""
    dist = torch.distributed
    initialized = dist.is_available() and dist.is_initialized()
    if rank is None:
        rank = dist.get_rank() if initialized else 0
    if world_size is None:
        world_size = dist.get_world_size() if initialized else 1
    return rank, world_size


class Loader:
    """Batches of ``ds`` for this rank, in :class:`~chute.order.Order`, from worker threads.

    Yields dicts ``{field: tensor | RaggedBatch | list[str]}`` (or what ``transform`` returns,
    a batch-level callable run in the workers). Fixed-shape fields are views of a reused slot:
    a batch stays valid until ``keep`` more batches were asked for (see the NOTE in
    ``chute/loader.py``). ``num_workers=0`` gathers in the calling thread. Iterating again
    continues the epoch where the state says (a finished epoch moves on to the next one), so
    ``state_dict()`` / ``load_state_dict()`` resume exactly, with any world size. ``rank`` and
    ``world_size`` default to ``torch.distributed``'s when it is initialized.

    ``num_workers``: gather threads (default ``min(4, CPUs)``). ``prefetch``: batches prepared
    ahead of the consumer (default 2 per worker). ``keep``: batches the consumer may hold at
    once (default 1: a batch is valid until the next is asked for; ``chute.to_device`` needs no
    more). ``pin_memory``: page-locked slots for fast, asynchronous copies to the GPU (default:
    when CUDA is available). ``shuffle``, ``seed``, ``drop_last``, ``block_size``: see
    :class:`~chute.order.Order`. Example::

        loader = chute.Loader(chute.open("train.chute"), batch_size=256, num_workers=2)
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            for batch in loader:
                step(batch["image"], batch["label"])
            print(loader.stats())
    """

    def __init__(
        self,
        ds: Any,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        num_workers: int | None = None,
        prefetch: int | None = None,
        drop_last: bool = False,
        transform: Callable[[dict[str, Any]], Any] | None = None,
        pin_memory: bool | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        *,
        block_size: int | None = None,
        keep: int = 1,
    ) -> None:
        if not (hasattr(ds, "gather") and hasattr(ds, "empty_batch") and hasattr(ds, "__len__")):
            raise SchemaError(
                f"Loader needs a chute Dataset (chute.open(path)), not {type(ds).__name__}; "
                "for a torch Dataset use torch.utils.data.DataLoader"
            )
        if transform is not None and not callable(transform):
            raise SchemaError(f"transform must be callable, got {transform!r}")
        self.dataset = ds
        self.num_workers = (
            _default_workers() if num_workers is None else check_int("num_workers", num_workers, 0)
        )
        if self.num_workers == 0:
            self.prefetch = 0
        elif prefetch is None:
            self.prefetch = 2 * self.num_workers
        else:
            self.prefetch = check_int("prefetch", prefetch, 1)
        self.keep = check_int("keep", keep, 1)
        self.transform = transform
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else bool(pin_memory)
        if self.pin_memory and not torch.cuda.is_available():
            raise SchemaError("pin_memory=True needs CUDA, which torch does not see here")
        rank, world_size = _dist_defaults(rank, world_size)
        self.order = Order(
            len(ds), batch_size, shuffle, seed, rank, world_size, drop_last, block_size
        )
        self.group, self._items = self._geometry()
        self._ring: _Ring | None = None  # allocated on the first iter()
        self._active: weakref.ref[_LoaderIter] | None = None
        self._last: _Run | None = None

    def _geometry(self) -> tuple[int, int]:
        """(batches per work item, work items in the ring); see the NOTE."""
        if self.num_workers == 0:
            return 1, self.keep
        probe = self.dataset.empty_batch(1)  # the fixed-shape fields, one row each
        group = 1
        if probe.keys() == self.dataset.schema.keys():
            batch_bytes = self._slot_rows * sum(t.nbytes for t in probe.values())
            group = max(1, min(MAX_GROUP, GROUP_BYTES // max(1, batch_bytes)))
        ahead = max(-(-self.prefetch // group), self.num_workers)
        return group, -(-self.keep // group) + ahead

    @property
    def batch_size(self) -> int:
        return self.order.batch_size

    @property
    def _slot_rows(self) -> int:
        """Rows of a slot: no batch is larger than the dataset (batch_size may be)."""
        return min(self.batch_size, self.order.n)

    @property
    def ring_size(self) -> int:
        """Batch slots in the ring: a batch is overwritten ``ring_size`` batches later."""
        return self.group * self._items

    def __len__(self) -> int:
        """Batches per rank in a whole epoch."""
        return len(self.order)

    def set_epoch(self, epoch: int) -> None:
        """Move to ``epoch`` (the same epoch again keeps a resumed position); ends a live pass."""
        if epoch != self.order.epoch:
            self._end_active()
        self.order.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """The order's state as of the last batch handed out: ``{"epoch", "consumed", ...}``."""
        return self.order.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at a saved state (any batch size / world size); ends a live pass."""
        self._end_active()
        self.order.load_state_dict(state)

    def stats(self) -> LoaderStats:
        """Timings of the current or last pass (zeros before the first)."""
        if self._last is None:
            return LoaderStats(0, 0, 0.0, 0.0, 0.0, self.num_workers)
        return self._last.stats()

    def __iter__(self) -> Iterator[Any]:
        self._end_active()
        if self._ring is None:
            self._ring = _Ring(self, self.group, self._items)
        run = _Run(self, self._ring, self.order.plan())
        it = _LoaderIter(run, self.order.batches())  # made first: its finalizer stops the run
        run.start()
        self._active = weakref.ref(it)
        self._last = run
        return it

    def _end_active(self) -> None:
        it = self._active() if self._active is not None else None
        if it is not None:
            it.close()
        self._active = None

    def close(self) -> None:
        """Stop a live pass and its threads (also done by exhaustion, ``break`` or ``del``)."""
        self._end_active()

    def __repr__(self) -> str:
        return (
            f"chute.Loader({self.dataset!r}, batch_size={self.batch_size}, "
            f"num_workers={self.num_workers}, prefetch={self.prefetch}, keep={self.keep}, "
            f"ring_size={self.ring_size}, pin_memory={self.pin_memory}, order={self.order!r})"
        )


class _Ring:
    """The output slots: one buffer per fixed-shape field, cut into batch slots (views)."""

    def __init__(self, loader: Loader, group: int, items: int) -> None:
        self.group, self.items = group, items
        self.size = group * items
        b = loader._slot_rows
        buf = loader.dataset.empty_batch(self.size * b, pin_memory=loader.pin_memory)
        for t in buf.values():  # fault the pages in now, not during the first epoch's gathers
            t.zero_()
        self.slots = [{k: t[s * b : (s + 1) * b] for k, t in buf.items()} for s in range(self.size)]
        self.item_out = [
            {k: t[i * group * b : (i + 1) * group * b] for k, t in buf.items()}
            for i in range(items)
        ]

    def batch(self, j: int, n: int) -> dict[str, Any]:
        """Batch ``j`` of ``n`` samples as a fresh dict of slot views (the user may edit it)."""
        return {k: t if n == len(t) else t[:n] for k, t in self.slots[j % self.size].items()}


class _Run:
    """The state of one pass shared by the consumer and the workers (never the iterator)."""

    def __init__(self, loader: Loader, ring: _Ring, plan: list[np.ndarray]) -> None:
        self.ds = loader.dataset
        self.transform = loader.transform
        self.ring = ring
        self.epoch = loader.order.epoch
        self.first_step = loader.order.consumed // loader.order.step_samples  # of the epoch
        self.plan = plan
        self.keep = loader.keep
        self.workers = loader.num_workers
        self.items = -(-len(plan) // ring.group)  # work items in this pass
        self.tasks: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self.results: queue.SimpleQueue[list[tuple[int, _Outcome]]] = queue.SimpleQueue()
        self.stopped = False
        self.busy = [0.0] * max(1, self.workers)
        self.started = time.perf_counter()
        self.ended: float | None = None
        self.wait = 0.0
        self.handed = 0
        self.samples = 0
        self.scheduled = 0
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        """Start the workers (none with ``num_workers=0``) and give them the first items."""
        if not self.workers:
            return
        self.schedule(self.ring.items)
        torch_threads = torch.get_num_threads()  # also pins this thread's own setting
        ready = threading.Barrier(self.workers + 1)
        try:
            for w in range(self.workers):
                t = threading.Thread(
                    target=_work, args=(self, w, ready), name=f"chute-loader-{w}", daemon=True
                )
                self.threads.append(t)
                t.start()
            ready.wait()
        except BaseException:  # Ctrl-C while they start: any not joined exits at the barrier
            ready.abort()
            self.stop()
            raise
        # torch.set_num_threads(1) in a worker also changed the default that new threads
        # start with; put it back (this thread's own count is unchanged by doing so).
        torch.set_num_threads(torch_threads)

    def produce(self, q: int, catch: type[BaseException]) -> list[tuple[int, _Outcome]]:
        """The batches of work item ``q``, gathered into their slots and transformed; an
        exception of type ``catch`` is returned in place of the batches it spoiled."""
        ring, plan = self.ring, self.plan
        first = q * ring.group
        js = range(first, min(first + ring.group, len(plan)))
        where = threading.current_thread().name
        try:
            if ring.group == 1:
                batches = [self.ds.gather(plan[first], out=ring.slots[first % ring.size])]
            else:  # fixed-shape fields only: one gather into the group's consecutive slots
                idx = np.concatenate(plan[js.start : js.stop])
                self.ds.gather(idx, out=ring.item_out[q % ring.items])
                batches = [ring.batch(j, len(plan[j])) for j in js]
        except catch as exc:
            return [(j, (None, exc, where)) for j in js]
        out: list[tuple[int, _Outcome]] = []
        for j, batch in zip(js, batches, strict=True):
            try:
                out.append(
                    (j, (batch if self.transform is None else self.transform(batch), None, ""))
                )
            except catch as exc:
                out.append((j, (None, exc, where)))
        return out

    def schedule(self, upto: int) -> None:
        """Give the workers every work item below ``upto`` (bounded by the pass)."""
        upto = min(upto, self.items)
        while self.scheduled < upto:
            self.tasks.put(self.scheduled)
            self.scheduled += 1

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        self.ended = self.ended or time.perf_counter()
        for _ in self.threads:
            self.tasks.put(None)
        me = threading.current_thread()
        for t in self.threads:
            if t is not me and t.ident is not None:  # started
                t.join()
        while not self.results.empty():  # drop batches and exceptions (and their frames)
            self.results.get()

    def stats(self) -> LoaderStats:
        end = self.ended if self.ended is not None else time.perf_counter()
        return LoaderStats(
            self.handed, self.samples, end - self.started, self.wait, sum(self.busy), self.workers
        )


def _work(run: _Run, w: int, ready: threading.Barrier) -> None:
    """A worker thread: gather the work items it is given until told to stop."""
    # See the NOTE: one intra-op thread per worker. torch initializes a thread's count lazily,
    # from the process default, on its first query: do that first, or it would undo ours.
    torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ready.wait()
    except threading.BrokenBarrierError:
        return
    while True:
        q = run.tasks.get()
        if q is None or run.stopped:
            return
        t0 = time.perf_counter()
        outcomes = run.produce(q, BaseException)  # every failure goes to the consumer
        run.busy[w] += time.perf_counter() - t0
        run.results.put(outcomes)


class _LoaderIter:
    """One pass over the plan. Not a generator: its finalizer stops the workers when it is
    garbage collected, even if ``next()`` was never called, and at interpreter exit (before
    daemon threads are frozen mid-call, which aborts the process)."""

    def __init__(self, run: _Run, order_batches: Iterator[np.ndarray]) -> None:
        self._run = run
        self._order = order_batches
        self._ready: dict[int, _Outcome] = {}
        self._stop = weakref.finalize(self, run.stop)  # must not refer to self

    def __iter__(self) -> _LoaderIter:
        return self

    def __len__(self) -> int:
        return len(self._run.plan) - self._run.handed

    def __next__(self) -> Any:
        run = self._run
        k = run.handed
        if not self._stop.alive:
            raise StopIteration
        if k == len(run.plan):
            next(self._order, None)  # the order moves on to the next epoch
            self.close()
            raise StopIteration
        t0 = time.perf_counter()
        try:
            batch, exc, where = self._take(k)
        except BaseException:  # Ctrl-C while waiting: stop the workers, then propagate
            self.close()
            raise
        run.wait += time.perf_counter() - t0
        if exc is not None:
            self.close()
            idx = run.plan[k]
            samples = f"{idx[:4].tolist()}{'...' if len(idx) > 4 else ''}"
            raise WorkerError(
                f"loader thread {where!r} failed on batch {run.first_step + k} of epoch "
                f"{run.epoch} (samples {samples}): {type(exc).__name__}: {exc}; "
                "its traceback is above"
            ) from exc
        next(self._order)  # record the batch as consumed (state_dict counts it from now)
        run.handed += 1
        run.samples += len(run.plan[k])
        return batch

    def _take(self, k: int) -> _Outcome:
        run = self._run
        if not run.workers:  # group 1: gather in this thread (Ctrl-C is not caught)
            t0 = time.perf_counter()
            ((_, outcome),) = run.produce(k, Exception)
            run.busy[0] += time.perf_counter() - t0
            return outcome
        # Asking for batch k releases batch k - keep: schedule every work item whose slots
        # are all released by now (see the NOTE).
        run.schedule((k - run.keep + 1) // run.ring.group + run.ring.items)
        while k not in self._ready:
            self._ready.update(run.results.get())
        return self._ready.pop(k)

    def close(self) -> None:
        """Stop the workers; later ``next()`` calls raise ``StopIteration``."""
        self._ready.clear()
        self._stop()
