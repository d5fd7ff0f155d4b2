"""``chute.dataloader``: a real ``torch.utils.data.DataLoader`` over a chute Dataset.

For per-sample Python (decoding, augmentation) in worker *processes*; chute's thread
:class:`~chute.Loader` is the faster choice when batch-level transforms suffice.

NOTE (what crosses the process boundary, memory, state)

    Batches, not samples. With a ``sample_transform`` or ``collate_fn`` (or a dataset in
    object storage) the batch sampler yields one int64 index array per batch from
    :meth:`Order.plan() <chute.order.Order.plan>`; the DataLoader sends it to a worker, whose
    :meth:`BatchDataset.__getitems__` does one ``ds.gather(idx)``, which decodes the
    ``decode=`` images of the whole batch at once (then, with a ``sample_transform``, splits
    the batch, transforms each sample and collates them), and then the ``batch_transform``.
    The batch crosses the process boundary through shared-memory slots that each worker
    allocates once and reuses (the protocol is the NOTE in ``chute/loader/handoff.py``), and
    is copied out of them on arrival; the DataLoader's ``collate_fn`` is the identity.
    Without those, nobody tells a worker which batch to make: each computes its own share of
    the pass from the order and the main process receives the batches in order, lent as views
    of the slots (``chute/loader/streams.py``); the same batches, state and errors.
    A stack that builds its own DataLoader from ``batch_sampler`` (accelerate) always takes
    the first way.

    Memory. The Dataset pickles as its path, so a spawned worker maps the files itself and a
    forked one inherits the maps; reads go through the OS page cache, which every process
    shares. A worker's anonymous memory therefore does not grow with the dataset size or the
    number of epochs (a torch ``Subset`` adds its indices, 8 bytes a sample of it: see
    ``chute/reader/subset.py``). ``sample_transform`` receives each sample as ``ds[i]``
    returns it, fresh tensors (the worker gathers the batch once, out of the read-only map,
    and splits it: each sample's tensors are views of that batch's own memory) and
    ``batch_transform`` a freshly gathered batch: both may modify what they get in place. An
    in-RAM dataset (``ds.to_memory()``) is shared copy-on-write by forked workers, but a
    spawned worker reads its own full copy: prefer the memory-mapped dataset with spawn.

    State. The DataLoader asks the sampler for batches ahead of the consumer (``prefetch_factor``
    per worker), so the sampler reads the pure ``plan()`` while ``Order.batches()`` is advanced
    only when the iterator hands a batch to the consumer: ``state_dict()`` counts what was
    received, exactly as :class:`~chute.Loader` does, and resumes with any world size.
    As there, every ``iter()`` is a fresh pass over the whole current epoch, except the first
    after ``load_state_dict``, which resumes at the saved position; an epoch whose last batch
    was received is over even if its iterator was not run to its end (the next ``iter()``
    starts the next epoch); and one pass runs at a time: a newer ``iter()`` (or a
    ``set_epoch`` / ``load_state_dict`` that moves the order) ends the live one, whose
    iterator then raises :class:`~chute.errors.StaleIteratorError`.

    Errors. An exception in ``sample_transform`` is re-raised as a
    :class:`~chute.errors.WorkerError` naming the sample, one in the gather, ``collate_fn`` or
    ``batch_transform`` naming the batch's first samples (chute's own errors pass as they are);
    from a worker process torch re-raises it in the caller with the worker's traceback. Any
    exception ends the pass: its workers are stopped before it propagates (the next ``iter()``
    starts new ones, also with ``persistent_workers``), not when torch's iterator is collected,
    which the traceback's reference cycle delays to a later gc, possibly inside the next
    DataLoader's forked workers ("Exception ignored ... can only test a child process").
    With ``on_error="skip"`` a worker does not warn about the samples it replaced: it sends
    them with the batch (:class:`~chute.loader.batch_dataset.Reported`), and the main process
    warns once per sample and counts it (:attr:`ChuteDataLoader.skipped`).

NOTE (a dead worker, Ctrl-C)

    A worker killed (SIGKILL, the OOM killer) mid-hand-off can fail torch's read of its batch
    with a bare ``ConnectionResetError`` / ``EOFError`` (its socket closes a moment before the
    kernel reports it exited, so torch's own dead-worker check finds nothing). The iterator
    turns that, and torch's ``RuntimeError`` about a dead worker, into a
    :class:`~chute.errors.WorkerError` naming each exited worker's pid and signal or exit code,
    and stops the other workers first (the next ``iter()`` starts new ones, also with
    ``persistent_workers``).

    A SIGINT that lands while ``iter()`` forks the workers (every epoch unless
    ``persistent_workers``) would raise ``KeyboardInterrupt`` inside a CPython at-fork hook,
    which prints "Exception ignored" and drops it: the loop runs on. So ``iter()`` records a
    SIGINT while it starts the workers and replays it to the previous handler once they are
    up (main thread only: Python runs signal handlers there alone). Workers ignore SIGINT
    (a wrapper around ``worker_init_fn``; children they start inherit that): a terminal's
    Ctrl-C reaches the whole process group, and a worker that died of it mid-hand-off made
    the shutdown wait out torch's 5 s join timeout. The main process stops them instead.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .._args import check_int, default_workers
from ..batch import Pad
from ..errors import (
    ArgumentValueError,
)
from ..order.steps import Steps
from ..reader.gatherable import Gatherable, PerEpoch, Prefetching
from ..reader.remote import needs_spawn, refuse_fork
from .batch_dataset import BatchDataset, Reported, as_is
from .decode import Decoded
from .handoff import Handoff
from .passes import OnePass, make_order, unknown_keywords
from .processes import Consumed, uninterrupted, worker_init
from .samplers import EpochSampler, StepBatches
from .streams import Control, Shares, Stream, stream_init
from .views import loader_views

__all__ = ["BatchDataset", "ChuteDataLoader", "dataloader"]

Sample = dict[str, Any]


class ChuteDataLoader(OnePass, torch.utils.data.DataLoader):
    """A ``torch.utils.data.DataLoader`` driven by a chute order (an :class:`~chute.order.Order`,
    or :class:`~chute.order.by_tokens.BatchByTokens` under ``batch_tokens=``).

    Adds ``set_epoch``, ``state_dict`` and ``load_state_dict`` with the semantics of
    :class:`~chute.Loader`: each ``iter()`` is a fresh pass of the current epoch (the
    first after ``load_state_dict`` resumes at the saved position), a finished epoch moves on
    to the next one, one pass runs at a time. Made by :func:`dataloader`.
    """

    def __init__(self, dataset: BatchDataset, order: Steps, **kwargs: Any) -> None:
        self.order = order
        self.batches = dataset
        self._own_pass = False  # iter() is starting torch's iterator
        self._skipped: dict[int, str] = {}  # on_error="skip": what the workers reported
        # index arrays, not lists (__getitems__ takes both); with the epoch for a chute.Mix
        ds = dataset.dataset
        with_epoch = isinstance(ds, PerEpoch)
        source = ds if isinstance(ds, Prefetching) else None
        # what frameworks see: the NOTE of chute/loader/samplers.py
        sampler = EpochSampler(self)
        steps = StepBatches(self, sampler, with_epoch, source, lambda: self._own_pass)
        # the stream path (chute/loader/streams.py) where no batch needs the main process
        self._shares = (
            None if source is not None or not dataset.whole else Shares(dataset, order, with_epoch)
        )
        self._streams: torch.utils.data.DataLoader[int] | None = None  # its torch DataLoader
        self._init_fn = kwargs.get("worker_init_fn")
        kwargs["worker_init_fn"] = functools.partial(worker_init, self._init_fn)
        torch.utils.data.DataLoader.__init__(
            self,
            dataset,  # type: ignore[arg-type]
            batch_sampler=steps,  # type: ignore[arg-type]
            collate_fn=as_is,
            **kwargs,
        )
        object.__setattr__(self, "sampler", sampler)  # torch's default one is unused

    _name = "DataLoader"

    @property
    def skipped(self) -> int:
        """How many distinct samples were replaced so far because their image did not decode
        (``on_error="skip"``; 0 otherwise), as batches holding them were received: from every
        worker process and pass of this DataLoader, each sample counted once, as
        :attr:`LoaderStats.skipped <chute.LoaderStats.skipped>`."""
        return len(self._skipped)

    def _report(self, got: Reported) -> Any:
        """The batch of ``got``; each sample it newly reports replaced is warned about once."""
        for i, message in got.skipped:
            if i not in self._skipped:
                self._skipped[i] = message
                warnings.warn(message, stacklevel=3)  # the user's loop, above __next__
        return got.batch

    def __iter__(self) -> Consumed:  # type: ignore[override]
        self._end_active("iter() was called on the DataLoader again")
        streams = bool(self.num_workers and self._shares)
        progress = self._start_pass(streams)  # first: it may move on to the next epoch
        start = self._stream if streams else self._torch_iter
        self._own_pass = True  # torch iterates the batch sampler now: the pass is started
        try:
            it = uninterrupted(start)  # a SIGINT while the workers start: see the NOTE
        finally:
            self._own_pass = False
        consumed = Consumed(it, progress, self)
        self._track(consumed)
        return consumed

    def _slots(self) -> tuple[int, Any]:
        """Slots per worker (what torch sends a worker ahead, + 1) and the workers' context."""
        context = self.multiprocessing_context or torch.multiprocessing.get_context()
        return (self.prefetch_factor or 2) + 1, context

    def _torch_iter(self) -> Iterator[Any]:
        if not self.persistent_workers or self._iterator is None:
            # new worker processes start: new slots for them (chute/loader/handoff.py)
            self.batches.handoff = Handoff(self.num_workers, *self._slots())
        return super().__iter__()

    def _stream(self) -> Stream:
        """The pass through ``chute/loader/streams.py``: workers make their shares."""
        shares, streams = self._shares, self._streams
        assert shares is not None
        if streams is None:
            self._streams = streams = torch.utils.data.DataLoader(
                shares,
                batch_size=None,
                num_workers=self.num_workers,
                collate_fn=as_is,
                persistent_workers=self.persistent_workers,
                worker_init_fn=functools.partial(stream_init, self._init_fn),
                multiprocessing_context=self.multiprocessing_context,
                prefetch_factor=1,
            )
        if not self.persistent_workers or streams._iterator is None:
            slots, context = self._slots()
            # lent slots: one the consumer holds and one coming back (chute/loader/streams.py)
            self.batches.handoff = Handoff(self.num_workers, slots + 2, context, lend=True)
            shares.ring = Control(self.num_workers, slots, context)
        ring = shares.ring
        assert ring is not None
        ring.cancel()  # a persistent worker still making the last pass stops
        it = iter(streams)
        handoff = self.batches.handoff
        assert handoff is not None
        ring.drain()
        handoff.give_back()
        ring.begin(self.order.state_dict())
        return Stream(
            it,
            ring,
            handoff,
            len(self.order.plan()),
            shares,
            self.persistent_workers,
            self.pin_memory,
            self.timeout,
        )

    def _forget_workers(self) -> None:
        """The next ``iter()`` starts new workers, also with ``persistent_workers``."""
        self._iterator = None
        if self._streams is not None:
            self._streams._iterator = None


