"""``decode=``: image fields decoded (cropped, resized, flipped) in the loaders' workers.

``chute.Loader(ds, 256, decode={"image": [chute.RandomResizedCrop(160),
chute.RandomHorizontalFlip()]})`` hands out ``batch["image"]`` as uint8 ``(B, 3, 160, 160)``.
:func:`with_decode` wraps the dataset in a :class:`Decoded` view whose schema says so: the
decoded field is a fixed-shape ``Tensor((3, H, W), "uint8")``, so the loader's buffers (its
pool of fresh buffers, or its ring with ``reuse_after=k``) hold it like any fixed field, and
``gather(idx, out=)`` decodes straight into ``out[name]`` (no per-batch allocation with
``reuse_after``; a pooled buffer by default). The rest of the batch is the dataset's own gather.

Where it runs. In :class:`~chute.Loader` the gather, and so the decode, runs in the worker
threads: simplejpeg's decode, the resize (torch's or PIL's) and numpy's copy release the GIL
(see :mod:`chute.image.decode`); a pass's first and last batches are split across threads
(:func:`decode_threads`, :func:`with_split`). In :func:`chute.dataloader` it runs in the worker
processes.

Randomness. A sample's crop and flip are a pure function of (the loader's ``seed``, the epoch,
its index: the position the loader's order gives, i.e. the position in a Subset), see
:func:`chute.image.plan`. The Loader gives each pass a view at its epoch
(:meth:`Decoded.at_epoch`); ``chute.dataloader``'s batch sampler sends each batch's epoch with
its indices to the worker process (fork or spawn, also with ``persistent_workers``), which
takes a view at that epoch. So a run resumed from ``state_dict()`` sees exactly the pixels it
would have seen.
"""

from __future__ import annotations

import copy
import itertools
import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch

from .. import format as fmt
from .._torch import as_numpy
from ..errors import ArgumentError, ChuteError, FormatError, SchemaError
from ..image.on_device import DeviceImages, check_device, decode_images
from ..image.ops import Plan, check_ops, plan
from ..reader.gatherable import Feed, Gatherable, PerEpoch, Prefetching

__all__ = [
    "FIRST_SPLIT",
    "Decoded",
    "decode_split",
    "decode_threads",
    "split_cuts",
    "with_decode",
    "with_split",
]


