"""One pass of the :class:`~chute.Loader`: the run state, the worker threads that gather
batches, and the iterator that hands them out in order.

NOTE (threads, scheduling, errors, shutdown; the whole protocol, written down once; the
buffers a batch lives in, and how long, have their own NOTE in ``chute/buffers.py``)

    Who does what. ``iter(loader)`` takes this rank's batches of the pass from the
    :class:`~chute.order.Order` (its ``plan()``: index arrays, each computed when asked; the
    whole epoch, or after ``load_state_dict`` the rest from the saved position) and starts
    ``num_workers`` daemon threads (one fewer than the CPUs where the consumer takes a worker's
    place: below). A work item is a group of ``group`` consecutive batches
    (``group`` > 1 only when a batch is smaller than ``GROUP_BYTES`` and its fields can be cut
    out of a larger gather: every field fixed-shape, or a dataset on disk whose variable-size
    fields are ragged, bytes or strings, without ``pad=``; the Loader decides it): a worker
    gathers the whole group with one ``ds.gather(idx, out=...)``, cuts it into its batches
    (views: a ragged batch's values are a slice of the group's, its offsets rebased), runs
    ``transform`` on each batch, and posts the group's batches at once. Small batches thus share
    one gather call and one hand-off, whose fixed costs (Python under the GIL, waking the
    consumer, passing the GIL: ~40 us) would otherwise add 40% to the gather itself (CIFAR-like,
    0.8 MB: ~100 us on 2 vCPUs) and keep two threads from gathering at once (shuffled token
    documents, 0.6 MB a batch: 2 threads each calling ``ds.gather`` per batch reached 1.06x one
    thread; gathering 6 or 13 batches at once, 2.7x and 3.2x). The consumer (the thread calling
    ``next()``) hands batches out strictly in order; ``Order.batches()`` is advanced only then,
    so ``state_dict()`` counts what the consumer received, never what the workers prefetched. A
    consumer that finds no batch ready and a work item given out that no worker has taken yet
    gathers that item itself rather than wait (plain gathers only: no ``transform``, ``pad=`` or
    decode, whose torch ops stay in the workers' one intra-op thread): on a busy machine a
    thread started (or woken) for the pass can wait milliseconds for a core, while the consumer
    is already running (shuffled token documents, 1 thread on a loaded 2-core box: 0.64x the
    bare gather loop without, 0.83x with). With no CPU to spare for it (``num_workers`` at least
    the CPUs this process may use), the consumer takes a worker's place: one thread fewer than
    the CPUs starts, and the consumer gathers whenever it would wait (2 CPUs, ``num_workers=2``,
    against the bare loop: shuffled token documents 1.68x with 1 thread and the consumer, 1.26x
    with 2 threads; CIFAR-like 1.72x and 1.46x; 2 threads and a helping consumer, three
    gathering on two cores, no faster than 2).

    Why threads. The gather is numpy ``take`` into the batch's buffer (no per-sample Python,
    no torch op) and releases the GIL; a batch never crosses a process boundary. Torch ops in
    a worker (a transform, ``pad=``, ``dtype=``) run with ONE intra-op thread: set
    deliberately in each worker, because OpenMP gives every calling thread its own team and
    ``workers x torch threads`` on a few cores collapses (``index_select`` went 25x slower on
    2 vCPUs). The setting is per thread; the consumer thread keeps its own (how the two share
    the cores: ``docs/tuning.md``).

    Buffers. A work item is gathered into buffers from ``chute/buffers.py``, whose NOTE
    states their lifetimes: fresh by default (a batch is valid for as long as anyone holds it), or
    with ``reuse_after=k`` a ring of slots (batch ``j`` is valid until the consumer asks for
    batch ``j + k``). The loader keeps them from one pass to the next; a worker gets the buffers of
    work item ``q`` with ``take(q)``, and gathers variable-size values into ``values`` (a pool
    under the same rule as fresh batches, in both modes).

    Scheduling (both modes). The consumer gives work items out itself: asking for batch ``j``
    releases batch ``j - k`` (``k`` = 1 without a ring) and gives out every work item up to
    ``items`` past the oldest unreleased one, so ``prefetch`` batches (rounded up to whole
    items, at least one item per worker and one more: a consumer that helps takes it, and a
    worker done early has the next; with 1 thread, 2 items ahead instead of 1 took shuffled
    token documents in items of 4 MB from 1.11x to 1.25x the bare loop) are prepared ahead,
    never more. With the ring,
    ``items`` is its number of work items: group ``q`` is given out only once every batch of
    group ``q - items`` (the one whose slots it reuses) was released, so no worker can get
    ahead of the lifetime rule.

    Errors. A worker catches everything its group raises and posts it in place of the batches;
    when the consumer reaches that batch it stops the others and raises: a chute error
    (:class:`~chute.errors.DatasetChangedError`, :class:`~chute.errors.FormatError`, ...) as
    itself, with the worker's traceback and a note naming the thread, batch, epoch and first
    samples, so that ``except chute.DatasetChangedError`` catches it as with
    :func:`chute.dataloader`; anything else (a transform's bug) as a
    :class:`~chute.errors.WorkerError` with that context, the original exception (and its
    traceback) as its ``__cause__``. The same with ``num_workers=0``.

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

import contextlib
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from .._args import usable_cpus
from ..batch import Pad, RaggedBatch
from ..buffers import Buffers
from ..columns import segments
from ..columns.gather import head
from ..errors import ChuteError, StaleIteratorError, WorkerError
from ..reader.dataset import Dataset
from ..reader.gatherable import Gatherable
from .decode import with_split
from .decode_split import decode_threads

__all__ = ["LoaderIter", "Run"]

_Outcome = tuple[Any, "BaseException | None", str]  # a batch, or the error and where it arose


class Run:
    """The state of one pass shared by the consumer and the workers (never the iterator)."""

    def __init__(
        self,
        ds: Gatherable,
        buffers: Buffers,
        plan: Sequence[np.ndarray],
        *,
        transform: Callable[[dict[str, Any], np.ndarray, int], Any] | None,
        pad: Pad | None,
        group: int,
        window: int,
        reuse_after: int,
        workers: int,
        epoch: int,
        first_step: int,
    ) -> None:
        self.ds = ds
        self.transform = transform
        self.pad = pad
        self.buffers = buffers
        self.group = group
        self.window = window  # work items given out at most at once
        self.epoch = epoch
        self.first_step = first_step  # the epoch's step of this pass's first batch
        self.plan = plan
        self.reuse_after = reuse_after
        # whether the consumer may gather a work item itself (see the NOTE): plain gathers
        # only, which run no torch op (a transform, pad=, a decode: the workers' one thread);
        # with no CPU to spare for it, it takes a worker's place
        plain = transform is None and pad is None and type(ds) is Dataset
        cpus = usable_cpus()
        self.workers = cpus - 1 if plain and workers >= cpus > 1 else workers
        self.helpable = plain and self.workers < cpus
        self.items = -(-len(plan) // self.group)  # work items in this pass
        self.tasks: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self.results: queue.SimpleQueue[list[tuple[int, _Outcome]]] = queue.SimpleQueue()
        self.stopped = False
        self.busy = [0.0] * max(1, self.workers)
        self.started = time.perf_counter()
        self.ended: float | None = None
        self.wait = 0.0
        self.helped = 0.0  # of `wait`: the consumer gathering work items itself
        self.handed = 0
        self.samples = 0
        self.scheduled = 0
        self.threads: list[threading.Thread] = []
        self.on_stop: list[Callable[[], Any]] = []  # e.g. a remote dataset's prefetch feed

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
        ``catch`` is returned in place of the batches it spoiled. The pass's first batch is
        waited for: of a group, it is gathered alone and posted at once."""
        plan = self.plan
        first = q * self.group
        js = range(first, min(first + self.group, len(plan)))
        try:
            out = self.buffers.take(q)
        except catch as exc:  # as when the gather fails: posted in place of the batches
            return [(j, (None, exc, threading.current_thread().name)) for j in js]
        # Decodes split across threads (see chute/loader/decode_split.py): the pass's first batch,
        # and with several workers its last ones.
        split = decode_threads(q, self.items, self.workers, first_batch=False)
        if q == 0 and len(js) > 1 and self.workers:
            n = len(plan[first])
            first_split = decode_threads(q, self.items, self.workers, first_batch=True)
            head_out = {k: t[:n] for k, t in out.items()}
            self.results.put(self._produce(js[:1], head_out, catch, first_split))
            js, out = js[1:], {k: t[n:] for k, t in out.items()}
        elif q == 0:
            split = decode_threads(q, self.items, self.workers, first_batch=True)
        return self._produce(js, out, catch, split)

    def _produce(
        self, js: range, out: dict[str, torch.Tensor], catch: type[BaseException], threads: int
    ) -> list[tuple[int, _Outcome]]:
        """Work item batches ``js`` gathered into ``out``, decodes split across ``threads``."""
        plan = self.plan
        ds = with_split(self.ds, threads)
        where = threading.current_thread().name
        try:
            if len(js) == 1:  # variable-size values into the pool's buffers (chute/buffers.py)
                with segments.Outputs(self.buffers.values.batch()):
                    batches = [ds.gather(plan[js[0]], out=out, pad=self.pad)]
            else:  # one gather, cut into the group's batches (see the NOTE)
                idx = np.concatenate([plan[j] for j in js])
                with segments.Outputs(self.buffers.values.batch()):
                    got = ds.gather(idx, out=out)
                ends = np.cumsum([len(plan[j]) for j in js]).tolist()
                batches = [
                    {k: cut(t, a, b) for k, t in got.items()}
                    for a, b in zip([0, *ends[:-1]], ends, strict=True)
                ]
        except catch as exc:
            return [(j, (None, exc, where)) for j in js]
        outcomes: list[tuple[int, _Outcome]] = []
        for j, batch in zip(js, batches, strict=True):
            if self.stopped:  # the pass ended: the group's other transforms are not wanted
                break
            try:
                if self.transform is not None:  # with the batch's samples (chute.image.augment)
                    batch = self.transform(batch, plan[j], self.epoch)
                outcomes.append((j, (batch, None, "")))
            except catch as exc:
                outcomes.append((j, (None, exc, where)))
        return outcomes

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
        for fn in self.on_stop:
            fn()

    def elapsed(self) -> float:
        """Seconds from ``iter()`` to the end of the pass (or now)."""
        end = self.ended if self.ended is not None else time.perf_counter()
        return end - self.started


