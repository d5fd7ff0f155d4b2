"""Loader: batches of a chute Dataset, gathered by worker threads, handed out in order.

This module holds the configuration: the :class:`Loader` (its arguments, the work-item geometry,
epochs and ``state_dict``) and :class:`LoaderStats`. A pass (``iter(loader)``) is run by
``chute/loader/threads.py``, whose NOTE writes down the whole protocol once: threads, scheduling,
errors, one pass at a time, shutdown. The buffers a batch lives in, and how long, have their own
NOTE in ``chute/buffers.py``. Epochs, resume and the one-pass rule are
:class:`~chute.loader.passes.OnePass`'s, shared with :func:`chute.dataloader`.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .._args import check_int, default_workers
from ..batch import Pad
from ..buffers import Buffers, Pool, Ring
from ..errors import ArgumentError
from ..image.augment import indexed_transform
from ..order.steps import Steps
from ..reader.dataset import Dataset
from ..reader.gatherable import Gatherable, PerEpoch, Prefetching
from .decode import sizes_vary
from .passes import OnePass, make_order, unknown_keywords
from .samplers import EpochSampler, LoaderBatches
from .threads import LoaderIter, Run
from .views import loader_views

__all__ = ["Loader", "LoaderStats"]

GROUP_BYTES = 8 << 20  # small batches are gathered in groups of about this many bytes
MAX_GROUP = 32


@dataclass(frozen=True)
class LoaderStats:
    """Where the time of the current (or last) pass went: is training input-bound?"""

    batches: int  # handed to the consumer
    samples: int
    total_s: float  # from iter() to the end of the pass (or now)
    wait_s: float  # time the consumer spent blocked in next(), waiting for data
    busy_s: float  # summed over workers: gathering and transforming
    workers: int  # threads started (see Loader's num_workers)
    skipped: int = 0  # samples whose image failed to decode, replaced (on_error="skip")
    helped_s: float = 0.0  # of wait_s: the consumer gathering work items itself meanwhile

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
        helped = f" (gathering {self.helped_s / self.total_s:.0%})" if self.helped_s else ""
        return (
            f"{self.batches} batches, {self.samples} samples in {self.total_s:.3f} s "
            f"({rate:,.0f}/s); consumer waited {self.wait_fraction:.0%}{helped}; "
            f"workers busy {self.worker_utilization:.0%} ({self.workers})"
        )


class Loader(OnePass):
    """Batches of ``ds`` for this rank, in :class:`~chute.order.Order`, from worker threads.

    Yields dicts ``{field: tensor | RaggedBatch | list[str]}`` (or what ``transform`` returns,
    a batch-level callable run in the workers; a :class:`chute.BatchTransform` such as
    :class:`chute.MixUp` is also given the batch's sample indices, the seed and the epoch).
    By default a batch is yours for as long as you hold it, as with torch's DataLoader
    (``list(loader)`` works): its memory is reused only once nothing refers to it.
    ``reuse_after=k`` reuses a ring of slots instead, a few percent faster, but a fixed-shape
    field is then valid only until ``k`` more batches were asked for (see the NOTE in
    ``chute/buffers.py``). ``num_workers=0`` gathers in the calling thread.
    ``rank`` and ``world_size`` default to ``torch.distributed``'s when it is initialized,
    else to the launcher's ``RANK`` / ``WORLD_SIZE`` environment variables (torchrun sets them
    before ``init_process_group``), else 0 and 1. Unknown keywords are an
    :class:`~chute.errors.ArgumentError` listing the valid ones.

    Subsets. ``ds`` may also be a ``torch.utils.data.Subset`` of a chute Dataset (nested ones
    too), e.g. a held-out split ``train, val = torch.utils.data.random_split(ds, [0.9, 0.1])``:
    only its samples are read, each batch in one gather, and the order runs over
    ``len(subset)``, so shuffling, ``rank`` / ``world_size`` and ``state_dict`` work on the
    subset. ``loader.dataset`` is then a :class:`~chute.reader.subset.SubsetDataset`.

    Epochs. As with torch's ``DataLoader``, every ``iter()`` is a fresh pass over the whole
    current epoch: after a ``break`` or a ``next(iter(loader))`` peek, the next ``for`` loop
    sees every sample. The current epoch is the one ``set_epoch(e)`` chose; once a pass handed
    out the epoch's last batch (also when its iterator was not run to its end: ``zip``,
    ``islice``), the next pass runs the next epoch, so loops without ``set_epoch`` get a new
    shuffle each time. ``state_dict()`` / ``load_state_dict()`` resume exactly, with any
    world size: the first pass after ``load_state_dict`` starts at the saved position (a
    checkpoint saved after an epoch's last step: that pass yields nothing and moves on to the
    next epoch), and ``loader.load_state_dict(loader.state_dict())`` continues where the last
    pass stopped. A loader runs one pass at a time: an iterator superseded by a newer pass
    raises :class:`~chute.errors.StaleIteratorError`.

    ``num_workers``: gather threads (default ``min(4, CPUs)``; with a plain gather, no
    ``transform=``, ``pad=`` or ``decode=``, and no CPU to spare, one fewer than the CPUs,
    the thread iterating the loader gathering whenever it would wait). ``prefetch``: batches
    prepared ahead of the consumer (default 2 per worker; at least one work item,
    ``loader.group`` batches, per worker and one more). ``reuse_after``: ``None`` (default) for
    fresh batches, never reused while referenced; an int ``k`` >= 1 for the ring, whose
    batches' memory is reused after ``k`` more batches were asked for (``k=1`` suits
    ``chute.to_device``, which copies a batch before asking for the next). ``keep=`` is the
    former name of ``reuse_after=``, accepted with a ``DeprecationWarning`` for one release.
    ``pin_memory``: page-locked batches for fast, asynchronous copies to the GPU (default:
    when CUDA is available; ``True`` without CUDA warns and does not pin, as in torch).
    ``pad``: ragged and bytes fields come padded, as with :meth:`Dataset.gather(pad=)
    <chute.Dataset.gather>` (a ``(B, L, ...)`` tensor filled with ``pad`` plus
    ``FIELD_lengths``), done in the workers; one number for every field, or one per field,
    ``pad={"tokens": pad_id, "labels": -100}`` (0 for a field it does not name);
    ``pad_to=N`` pads every such field to exactly ``N`` (a longer sample is an
    :class:`~chute.errors.ArgumentValueError`: cut with ``max_length=``), ``pad_multiple=M``
    to the next multiple of ``M``, so that a compiled model sees few shapes (``docs/tokens.md``).
    ``dtype``: fields cast in the workers, ``{"tokens": torch.int64}`` (a torch dtype or a
    numpy dtype name per field) or one dtype for every fixed-shape numeric field, instead of
    ``.long()`` in the training step, where torch's threads compete with the loader's
    (``docs/tuning.md``; ``chute/loader/finish.py``).
    ``decode``: image fields decoded in the workers,
    ``{"image": [chute.RandomResizedCrop(224), chute.RandomHorizontalFlip()]}`` -> uint8
    ``(B, 3, 224, 224)``, random crops and flips a pure function of (``seed``, epoch, sample
    index): see ``chute/loader/decode.py``. ``on_error="skip"``: a sample whose image does not
    decode is replaced by the next good sample of its batch (the batch keeps its size), warned
    about once and counted in ``stats().skipped``. ``weights`` (one per sample),
    ``epoch_size`` (default ``len(ds)``), ``replacement``: each epoch draws ``epoch_size``
    samples with probability proportional to their weight, as torch's
    ``WeightedRandomSampler``, deterministic, sharded and resumable
    (:class:`~chute.order.weighted.WeightedOrder`). ``shuffle``, ``seed``, ``drop_last``,
    ``block_size``: see :class:`~chute.order.Order`; ``shuffle="parts"`` is the part-aware
    shuffle (``chute/order/part_shuffle.py``: each rank reads its own share of the parts, for data
    in object storage; see ``docs/remote.md``). ``max_length``: each sample of a Ragged field
    cut to its first ``max_length`` rows (``chute/reader/truncate.py``), before ``pad=``.
    ``batch_tokens``: batches of a varying number of samples (at most ``batch_size``), each
    padded size (samples x longest) within ``batch_tokens``, similar lengths grouped within a
    shuffle window (:class:`~chute.order.by_tokens.BatchByTokens`: equal steps across ranks,
    exact resume; see ``docs/tokens.md``); a row of ``chute.pack`` / ``chute.windows`` counts
    its whole ``length``. Example::

        loader = chute.Loader(chute.open("train.chute"), batch_size=256, num_workers=2)
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            for batch in loader:
                step(batch["image"], batch["label"])
            print(loader.stats())
    """

    _name = "Loader"

    def __init__(
        self,
        ds: Gatherable,
        batch_size: int,
        *,
        shuffle: bool | str = True,
        seed: int = 0,
        num_workers: int | None = None,
        prefetch: int | None = None,
        drop_last: bool = False,
        transform: Callable[[dict[str, Any]], Any] | None = None,
        pin_memory: bool | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        block_size: int | None = None,
        reuse_after: int | None = None,
        pad: Pad | None = None,
        decode: dict[str, Any] | None = None,
        max_length: int | None = None,
        batch_tokens: int | None = None,
        on_error: str = "raise",
        weights: Any = None,
        epoch_size: int | None = None,
        replacement: bool = True,
        dtype: Any = None,
        pad_to: int | None = None,
        pad_multiple: int | None = None,
        **unknown: Any,
    ) -> None:
        reuse_after = _check_keywords(unknown, reuse_after)
        views = loader_views(
            ds,
            "Loader",
            max_length=max_length,
            decode=decode,
            seed=seed,
            on_error=on_error,
            warn=True,
            dtype=dtype,
            pad=pad,
            pad_to=pad_to,
            pad_multiple=pad_multiple,
        )
        ds = views.dataset
        self._transform = indexed_transform(transform, seed)  # chute/image/augment.py
        if pad is not None:  # a bad value fails here, with gather's message, not mid-epoch
            ds.gather(np.zeros(0, np.int64), pad=pad)
        self.dataset: Gatherable = ds
        self._decoded = views.decoded  # its decode= view counts the skipped samples
        self.num_workers, self.prefetch = _workers(num_workers, prefetch)
        self.reuse_after = None if reuse_after is None else check_int("reuse_after", reuse_after, 1)
        self.transform = transform
        self.pad = pad
        self.pin_memory = _pin_memory(pin_memory)
        self._shard_given = rank is not None or world_size is not None
        self.order: Steps = make_order(  # chute/loader/passes.py picks the policy
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
            weights=weights,
            epoch_size=epoch_size,
            replacement=replacement,
        )
        # what a framework finds: the NOTE of chute/loader/samplers.py
        self.sampler = EpochSampler(self)
        self.batch_sampler = LoaderBatches(self, self.sampler, self._not_plain())
        self.group, self._items = self._geometry()
        self._buffers: Buffers | None = None  # made on the first iter()
        self._last: Run | None = None

    def _geometry(self) -> tuple[int, int]:
        """(batches per work item, work items given out at most at once); see the NOTE in
        ``chute/loader/threads.py``."""
        keep = self.reuse_after or 1  # batches a consumer holds at once
        if self.num_workers == 0:
            return 1, keep
        batch_bytes = self._batch_bytes()
        group = 1
        if batch_bytes is not None:
            group = max(1, min(MAX_GROUP, GROUP_BYTES // max(1, batch_bytes)))
        ahead = max(-(-self.prefetch // group), self.num_workers + 1)
        return group, -(-keep // group) + ahead

    def _batch_bytes(self) -> int | None:
        """About the bytes of a batch when batches may be gathered in groups (one gather cut
        into batches: the NOTE in ``chute/loader/threads.py``), else None: fixed-shape fields
        whose shape never varies, or a dataset on disk whose variable-size fields a batch's
        offsets cut (ragged, bytes, strings; not with ``pad=``, which pads each batch to its
        own longest sample), by its bytes per sample."""
        ds = self.dataset
        probe = ds.empty_batch(1)  # the fixed-shape fields, one row each
        if probe.keys() == ds.schema.keys():
            return (
                None if sizes_vary(ds) else self._slot_rows * sum(t.nbytes for t in probe.values())
            )
        cut = all(f.cuts for f in ds.schema.values())
        if type(ds) is Dataset and cut and self.pad is None and len(ds):
            return self._slot_rows * ds.nbytes // len(ds)
        return None

    def _not_plain(self) -> str | None:
        """What a DataLoader reading ``self.dataset`` with ``__getitems__`` and torch's
        collate cannot do as this Loader does, or None (see ``LoaderBatches``)."""
        if self.transform is not None:
            return "run its transform="
        if self.pad is not None:
            return "pad its batches (pad=)"
        if isinstance(self.dataset, PerEpoch):
            return "draw its per-epoch samples (decode= crops, chute.mix)"
        if self.dataset.empty_batch(1).keys() != self.dataset.schema.keys():
            return "collate its variable-size and string fields into the same batches"
        return None

    @property
    def prefetch_factor(self) -> int | None:
        """Batches prepared ahead per worker, as torch's ``DataLoader`` names it (None without
        workers): what a stack that rebuilds the loader as a DataLoader reads."""
        return max(1, self.prefetch // self.num_workers) if self.num_workers else None

    @property
    def batch_size(self) -> int:
        return self.order.batch_size

    @property
    def _slot_rows(self) -> int:
        """Rows of a slot: no batch is larger than the dataset (batch_size may be)."""
        return min(self.batch_size, self.order.n)

    @property
    def ring_size(self) -> int | None:
        """Batch slots in the ring (``reuse_after=k``): a batch is overwritten ``ring_size``
        batches later. ``None`` with fresh batches (the default), which are never overwritten."""
        return None if self.reuse_after is None else self.group * self._items

    def stats(self) -> LoaderStats:
        """Timings of the current or last pass (zeros before the first)."""
        run = self._last
        skipped = len(getattr(self._decoded, "skipped", ()))
        if run is None:
            return LoaderStats(0, 0, 0.0, 0.0, 0.0, self.num_workers, skipped)
        return LoaderStats(
            run.handed,
            run.samples,
            run.elapsed(),
            run.wait,
            sum(run.busy),
            run.workers,
            skipped,
            run.helped,
        )

    def __iter__(self) -> Iterator[Any]:
        self._end_active("iter() was called on the Loader again")
        if self._buffers is None:
            rows = self.group * self._slot_rows  # of a work item
            make: type[Pool] | type[Ring] = Pool if self.reuse_after is None else Ring
            self._buffers = make(self.dataset, rows, self._items, self.pin_memory)
        order_batches = self._start_pass()  # first: it may move on to the next epoch
        ds = self.dataset
        if isinstance(ds, PerEpoch):  # a mix's samples, decode='s crops: per epoch
            ds = ds.at_epoch(self.order.epoch)
        run = Run(
            ds,
            self._buffers,
            self.order.plan(),
            transform=self._transform,
            pad=self.pad,
            group=self.group,
            window=self._items,
            reuse_after=self.reuse_after or 1,
            workers=self.num_workers,
            epoch=self.order.epoch,
            first_step=self.order.consumed // self.order.step_samples,
        )
        if isinstance(ds, Prefetching):  # in object storage: fetch this pass's parts ahead
            feed = ds.prefetch(run.plan)
            if feed is not None:
                run.on_stop.append(feed.close)
        it = LoaderIter(run, order_batches)  # made first: its finalizer stops the run
        run.start()
        self._track(it)
        self._last = run
        return it

    def close(self) -> None:
        """Stop a live pass and its threads (also done by exhaustion, ``break`` or ``del``);
        its iterator then ends (``StopIteration``)."""
        self._end_active(None)

    def __repr__(self) -> str:
        return (
            f"chute.Loader({self.dataset!r}, batch_size={self.batch_size}, "
            f"num_workers={self.num_workers}, prefetch={self.prefetch}, "
            f"reuse_after={self.reuse_after}, "
            f"ring_size={self.ring_size}, pin_memory={self.pin_memory}, order={self.order!r})"
        )


def _renamed_keep(keep: Any, reuse_after: int | None) -> Any:
    """``Loader(keep=k)``: the former name of ``reuse_after=k``, with a DeprecationWarning."""
    if reuse_after is not None:
        raise ArgumentError("keep= is the former name of reuse_after=: pass reuse_after= alone")
    warnings.warn(
        "chute.Loader(keep=) is deprecated and will be removed in the next release: use "
        "reuse_after= (the same meaning: a batch's memory is reused after that many more "
        "batches)",
        DeprecationWarning,
        stacklevel=4,  # the caller of Loader(), through _check_keywords
    )
    return keep


def _check_keywords(unknown: dict[str, Any], reuse_after: int | None) -> int | None:
    """``reuse_after``, or the value given under its former name ``keep``; any other keyword
    that ``Loader`` does not take is chute's error, listing the valid ones."""
    if "keep" in unknown:  # the former name of reuse_after, for one release
        reuse_after = _renamed_keep(unknown.pop("keep"), reuse_after)
    if unknown:  # chute's error, with the list of valid keywords (see unknown_keywords)
        valid = [k for k in inspect.signature(Loader).parameters if k not in ("ds", "unknown")]
        raise unknown_keywords("chute.Loader", unknown, valid)
    return reuse_after


def _workers(num_workers: int | None, prefetch: int | None) -> tuple[int, int]:
    """(worker threads, batches prepared ahead): ``default_workers()`` and twice as many
    batches by default; nothing ahead without workers."""
    workers = default_workers() if num_workers is None else check_int("num_workers", num_workers, 0)
    if workers == 0:
        return 0, 0
    if prefetch is None:
        return workers, 2 * workers
    return workers, check_int("prefetch", prefetch, 1)


def _pin_memory(pin_memory: bool | None) -> bool:
    """Whether batches are pinned: by default where torch sees CUDA; asked for without CUDA,
    a warning and not pinned."""
    pinned = torch.cuda.is_available() if pin_memory is None else bool(pin_memory)
    if pinned and not torch.cuda.is_available():
        warnings.warn(
            "pin_memory=True but torch sees no CUDA device here: batches are not pinned",
            stacklevel=3,  # the caller of Loader()
        )
        return False
    return pinned