class Decoded:
    """``ds`` with the image fields of ``ops`` decoded by their decode ops (a Gatherable:
    ``len``, ``schema``, ``gather``, ``empty_batch``, ``ds[i]``). Made by :func:`with_decode`."""

    def __init__(self, ds: Gatherable, ops: Mapping[str, Any], seed: int, epoch: int = 0):
        if not isinstance(ops, Mapping) or not ops:
            raise ArgumentError(
                "decode= takes a dict field -> decode ops, e.g. {'image': "
                "[chute.RandomResizedCrop(224), chute.RandomHorizontalFlip()]}"
            )
        self.dataset = ds
        self.ops: dict[str, tuple[Any, ...]] = {}
        self.sizes: dict[str, tuple[int, int]] = {}
        self.on_device: dict[str, str] = {}  # fields decoded by to_device (image/on_device.py)
        for name, field_ops in ops.items():
            f = ds.schema.get(name)
            if f is None or f.kind != "image":
                what = "no such field" if f is None else f"a {f.kind} field"
                images = [k for k, v in ds.schema.items() if v.kind == "image"]
                raise SchemaError(
                    f"decode={{{name!r}: ...}}: {what}; decode= takes the dataset's "
                    f"chute.fields.Image fields ({images})"
                )
            checked = check_ops(field_ops)
            self.ops[name] = checked
            geo = next(op for op in checked if hasattr(op, "out_size"))
            self.sizes[name] = geo.out_size
            device = check_device(geo.device, f"decode={{{name!r}: {type(geo).__name__}}}")
            if device is not None:
                self.on_device[name] = device
        self.seed = int(seed)
        self.epoch = int(epoch)
        self.threads = 1  # that decode a batch (see with_split)
        self._schema: dict[str, fmt.Field] = {  # a field decoded on the device stays encoded
            k: fmt.Tensor((3, *self.sizes[k]), "uint8") if self._here(k) else f
            for k, f in ds.schema.items()
        }

    def _here(self, name: str) -> bool:
        """Whether field ``name`` is decoded by this view (not later, on a device)."""
        return name in self.ops and name not in self.on_device

    @property
    def schema(self) -> Mapping[str, fmt.Field]:
        return self._schema

    def __len__(self) -> int:
        return len(self.dataset)

    def empty_batch(self, batch_size: int, pin_memory: bool = False) -> dict[str, torch.Tensor]:
        out = self.dataset.empty_batch(batch_size, pin_memory=pin_memory)
        for name, (h, w) in self.sizes.items():
            if self._here(name):
                out[name] = torch.empty(
                    (batch_size, 3, h, w), dtype=torch.uint8, pin_memory=pin_memory
                )
        return {k: out[k] for k in self._schema if k in out}

    def __getitem__(self, i: int) -> dict[str, Any]:
        """Sample ``i``: the dataset's, its decoded fields as this view decodes them."""
        sample = self.dataset[i]
        (j,) = np.asarray([i], np.int64) % max(1, len(self))
        got, _ = decode_images(self.gather(np.array([j])))
        return {k: got[k][0] if k in self.ops else v for k, v in sample.items()}

    def gather(
        self,
        indices: Any,
        out: Mapping[str, torch.Tensor] | None = None,
        pad: float | int | None = None,
    ) -> dict[str, Any]:
        """The dataset's gather, each decoded field decoded into ``out[name]`` when given
        (else a new tensor), with the crops of :attr:`epoch` (see :meth:`at_epoch`)."""
        epoch = self.epoch
        inner = None if out is None else {k: v for k, v in out.items() if k not in self.ops}
        batch = self.dataset.gather(indices, out=inner, pad=pad)
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        idx = np.where(idx < 0, idx + len(self), idx)
        for name in self.ops:
            if name in self.on_device:
                batch[name] = self._planned(name, batch[name], idx, epoch)
                continue
            dst = None if out is None else out.get(name)
            batch[name] = self._decode(name, batch[name], idx, epoch, dst)
        return batch

    def _plan(self, name: str, enc: Any, idx: np.ndarray, epoch: int) -> tuple[np.ndarray, Plan]:
        """The stored (height, width) of each image of ``enc``, and field ``name``'s plan."""
        sizes = enc.sizes.numpy()
        return sizes, plan(self.ops[name], sizes[:, 0], sizes[:, 1], idx, self.seed, epoch)

    def _planned(self, name: str, enc: Any, idx: np.ndarray, epoch: int) -> DeviceImages:
        """Field ``name`` planned, not decoded: :func:`chute.to_device` decodes it."""
        sizes, p = self._plan(name, enc, idx, epoch)
        where = self._where(name)
        device = self.on_device[name]
        return DeviceImages(
            enc.values, enc.offsets, sizes, p.boxes, p.flips, p.size, device, where, idx
        )

    def _decode(
        self, name: str, enc: Any, idx: np.ndarray, epoch: int, dst: torch.Tensor | None
    ) -> torch.Tensor:
        from ..image.decode import decode_planned

        b = len(idx)
        if dst is None:
            dst = torch.empty((b, 3, *self.sizes[name]), dtype=torch.uint8)
        elif len(dst) != b:
            dst = dst[:b]
        sizes, p = self._plan(name, enc, idx, epoch)
        h, w, arr = sizes[:, 0], sizes[:, 1], as_numpy(dst)
        try:
            if self.threads > 1:  # see with_split
                decode_split(enc, h, w, p, arr, idx, self.threads)
            else:
                decode_planned(enc, h, w, p, arr, idx)
        except FormatError as exc:
            raise FormatError(f"{self._where(name)}: {self._dataset_index(exc)}") from None
        return dst

    def prefetch(self, batches: Iterable[np.ndarray]) -> Feed | None:
        """The dataset's prefetch (a dataset in object storage), for these batches."""
        base = self.dataset
        return base.prefetch(batches) if isinstance(base, Prefetching) else None

    def at_epoch(self, epoch: int) -> Decoded:
        """This view with the crops and flips of ``epoch`` (a shallow copy; a mix underneath
        is bound to ``epoch`` too): the loaders take one per pass, or per batch in a worker
        process (:class:`~chute.reader.gatherable.PerEpoch`)."""
        view = copy.copy(self)
        view.epoch = int(epoch)
        if isinstance(self.dataset, PerEpoch):
            view.dataset = self.dataset.at_epoch(epoch)
        return view

    def _where(self, name: str) -> str:
        return f"{getattr(self.dataset, 'path', self.dataset)}: field {name!r}"

    def _dataset_index(self, exc: ChuteError) -> str:
        """The error's message; its sample index is a position in a Subset: say so."""
        indices = getattr(self.dataset, "indices", None)
        return str(exc) + ("" if indices is None else " (a position in the Subset)")

    def __repr__(self) -> str:
        ops = {k: list(v) for k, v in self.ops.items()}
        return f"chute.loader.decode.Decoded({self.dataset!r}, decode={ops}, seed={self.seed})"