_OWN = ("batch_sampler", "sampler", "dataset")


def _torch_keywords() -> set[str]:
    """The DataLoader keywords that :func:`dataloader` passes on (those it sets itself are
    chute's own arguments or refused by name)."""
    params = inspect.signature(torch.utils.data.DataLoader.__init__).parameters
    return set(params) - {"self", "batch_size", "shuffle", "num_workers", "drop_last", *_OWN}


def dataloader(
    ds: Gatherable,
    batch_size: int,
    *,
    shuffle: bool | str = True,
    seed: int = 0,
    num_workers: int | None = None,
    sample_transform: Callable[[Sample], Any] | None = None,
    batch_transform: Callable[[Any], Any] | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    drop_last: bool = False,
    block_size: int | None = None,
    pad: Pad | None = None,
    decode: dict[str, Any] | None = None,
    max_length: int | None = None,
    batch_tokens: int | None = None,
    dtype: Any = None,
    pad_to: int | None = None,
    pad_multiple: int | None = None,
    on_error: str = "raise",
    **dataloader_kwargs: Any,
) -> ChuteDataLoader:
    """A real ``torch.utils.data.DataLoader`` over chute dataset ``ds``, one gather per batch.

    The batch order is chute's :class:`~chute.order.Order` (``shuffle``, ``seed``, ``rank`` /
    ``world_size`` sharding, defaulting to ``torch.distributed``'s, ``drop_last``,
    ``block_size``), so ``set_epoch`` / ``state_dict`` behave as in :class:`~chute.Loader`.
    Without an initialized process group, ``rank`` / ``world_size`` come from the launcher's
    ``RANK`` / ``WORLD_SIZE`` (torchrun), as in ``Loader``. ``pad``: ragged and bytes fields
    come padded, as with ``Loader(pad=)`` (a ``(B, L, ...)`` tensor plus ``FIELD_lengths``;
    one number, or one per field: ``pad={"tokens": pad_id, "labels": -100}``),
    to exactly ``pad_to`` or a multiple of ``pad_multiple`` when given; ``dtype``: fields cast
    in the workers, as in ``Loader`` (``chute/loader/finish.py``).
    ``sample_transform(sample_dict)`` runs per sample in the workers (then the samples are
    collated by ``collate_fn``, default torch's ``default_collate``); ``batch_transform(batch)``
    per batch. Other keywords (``persistent_workers``, ``pin_memory`` (default: whether CUDA is
    available, as in ``Loader``), ``prefetch_factor``, ``multiprocessing_context``,
    ``worker_init_fn``, ...) go to the DataLoader; any other is an
    :class:`~chute.errors.ArgumentError` listing the valid ones. ``ds`` may also be a
    ``torch.utils.data.Subset`` of a chute Dataset (nested ones too; ``random_split``'s
    halves): only its samples are read, in an order over ``len(subset)``, as in ``Loader``.
    ``decode``: image fields decoded per batch in the workers, as in ``Loader``, the whole
    batch at once; with ``sample_transform`` the decoded batch is then split into samples,
    each as ``ds[i]`` returns it with ``decode`` applied (an image a uint8 ``(3, H, W)``
    tensor: ``sample["image"].permute(1, 2, 0).numpy()`` is the ``(H, W, 3)`` array that
    albumentations and OpenCV take, a view), which the function may return as tensors or
    numpy arrays (``default_collate`` stacks either). The decoded pixels stay a pure function
    of (seed, epoch, sample index); see ``docs/vision.md``. ``on_error="skip"`` (with
    ``decode``): a sample whose image does not decode is replaced by the next good sample of
    its batch, warned about once in the main process and counted in
    :attr:`ChuteDataLoader.skipped`, as in ``Loader``. ``max_length`` and ``batch_tokens``: as in
    ``Loader``, Ragged fields cut to their first ``max_length`` rows, and batches of a varying
    number of samples (at most ``batch_size``) within a padded token budget
    (:class:`~chute.order.by_tokens.BatchByTokens`: equal steps across ranks, exact resume;
    see ``docs/tokens.md``). Example::

        dl = chute.dataloader(ds, 256, num_workers=4, sample_transform=augment,
                              persistent_workers=True, pin_memory=True)
        for epoch in range(epochs):
            dl.set_epoch(epoch)
            for batch in chute.to_device(dl):
                step(batch)
    """
    views = loader_views(  # the main process warns about the samples decode= skips
        ds,
        "dataloader",
        max_length=max_length,
        decode=decode,
        seed=seed,
        on_error=on_error,
        warn=False,
        dtype=dtype,
        pad=pad,
        pad_to=pad_to,
        pad_multiple=pad_multiple,
    )
    ds, decoded = views.dataset, views.decoded
    _refuse_unknown(dataloader_kwargs)
    _refuse_split_device_decode(sample_transform, dataloader_kwargs, decoded)
    _refuse_order_keywords(dataloader_kwargs)
    order = make_order(  # chute/loader/passes.py picks the policy
        ds,
        batch_size,
        shuffle,
        seed,
        rank,
        world_size,
        drop_last,
        block_size,
        batch_tokens=batch_tokens,
        measured=views.plain,
        max_length=max_length,
        who="dataloader",
    )
    workers = default_workers() if num_workers is None else check_int("num_workers", num_workers, 0)
    _worker_defaults(ds, workers, dataloader_kwargs)
    dataset = BatchDataset(
        ds,
        sample_transform,
        batch_transform,
        dataloader_kwargs.pop("collate_fn", None),
        pad,
        skipped=decoded.skipped if isinstance(decoded, Decoded) else None,
    )
    loader = ChuteDataLoader(dataset, order, num_workers=workers, **dataloader_kwargs)
    loader._shard_given = rank is not None or world_size is not None
    return loader


