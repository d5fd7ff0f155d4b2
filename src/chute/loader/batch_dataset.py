"""What :func:`chute.dataloader`'s worker processes run: a map-style view of a chute dataset
whose ``__getitems__`` turns one batch's indices into the whole batch (one gather). The batch
sampler that sends those indices is ``chute/loader/samplers.py``'s. See the NOTE in
``chute/loader/dataloader.py``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import default_collate

from .. import _compat as compat
from ..batch import Pad
from ..columns.gather import head
from ..errors import ArgumentError, ChuteError, SchemaError, WorkerError
from ..image.mixing import BatchTransform
from ..reader.gatherable import Gatherable, PerEpoch
from ..reader.samples import split_batch
from .handoff import Handoff

Sample = dict[str, Any]


def as_is(batch: Any) -> Any:
    """The DataLoader's collate_fn: ``__getitems__`` already returns the whole batch."""
    return batch


class Reported(NamedTuple):
    """A batch with the samples its worker found corrupt and replaced since its last batch
    (``on_error="skip"``): ``(dataset index, warning)`` pairs, which the main process warns
    about once each and counts (:attr:`ChuteDataLoader.skipped
    <chute.loader.dataloader.ChuteDataLoader.skipped>`). A named tuple, so torch's pin-memory
    thread pins the batch inside it."""

    batch: Any
    skipped: list[tuple[int, str]]