def with_decode(ds: Gatherable, decode: Mapping[str, Any] | None, seed: int) -> Gatherable:
    """``ds`` decoding the fields of ``decode`` (None: ``ds`` itself)."""
    if decode is None:
        return ds
    return Decoded(ds, decode, seed)


FIRST_SPLIT = min(4, os.cpu_count() or 1)  # threads that decode a pass's first batch
MIN_SPLIT = 16  # images per thread, at least


def decode_threads(q: int, items: int, workers: int, first_batch: bool) -> int:
    """The threads that decode a batch of work item ``q`` (of ``items`` in the pass, with
    ``workers`` worker threads): the pass's first batch by :data:`FIRST_SPLIT` (the consumer
    waits for it while the other workers have nothing to do yet), each of the last
    ``workers`` items by ``workers`` threads (a worker that finishes early would idle while
    the others end the pass: with the last batches spread over every thread, they end
    together), any other by its worker alone."""
    if first_batch:
        return FIRST_SPLIT
    return workers if workers > 1 and q >= items - workers else 1


def split_cuts(n: int, threads: int, min_per_thread: int = MIN_SPLIT) -> list[int]:
    """Where a batch of ``n`` images is cut to be decoded by ``threads`` threads at once:
    slice boundaries ``[0, ..., n]``, at most ``threads`` slices of ``min_per_thread``
    images or more (one slice: not split)."""
    k = max(1, min(threads, n // min_per_thread))
    return np.linspace(0, n, k + 1).astype(int).tolist()


def with_split(ds: Gatherable, threads: int) -> Gatherable:
    """``ds`` whose decodes are split across ``threads`` threads (a :class:`Decoded` view,
    see :func:`decode_threads`); any other dataset as it is."""
    if threads == 1 or not isinstance(ds, Decoded):
        return ds
    view = copy.copy(ds)
    view.threads = threads
    return view


def decode_split(
    enc: Any,
    h: np.ndarray,
    w: np.ndarray,
    p: Plan,
    out: np.ndarray,
    idx: Any,
    threads: int,
    min_per_thread: int = MIN_SPLIT,
) -> None:
    """``decode_planned`` with the batch cut by :func:`split_cuts`, the slices decoded at
    once by this thread and short-lived helper threads (the GIL is released while
    decoding). The same pixels as one call (a plan depends on each sample's index only)."""
    from ..image.decode import as_buffers, decode_planned, plan_slice

    cuts = split_cuts(len(idx), threads, min_per_thread)
    if len(cuts) < 3:
        decode_planned(enc, h, w, p, out, idx)
        return
    bufs = as_buffers(enc)
    errors: dict[int, BaseException] = {}  # by the slice's start

    def part(a: int, b: int) -> None:
        try:
            decode_planned(bufs[a:b], h[a:b], w[a:b], plan_slice(p, a, b), out[a:b], idx[a:b])
        except BaseException as exc:  # re-raised in the calling thread, first slice first
            errors[a] = exc

    helpers = [
        threading.Thread(target=part, args=(a, b), name="chute-decode-split", daemon=True)
        for a, b in itertools.pairwise(cuts[1:])
    ]
    for t in helpers:
        t.start()
    part(cuts[0], cuts[1])
    for t in helpers:
        t.join()
    if errors:
        raise errors[min(errors)]
