"""Loader: batches of a chute Dataset, gathered by worker threads, handed out in order.

NOTE (threads, scheduling, errors, shutdown; the whole protocol, written down once; the
buffers a batch lives in, and how long, have their own NOTE in ``chute/buffers.py``)

    Who does what. ``iter(loader)`` takes this rank's remaining batches of the epoch from the
    :class:`~chute.order.Order` (its ``plan()``: index arrays, computed up front) and starts
    ``num_workers`` daemon threads. A work item is a group of ``group`` consecutive batches
    (``group`` > 1 only when every field is fixed-shape and a batch is smaller than
    ``GROUP_BYTES``): a worker gathers the whole group with one ``ds.gather(idx, out=...)``,
    runs ``transform`` on each batch, and posts the group's batches at once. Small batches
    (CIFAR-like: 0.8 MB) thus share one gather call and one hand-off, whose fixed costs
    (Python, waking the consumer, passing the GIL: ~40 us) would otherwise add 40% to the
    gather itself (~100 us on 2 vCPUs). The consumer (the thread calling ``next()``) hands
    batches out strictly in order; ``Order.batches()`` is advanced only then, so
    ``state_dict()`` counts what the consumer received, never what the workers prefetched.

    Why threads. The gather is numpy ``take`` into the batch's buffer (no per-sample Python,
    no torch op) and releases the GIL; a batch never crosses a process boundary. Torch ops in
    a worker (a transform, ``pad=``) run with ONE intra-op thread: set deliberately in each
    worker, because OpenMP gives every calling thread its own team and ``workers x torch
    threads`` on a few cores collapses (``index_select`` went 25x slower on 2 vCPUs). The
    setting is per thread; the consumer thread keeps its own.

    Buffers. A work item is gathered into buffers from ``chute/buffers.py``, whose NOTE states
    their lifetimes: fresh by default (a batch is valid for as long as anyone holds it), or
    with ``keep=k`` a ring of slots (batch ``j`` is valid until the consumer asks for batch
    ``j + k``). The loader keeps them from one pass to the next; a worker gets the buffers of
    work item ``q`` with ``take(q)``.

    Scheduling (both modes). The consumer gives work items out itself: asking for batch ``j``
    releases batch ``j - k`` (``k`` = 1 without a ring) and gives out every work item up to
    ``items`` past the oldest unreleased one, so ``prefetch`` batches (rounded up to whole
    items, at least one item per worker) are prepared ahead, never more. With the ring,
    ``items`` is its number of work items: group ``q`` is given out only once every batch of
    group ``q - items`` (the one whose slots it reuses) was released, so no worker can get
    ahead of the lifetime rule.

    Errors. A worker catches everything its group raises and posts it in place of the batches;
    the consumer raises :class:`~chute.errors.WorkerError` from it (the original exception,
    with its traceback, is the ``__cause__``) when it reaches that batch, and stops the others.

    One pass at a time. The buffers, the run state and the epoch position are the loader's, so
    a new ``iter()``, or ``set_epoch`` / ``load_state_dict`` moving the position, ends the live
    pass; its iterator then raises :class:`~chute.errors.StaleIteratorError` on its next
    ``next()`` rather than ending quietly (``zip(loader, loader)`` would otherwise yield a
    truncated epoch without a word).

    Shutdown. Exhaustion, ``close()``, ``break`` or ``del`` (the iterator's finalizer),
    garbage collection, interpreter exit, an exception or Ctrl-C while waiting for a batch,
    and a newer pass all stop the pass: a flag is set, each worker is woken with a sentinel,
    finishes at most the work item it holds, and is joined. Workers reference the run state
    only, never the iterator, so dropping the iterator is enough to stop them.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .buffers import Pool, Ring
from .errors import SchemaError, StaleIteratorError, WorkerError
from .order import Order, check_int
from .subset import loadable

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


def head(indices: Any) -> str:
    """The first sample indices of a batch, for error messages: "[459, 206, 3, 81]..."."""
    idx = np.asarray(indices)
    return f"{idx[:4].tolist()}{'...' if len(idx) > 4 else ''}"


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
    a batch-level callable run in the workers). By default a batch is yours for as long as
    you hold it, as with torch's DataLoader (``list(loader)`` works): its memory is reused only
    once nothing refers to it. ``keep=k`` reuses a ring of slots instead, a few percent faster,
    but a fixed-shape field is then valid only until ``k`` more batches were asked for (see
    the NOTE in ``chute/buffers.py``). ``num_workers=0`` gathers in the calling thread.
    ``rank`` and ``world_size`` default to ``torch.distributed``'s when it is initialized.

    Subsets. ``ds`` may also be a ``torch.utils.data.Subset`` of a chute Dataset (nested ones
    too), e.g. a held-out split ``train, val = torch.utils.data.random_split(ds, [0.9, 0.1])``:
    only its samples are read, each batch in one gather, and the order runs over
    ``len(subset)``, so shuffling, ``rank`` / ``world_size`` and ``state_dict`` work on the
    subset. ``loader.dataset`` is then a :class:`~chute.subset.SubsetDataset`.

    Epochs. A loader runs one pass at a time, and a new ``iter()`` continues the epoch where
    the state says: ``next(iter(loader))`` takes the epoch's next batch, and the following
    ``for`` loop gets the rest. An iterator superseded by a newer pass raises
    :class:`~chute.errors.StaleIteratorError`. Once the epoch's last batch was handed out, the
    next pass starts the next epoch (also when the iterator was not run to its end: ``zip``,
    ``islice``), except right after ``set_epoch(e)`` / ``load_state_dict`` put the loader on
    a finished epoch ``e`` (a checkpoint saved after the last step): that pass yields nothing
    and moves on to ``e + 1``. ``state_dict()`` / ``load_state_dict()`` resume exactly, with
    any world size.

    ``num_workers``: gather threads (default ``min(4, CPUs)``). ``prefetch``: batches prepared
    ahead of the consumer (default 2 per worker). ``keep``: ``None`` (default) for fresh
    batches; an int ``k`` >= 1 for the ring, whose batches live until ``k`` more were asked
    for (``k=1`` suits ``chute.to_device``, which copies a batch before asking for the next).
    ``pin_memory``: page-locked batches for fast, asynchronous copies to the GPU (default:
    when CUDA is available; ``True`` without CUDA warns and does not pin, as in torch).
    ``pad``: ragged and bytes fields come padded, as with :meth:`Dataset.gather(pad=)
    <chute.reader.Dataset.gather>` (a ``(B, L, ...)`` tensor filled with ``pad`` plus
    ``FIELD_lengths``), done in the workers. ``shuffle``, ``seed``, ``drop_last``,
    ``block_size``: see :class:`~chute.order.Order`. Example::

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
        keep: int | None = None,
        pad: float | int | None = None,
    ) -> None:
        ds = loadable(ds, "Loader")
        if transform is not None and not callable(transform):
            raise SchemaError(f"transform must be callable, got {transform!r}")
        if pad is not None:  # a bad value fails here, with gather's message, not mid-epoch
            ds.gather(np.zeros(0, np.int64), pad=pad)
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
        self.keep = None if keep is None else check_int("keep", keep, 1)
        self.transform = transform
        self.pad = pad
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else bool(pin_memory)
        if self.pin_memory and not torch.cuda.is_available():
            warnings.warn(
                "pin_memory=True but torch sees no CUDA device here: batches are not pinned",
                stacklevel=2,
            )
            self.pin_memory = False
        rank, world_size = _dist_defaults(rank, world_size)
        self.order = Order(
            len(ds), batch_size, shuffle, seed, rank, world_size, drop_last, block_size
        )
        self.group, self._items = self._geometry()
        self._buffers: Ring | Pool | None = None  # made on the first iter()
        self._active: weakref.ref[_LoaderIter] | None = None
        self._last: _Run | None = None

    def _geometry(self) -> tuple[int, int]:
        """(batches per work item, work items given out at most at once); see the NOTE."""
        keep = self.keep or 1
        if self.num_workers == 0:
            return 1, keep
        probe = self.dataset.empty_batch(1)  # the fixed-shape fields, one row each
        group = 1
        if probe.keys() == self.dataset.schema.keys():
            batch_bytes = self._slot_rows * sum(t.nbytes for t in probe.values())
            group = max(1, min(MAX_GROUP, GROUP_BYTES // max(1, batch_bytes)))
        ahead = max(-(-self.prefetch // group), self.num_workers)
        return group, -(-keep // group) + ahead

    @property
    def batch_size(self) -> int:
        return self.order.batch_size

    @property
    def _slot_rows(self) -> int:
        """Rows of a slot: no batch is larger than the dataset (batch_size may be)."""
        return min(self.batch_size, self.order.n)

    @property
    def ring_size(self) -> int | None:
        """Batch slots in the ring (``keep=k``): a batch is overwritten ``ring_size`` batches
        later. ``None`` with fresh batches (the default), which are never overwritten."""
        return None if self.keep is None else self.group * self._items

    def __len__(self) -> int:
        """Batches per rank in a whole epoch."""
        return len(self.order)

    def set_epoch(self, epoch: int) -> None:
        """Move to ``epoch`` (the same epoch again keeps a resumed position); another epoch
        ends a live pass."""
        before = self.order.epoch
        self.order.set_epoch(epoch)
        if epoch != before:
            self._end_active(f"set_epoch({epoch}) moved the Loader to another epoch")

    def state_dict(self) -> dict[str, Any]:
        """The order's state as of the last batch handed out: ``{"epoch", "consumed", ...}``."""
        return self.order.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at a saved state (any batch size / world size); ends a live pass."""
        self.order.load_state_dict(state)
        self._end_active("load_state_dict() moved the Loader to a saved position")

    def stats(self) -> LoaderStats:
        """Timings of the current or last pass (zeros before the first)."""
        if self._last is None:
            return LoaderStats(0, 0, 0.0, 0.0, 0.0, self.num_workers)
        return self._last.stats()

    def __iter__(self) -> Iterator[Any]:
        self._end_active("iter() was called on the Loader again")
        if self._buffers is None:
            rows = self.group * self._slot_rows  # of a work item
            make = Pool if self.keep is None else Ring
            self._buffers = make(self.dataset, rows, self._items, self.pin_memory)
        order_batches = self.order.batches()  # first: it may move on from a finished epoch
        run = _Run(self, self._buffers, self.order.plan())
        it = _LoaderIter(run, order_batches)  # made first: its finalizer stops the run
        run.start()
        self._active = weakref.ref(it)
        self._last = run
        return it

    def _end_active(self, why: str | None) -> None:
        it = self._active() if self._active is not None else None
        if it is not None:
            it.close(why)
        self._active = None

    def close(self) -> None:
        """Stop a live pass and its threads (also done by exhaustion, ``break`` or ``del``);
        its iterator then ends (``StopIteration``)."""
        self._end_active(None)

    def __repr__(self) -> str:
        return (
            f"chute.Loader({self.dataset!r}, batch_size={self.batch_size}, "
            f"num_workers={self.num_workers}, prefetch={self.prefetch}, keep={self.keep}, "
            f"ring_size={self.ring_size}, pin_memory={self.pin_memory}, order={self.order!r})"
        )


class _Run:
    """The state of one pass shared by the consumer and the workers (never the iterator)."""

    def __init__(self, loader: Loader, buffers: Ring | Pool, plan: list[np.ndarray]) -> None:
        self.ds = loader.dataset
        self.transform = loader.transform
        self.pad = loader.pad
        self.buffers = buffers
        self.group = loader.group
        self.window = loader._items  # work items given out at most at once
        self.epoch = loader.order.epoch
        self.first_step = loader.order.consumed // loader.order.step_samples  # of the epoch
        self.plan = plan
        self.keep = loader.keep or 1
        self.workers = loader.num_workers
        self.items = -(-len(plan) // self.group)  # work items in this pass
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
        self.schedule(self.window)
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
        """The batches of work item ``q``, gathered and transformed; an exception of type
        ``catch`` is returned in place of the batches it spoiled."""
        plan = self.plan
        first = q * self.group
        js = range(first, min(first + self.group, len(plan)))
        where = threading.current_thread().name
        try:
            if len(js) == 1:
                batches = [self.ds.gather(plan[first], out=self.buffers.take(q), pad=self.pad)]
            else:  # fixed-shape fields only: one gather, cut into the group's batches
                idx = np.concatenate(plan[js.start : js.stop])
                got = self.ds.gather(idx, out=self.buffers.take(q))
                ends = np.cumsum([len(plan[j]) for j in js]).tolist()
                batches = [
                    {k: t[a:b] for k, t in got.items()}
                    for a, b in zip([0, *ends[:-1]], ends, strict=True)
                ]
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
        self._stale: str | None = None  # why a newer pass ended this one
        self._stop = weakref.finalize(self, run.stop)  # must not refer to self

    def __iter__(self) -> _LoaderIter:
        return self

    def __len__(self) -> int:
        return len(self._run.plan) - self._run.handed

    def __next__(self) -> Any:
        run = self._run
        k = run.handed
        if not self._stop.alive:
            if self._stale is not None:
                raise StaleIteratorError(
                    f"this Loader iterator was ended after {k} batches: {self._stale}. A Loader "
                    "runs one pass at a time (the newest iter() continues the epoch where this "
                    "one stopped): use one iterator at a time, or a second Loader"
                )
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
            raise WorkerError(
                f"loader thread {where!r} failed on batch {run.first_step + k} of epoch "
                f"{run.epoch} (samples {head(run.plan[k])}): {type(exc).__name__}: {exc}; "
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
        # Asking for batch k releases batch k - keep: give out every work item up to
        # `window` past the oldest unreleased one (see the NOTE).
        run.schedule((k - run.keep + 1) // run.group + run.window)
        while k not in self._ready:
            self._ready.update(run.results.get())
        return self._ready.pop(k)

    def close(self, why: str | None = None) -> None:
        """Stop the workers; later ``next()`` calls raise ``StopIteration``, or, when a newer
        pass ended this one (``why``), :class:`~chute.errors.StaleIteratorError`."""
        if why is not None and self._stop.alive:
            self._stale = why
        self._ready.clear()
        self._stop()