def cut(value: Any, a: int, b: int) -> Any:
    """Samples ``a:b`` of a group's gathered ``value`` (a tensor, a :class:`RaggedBatch`,
    a list of strings), as views: a ragged batch's values are a slice of the group's and its
    offsets start at 0."""
    if isinstance(value, RaggedBatch):
        offsets = value.offsets.numpy()
        lo, hi = int(offsets[a]), int(offsets[b])
        shapes = None if value.shapes is None else value.shapes[a:b]
        return RaggedBatch(value.values[lo:hi], torch.from_numpy(offsets[a : b + 1] - lo), shapes)
    return value[a:b]


def _work(run: Run, w: int, ready: threading.Barrier) -> None:
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


def _with_context(exc: ChuteError, context: str) -> ChuteError:
    """``exc`` with a note saying where it was raised (Python 3.11+: ``add_note``, shown
    under the traceback); on 3.10 a copy of the same class whose message ends with it."""
    add_note = getattr(exc, "add_note", None)
    if add_note is not None:
        add_note(f"chute.Loader: {context}")
        return exc
    try:
        copy = type(exc)(f"{exc} (chute.Loader: {context})")
    except TypeError:  # a subclass with another signature: as it is
        return exc
    copy.__cause__ = exc.__cause__
    copy.__traceback__ = exc.__traceback__
    return copy