def _refuse_unknown(dataloader_kwargs: dict[str, Any]) -> None:
    """A keyword that neither :func:`dataloader` nor torch's ``DataLoader`` takes is chute's
    error, listing the valid ones."""
    torch_keywords = _torch_keywords()
    unknown = [k for k in dataloader_kwargs if k not in torch_keywords and k not in _OWN]
    if unknown:
        chute_keywords = [k for k in inspect.signature(dataloader).parameters if k != "ds"]
        valid = [k for k in chute_keywords if k != "dataloader_kwargs"] + sorted(torch_keywords)
        raise unknown_keywords("chute.dataloader", unknown, valid)


def _refuse_split_device_decode(
    sample_transform: Any, dataloader_kwargs: dict[str, Any], decoded: Gatherable
) -> None:
    """Samples split for a ``sample_transform`` or ``collate_fn`` cannot hold the pixels of
    fields that ``chute.to_device`` decodes after the batch arrives."""
    split = sample_transform is not None or "collate_fn" in dataloader_kwargs
    if split and isinstance(decoded, Decoded) and decoded.on_device:
        raise ArgumentValueError(
            f"decode= fields {sorted(decoded.on_device)} are decoded by chute.to_device, after "
            "the batch arrives: a sample_transform or collate_fn cannot see their pixels; "
            "decode them in the workers (no device=), or use batch_transform="
        )