class BatchDataset(torch.utils.data.Dataset):
    """Map-style view of a chute Dataset whose ``__getitems__`` returns a whole batch.

    Without ``sample_transform`` (and ``collate_fn``) a batch is one ``ds.gather(indices,
    pad=pad)``.
    With them, the batch is still gathered once (a ``decode=`` view decodes its images
    there, the whole batch at once) and split into its samples (each as ``ds[i]`` returns
    it: fresh, writable tensors, ``str`` for strings, decoded images), each goes through
    ``sample_transform`` and the list is merged by ``collate_fn`` (default: torch's
    ``default_collate``). ``batch_transform`` then runs on the batch. All of it runs in the
    worker process; under spawn the callables must be picklable (defined at module level).
    ``skipped``: the ``decode=`` view's record of samples it replaced (``on_error="skip"``),
    sent with the batch that found them (:class:`Reported`).
    """

    def __init__(
        self,
        ds: Gatherable,
        sample_transform: Callable[[Sample], Any] | None = None,
        batch_transform: Callable[[Any], Any] | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pad: Pad | None = None,
        skipped: Mapping[int, str] | None = None,
    ) -> None:
        for name, fn in (
            ("sample_transform", sample_transform),
            ("batch_transform", batch_transform),
            ("collate_fn", collate_fn),
        ):
            if isinstance(fn, BatchTransform):  # not callable: it draws from (seed, epoch)
                raise ArgumentError(
                    f"{name}={type(fn).__name__}(...): a chute batch transform draws from the "
                    "batch's sample indices, the seed and the epoch, which only chute.Loader "
                    f"passes: use chute.Loader(..., transform={type(fn).__name__}(...))"
                )
            if fn is not None and not callable(fn):
                raise ArgumentError(f"{name} must be callable, got {fn!r}")
        if pad is not None:
            if sample_transform is not None or collate_fn is not None:
                raise ArgumentError(
                    "pad= pads the gathered batch; with sample_transform or collate_fn the "
                    "samples are collated by collate_fn instead: pad there"
                )
            ds.gather(np.zeros(0, np.int64), pad=pad)  # a bad value fails here, not mid-epoch
        self.dataset = ds
        self.sample_transform = sample_transform
        self.batch_transform = batch_transform
        self.collate_fn = collate_fn
        self.pad = pad
        self.handoff: Handoff | None = None  # set by the DataLoader for its worker processes
        self.skipped = skipped
        self._sent: set[int] = set()  # the indices of ``skipped`` this process reported
        self._rows: dict[str, tuple[torch.dtype, tuple[int, ...]]] | None = None

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def whole(self) -> bool:
        """A batch is one gather (no ``sample_transform`` or ``collate_fn``)."""
        return self.sample_transform is None and self.collate_fn is None

    def __getitem__(self, i: int) -> Any:
        return self._sample(self.dataset, i)

    def _sample(self, ds: Any, i: int) -> Any:
        sample = ds[i]
        if self.sample_transform is None:
            return sample
        try:
            return self.sample_transform(sample)
        except Exception as exc:
            raise WorkerError(
                f"sample_transform failed on sample {int(i)}: {type(exc).__name__}: {exc}"
            ) from exc

    def _samples(self, ds: Gatherable, indices: Any) -> list[Any]:
        """The samples ``indices`` from one gather, each through ``sample_transform``; the
        error names the sample only once one is raised (the hot loop builds no message)."""
        samples = split_batch(ds, ds.gather(indices), indices)
        fn = self.sample_transform
        if fn is None:
            return samples
        out = []
        for k, sample in enumerate(samples):
            try:
                out.append(fn(sample))
            except Exception as exc:
                raise WorkerError(
                    f"sample_transform failed on sample {int(indices[k])}: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        return out

    def __getitems__(self, indices: Sequence[int] | np.ndarray | tuple[int, np.ndarray]) -> Any:
        ds = self.dataset
        if isinstance(indices, tuple):  # (epoch, indices): a chute.Mix (OrderBatchSampler)
            epoch, indices = indices
            assert isinstance(ds, PerEpoch)
            ds = ds.at_epoch(epoch)
        at = indices

        def make(handoff: Handoff | None, worker: int) -> Any:
            if self.whole:
                out = handoff and handoff.reserve(worker, self._fixed(ds, len(at)))
                batch = ds.gather(at, out=out or None, pad=self.pad)
            else:
                batch = (self.collate_fn or _collate)(self._samples(ds, at))
            if self.batch_transform is not None:
                batch = self.batch_transform(batch)
            return batch

        return self._handed(indices, make)

    def group(self, parts: list[np.ndarray]) -> Any:
        """The batches of index arrays ``parts`` from one gather, as a list (fixed-shape
        fields only; no ``pad``, ``batch_transform`` or per-sample steps): what a worker of
        ``chute/loader/streams.py`` makes of a group of small batches."""
        ds, idx = self.dataset, np.concatenate(parts)

        def make(handoff: Handoff | None, worker: int) -> Any:
            out = handoff and handoff.reserve(worker, self._fixed(ds, len(idx)))
            got = ds.gather(idx, out=out or None)
            ends = np.cumsum([len(p) for p in parts]).tolist()
            starts = [0, *ends[:-1]]
            return [{k: t[a:b] for k, t in got.items()} for a, b in zip(starts, ends, strict=True)]

        return self._handed(idx, make)

    def _handed(self, indices: Any, make: Callable[[Handoff | None, int], Any]) -> Reported | Any:
        """``make(handoff, worker)``'s batch, as the message that hands it over (in a
        worker process: in shared-memory slots) with what ``skipped`` newly reports; an
        error names the batch's first samples (chute's own errors pass as they are)."""
        info = torch.utils.data.get_worker_info()
        handoff, worker = (self.handoff, info.id) if info is not None else (None, 0)
        try:
            batch = make(handoff, worker)
        except BaseException as exc:
            if handoff is not None:
                handoff.unreserve(worker)
            if isinstance(exc, ChuteError) or not isinstance(exc, Exception):
                raise
            raise WorkerError(
                f"chute.dataloader failed on the batch of samples {head(indices)}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if handoff is not None:
            batch = handoff.pack(batch, worker)  # chute/loader/handoff.py
        new = self._newly_skipped()
        return Reported(batch, new) if new else batch

    def _newly_skipped(self) -> list[tuple[int, str]]:
        """The entries of ``skipped`` that this process has not reported yet."""
        skipped = self.skipped
        if skipped is None or len(skipped) == len(self._sent):  # the usual case: none
            return []
        new = [(i, why) for i, why in list(skipped.items()) if i not in self._sent]
        self._sent.update(i for i, _ in new)
        return new

    def _fixed(self, ds: Gatherable, b: int) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
        """Dtype and shape of a batch of ``b`` samples of each fixed-shape field of ``ds``."""
        if self._rows is None:
            self._rows = {k: (t.dtype, tuple(t.shape[1:])) for k, t in ds.empty_batch(1).items()}
        return {k: (dt, (b, *shape)) for k, (dt, shape) in self._rows.items()}


def _stack(batch: Sequence[torch.Tensor], *, collate_fn_map: Any = None) -> torch.Tensor:
    return torch.stack(list(batch), 0)


@functools.cache
def _collate_fn() -> Callable[[list[Any]], Any]:
    """torch's ``default_collate``, but stacking tensors into ordinary memory: in a worker
    process torch's own puts each into a new shared-memory segment, which the slots of
    ``chute/loader/handoff.py`` make a wasted allocation and copy. (torch's private collate
    table, through :func:`chute._compat.collate`: without it, ``default_collate`` itself.)"""
    torch_collate = compat.collate()
    if torch_collate is None:
        return default_collate
    table = {**torch_collate.fn_map, torch.Tensor: _stack}
    return functools.partial(torch_collate.collate, collate_fn_map=table)


def _collate(samples: list[Any]) -> Any:
    try:
        return _collate_fn()(samples)
    except RuntimeError as exc:
        raise SchemaError(
            f"cannot collate the transformed samples into a batch ({exc}); a field of varying "
            "size needs collate_fn= (e.g. padding), or a sample_transform that makes its "
            "shapes equal"
        ) from exc