class LoaderIter:
    """One pass over the plan. Not a generator: its finalizer stops the workers when it is
    garbage collected, even if ``next()`` was never called, and at interpreter exit (before
    daemon threads are frozen mid-call, which aborts the process)."""

    def __init__(self, run: Run, order_batches: Iterator[np.ndarray]) -> None:
        self._run = run
        self._order = order_batches
        self._ready: dict[int, _Outcome] = {}
        self._stale: str | None = None  # why a newer pass ended this one
        self._stop = weakref.finalize(self, run.stop)  # must not refer to self

    def __iter__(self) -> LoaderIter:
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
                    "runs one pass at a time: use one iterator at a time, or a second Loader"
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
            context = (
                f"loader thread {where!r} failed on batch {run.first_step + k} of epoch "
                f"{run.epoch} (samples {head(run.plan[k])})"
            )
            if isinstance(exc, ChuteError):  # as itself: `except chute.DatasetChangedError`
                raise _with_context(exc, context)
            raise WorkerError(
                f"{context}: {type(exc).__name__}: {exc}; its traceback is above"
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
        # Asking for batch k releases batch k - reuse_after: give out every work item up to
        # `window` past the oldest unreleased one (see the NOTE).
        run.schedule((k - run.reuse_after + 1) // run.group + run.window)
        while k not in self._ready:
            try:
                got = run.results.get(block=False)
            except queue.Empty:
                got = self._help()
            self._ready.update(got)
        return self._ready.pop(k)

    def _help(self) -> list[tuple[int, _Outcome]]:
        """With no batch ready: a work item given out that no worker took yet, gathered in
        this thread (see the NOTE), else the next batches a worker posts, waited for."""
        run = self._run
        q: int | None = -1
        if run.helpable:
            with contextlib.suppress(queue.Empty):
                q = run.tasks.get(block=False)
        if q is None:  # a worker's stop sentinel (another thread ended the pass): theirs
            run.tasks.put(None)
        if q is None or q < 0:
            return run.results.get()
        t0 = time.perf_counter()
        got = run.produce(q, Exception)
        run.helped += time.perf_counter() - t0
        return got

    def close(self, why: str | None = None) -> None:
        """Stop the workers; later ``next()`` calls raise ``StopIteration``, or, when a newer
        pass ended this one (``why``), :class:`~chute.errors.StaleIteratorError`."""
        if why is not None and self._stop.alive:
            self._stale = why
        self._ready.clear()
        self._stop()