def _refuse_order_keywords(dataloader_kwargs: dict[str, Any]) -> None:
    """The DataLoader keywords that would take the batch order from chute.Order."""
    clash = sorted(k for k in dataloader_kwargs if k in _OWN)
    if clash:
        raise ArgumentValueError(
            f"chute.dataloader builds its own batch sampler from chute.Order; do not pass "
            f"{clash}: use batch_size, shuffle, seed, rank, world_size, drop_last, block_size"
        )
    if "generator" in dataloader_kwargs:
        raise ArgumentValueError(
            "chute.dataloader does not take generator=: the batch order comes from chute.Order, "
            "a pure function of (seed, epoch), so pass seed= (an int). The workers' random "
            "seeds come from torch's global RNG, as in torch (torch.manual_seed)"
        )
    if dataloader_kwargs.get("in_order", True) is False:
        raise ArgumentValueError(
            "in_order=False is not supported: batches must arrive in order for state_dict() "
            "to count exactly what was consumed"
        )


def _worker_defaults(ds: Gatherable, workers: int, dataloader_kwargs: dict[str, Any]) -> None:
    """``pin_memory`` where CUDA is, as in ``Loader``; worker processes started by
    forkserver for a dataset in object storage (obstore does not survive fork(): see
    ``chute/reader/remote.py``)."""
    dataloader_kwargs.setdefault("pin_memory", torch.cuda.is_available())
    if workers and needs_spawn(ds):
        dataloader_kwargs.setdefault("multiprocessing_context", "forkserver")
        refuse_fork(ds, dataloader_kwargs["multiprocessing_context"])
