"""``decode=``: image fields decoded (cropped, resized, flipped) in the loaders' workers.

``chute.Loader(ds, 256, decode={"image": [chute.RandomResizedCrop(160),
chute.RandomHorizontalFlip()]})`` hands out ``batch["image"]`` as uint8 ``(B, 3, 160, 160)``.
:func:`with_decode` wraps the dataset in a :class:`Decoded` view whose schema says so: the
decoded field is a fixed-shape ``Tensor((3, H, W), "uint8")``, so the loader's buffers (its
pool of fresh buffers, or its ring with ``reuse_after=k``) hold it like any fixed field, and
``gather(idx, out=)`` decodes straight into ``out[name]`` (no per-batch allocation with
``reuse_after``; a pooled buffer by default). The rest of the batch is the dataset's own gather.

Tied fields. ``decode={"image": ops, "mask": chute.Follow("image"), "geo":
chute.Geometry("image")}``: each sample's crop and flip are planned once, for ``"image"``, and
applied to the fields that follow it (a :class:`chute.fields.Mask` by nearest neighbour into a
``Tensor((H, W), mask dtype)``, another image bilinearly), then the warps its RandAugment /
TrivialAugmentWide drew move them through the image's own pixel index (uncovered mask
pixels take ``Follow(..., fill=)``), while ``"geo"`` (a name the dataset does not have)
carries the plan and each warp's affine map, float64 ``(B, 11 + 9 * rounds)`` (see
:mod:`chute.image.follow`), for :func:`chute.transform_boxes`. The op order of the leader is
the only one there is.

Views. ``decode={"image": ops, "local": chute.View("image", local_ops)}``: ``"local"`` (a
name the dataset does not have) is ``"image"``'s stored image decoded again with its own ops
and its own draws (:func:`chute.image.follow.view_seed`), from the same gathered bytes.

Where it runs. In :class:`~chute.Loader` the gather, and so the decode, runs in the worker
threads: simplejpeg's decode, the resize (torch's or PIL's) and numpy's copy release the GIL
(see :mod:`chute.image.batch_decode`); a pass's first and last batches are split across threads
(``chute/loader/decode_split.py``, :func:`with_split`). In :func:`chute.dataloader` it runs in
the worker processes.

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
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from .._torch import TORCH_DTYPES, as_numpy
from ..batch import RaggedBatch
from ..errors import ArgumentError, ChuteError, FormatError, SchemaError
from ..image.augment import augment
from ..image.follow import (
    Follow,
    Geometry,
    follow_warps,
    geometry,
    view_seed,
)
from ..image.masks import follow_instances, follow_masks
from ..image.on_device import DeviceImages, decode_images
from ..image.ops import Plan, padded, plan
from ..image.scales import at_batch, sized
from ..kinds import Field, empty_buffers, fixed_fields
from ..reader.gatherable import Batch, Buffers, Gatherable, Pad
from ..reader.wrapper import Wrapper
from .decode_args import read_decode
from .decode_split import decode_split
from .finish import Finished

__all__ = ["Decoded", "sizes_vary", "with_decode", "with_split"]


class Decoded(Wrapper):
    """``ds`` with the image fields of ``ops`` decoded by their decode ops (a Gatherable:
    ``len``, ``schema``, ``gather``, ``empty_batch``, ``ds[i]``). Made by :func:`with_decode`."""

    def __init__(
        self,
        ds: Gatherable,
        ops: Mapping[str, Any],
        seed: int,
        epoch: int = 0,
        on_error: str = "raise",
        warn: bool = True,
    ):
        if on_error not in ("raise", "skip"):
            raise ArgumentError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        self.on_error = on_error
        # Dataset indices whose image failed to decode (on_error="skip"), each with its
        # warning; shared by the shallow copies the loaders take (at_epoch, with_split); a
        # dict's item assignment is atomic. ``warn``: warn here, once per index (False: the
        # reader of ``skipped`` reports them, as chute.dataloader's main process does).
        self.skipped: dict[int, str] = {}
        self.warn = warn
        parsed = read_decode(ds.schema, ops)  # chute/loader/decode_args.py
        self.dataset = ds
        self.ops = parsed.ops
        self.sizes = parsed.sizes
        self.on_device = parsed.on_device  # fields decoded by to_device (image/on_device.py)
        self.tied = parsed.tied  # fields that take a leader's plan
        self.views = parsed.views  # view name -> the image field it decodes
        self.scales = parsed.scales  # fields decoded at a size drawn per batch
        self.seed = int(seed)
        self.epoch = int(epoch)
        self.threads = 1  # that decode a batch (see with_split)
        self._schema = parsed.schema

    def _seed(self, name: str) -> int:
        """The seed of field ``name``'s draws: the loader's, a view's salted by its name."""
        return view_seed(self.seed, name) if name in self.views else self.seed

    def _here(self, name: str) -> bool:
        """Whether field ``name`` is decoded by this view (not later, on a device)."""
        return name in self.ops and name not in self.on_device

    @property
    def schema(self) -> Mapping[str, Field]:
        return self._schema

    def empty_batch(self, batch_size: int, pin_memory: bool = False) -> dict[str, torch.Tensor]:
        out = super().empty_batch(batch_size, pin_memory=pin_memory)
        for name, (h, w) in self.sizes.items():
            if self._here(name):
                out[name] = torch.empty(
                    (batch_size, 3, h, w), dtype=torch.uint8, pin_memory=pin_memory
                )
        tied = {k: self._schema[k] for k in self.tied}
        out.update(empty_buffers(tied, batch_size, pin_memory=pin_memory))
        return {k: out[k] for k in self._schema if k in out}

    def __getitem__(self, i: int) -> dict[str, Any]:
        """Sample ``i``: the dataset's, its decoded fields as this view decodes them."""
        sample = self.dataset[i]
        (j,) = np.asarray([i], np.int64) % max(1, len(self))
        got, _ = decode_images(self.gather(np.array([j])))
        mine = {**self.ops, **self.tied}
        return {
            **{k: got[k][0] if k in mine else v for k, v in sample.items()},
            **{k: got[k][0] for k, t in self.tied.items() if isinstance(t, Geometry)},
            **{k: got[k][0] for k in self.views},
        }

    def gather(self, indices: Any, out: Buffers | None = None, pad: Pad | None = None) -> Batch:
        """The dataset's gather, each decoded field decoded into ``out[name]`` when given
        (else a new tensor), with the crops of :attr:`epoch` (see :meth:`at_epoch`)."""
        epoch = self.epoch
        mine = {**self.ops, **self.tied}
        inner = None if out is None else {k: v for k, v in out.items() if k not in mine}
        batch = self.dataset.gather(indices, out=inner, pad=pad)
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        idx = np.where(idx < 0, idx + len(self), idx)
        plans: dict[str, tuple[np.ndarray, Plan]] = {}  # planned once, for every tied field
        bad: set[int] = set()  # positions whose image is corrupt (on_error="skip")
        enc = {name: batch[self.views.get(name, name)] for name in self.ops}  # still encoded
        for name in self.ops:
            plans[name] = self._plan(name, enc[name], idx, epoch, batch)
            if name in self.on_device:
                batch[name] = self._planned(name, enc[name], idx, plans[name])
                continue
            dst = None if out is None else out.get(name)
            batch[name] = self._decode(name, enc[name], idx, plans[name], dst, bad)
            augment(self.ops[name], batch[name], idx, self._seed(name), epoch)
        if bad:
            return self.gather(self._replaced(idx, bad), out, pad)
        for name, tie in self.tied.items():
            dst = None if out is None else out.get(name)
            batch[name] = self._follow(name, tie, batch.get(name), idx, plans[tie.field], dst)
        return batch

    def _replaced(self, idx: np.ndarray, bad: set[int]) -> np.ndarray:
        """``idx`` with each corrupt position replaced by the next good sample of the batch
        (cyclically): the batch keeps its size, every field of a row from one sample."""
        good = [i for i in range(len(idx)) if i not in bad]
        if not good:
            raise FormatError(
                f"{self._where(next(iter(self.ops)))}: every image of the batch (samples "
                f"{idx.tolist()[:8]}) failed to decode; on_error='skip' has none to use instead"
            )
        new = idx.copy()
        for i in sorted(bad):
            j = next((g for g in good if g > i), good[0])
            new[i] = idx[j]
            if int(idx[i]) not in self.skipped:
                message = (
                    f"{self._where(next(iter(self.ops)))}: sample {int(idx[i])} does not decode; "
                    f"on_error='skip' replaced it by sample {int(idx[j])} (reported once)"
                )
                self.skipped[int(idx[i])] = message
                if self.warn:
                    warnings.warn(message, stacklevel=2)
        return new

    def _follow(
        self,
        name: str,
        tie: Follow | Geometry,
        enc: Any,
        idx: np.ndarray,
        planned: tuple[np.ndarray, Plan],
        dst: torch.Tensor | None,
    ) -> torch.Tensor | RaggedBatch:
        """Field ``name`` cropped, resized and flipped as its leader's ``planned``, then
        moved by the leader's warps."""
        sizes, p = planned
        leader, seed = self.ops[tie.field], self._seed(tie.field)
        field = None if isinstance(tie, Geometry) else self.dataset.schema[name]
        instances = bool(getattr(field, "instances", False))
        if isinstance(tie, Geometry):
            dst = self._out(name, len(idx), dst)
            geometry(p, as_numpy(dst), leader, idx, seed, self.epoch)
            return dst
        assert field is not None
        own = (enc.shapes if field.kind == "mask" else enc.sizes).numpy()
        if instances:  # (N, h, w) per sample: each plane follows as a 2-D mask
            counts, own = own[:, 0], own[:, 1:]
        else:
            out = self._out(name, len(idx), dst, p.size)
            arr = as_numpy(out)
        bad = np.flatnonzero((own != sizes).any(axis=1))
        if len(bad):
            i = int(bad[0])
            raise FormatError(
                f"{self._where(name)}: sample {int(idx[i])} is {tuple(own[i].tolist())} (height, "
                f"width) but its {tie.field!r} is {tuple(sizes[i].tolist())}; a field that "
                "follows another must have its size"
            )
        if field.kind == "image":
            self._decode(name, enc, idx, planned, out)
            follow_warps(leader, arr, idx, seed, self.epoch, tie.fill)
            return out
        values, offsets = enc.values.numpy(), enc.offsets.numpy().tolist()
        if instances:  # each plane as a 2-D mask, then each plane's warps
            shapes = enc.shapes.numpy()
            planes, batch = follow_instances(values, offsets, shapes, p, tie.fill)
            follow_warps(leader, planes, np.repeat(idx, counts), seed, self.epoch, tie.fill)
            return batch
        follow_masks(values, offsets, own, p, tie.fill, arr)
        follow_warps(leader, arr, idx, seed, self.epoch, tie.fill)
        return out

    def _out(
        self, name: str, b: int, dst: torch.Tensor | None, size: tuple[int, int] | None = None
    ) -> torch.Tensor:
        """Where field ``name`` of a batch of ``b`` is written: ``dst`` (the loader's buffer,
        cut to ``b``; its first bytes when ``size``, the batch's (height, width), is less
        than the buffer's, see :mod:`chute.image.scales`), else a new tensor of its shape in
        :attr:`schema`."""
        field = fixed_fields({name: self._schema[name]})[name]  # a fixed-shape batch field
        shape = (b, *field.shape)
        if size is not None:
            shape = (*shape[:-2], *size)
        if dst is None and size is None:
            return empty_buffers({name: field}, b)[name]
        return sized(dst, shape, TORCH_DTYPES[field.dtype])

    def _plan(
        self, name: str, enc: Any, idx: np.ndarray, epoch: int, batch: Mapping[str, Any]
    ) -> tuple[np.ndarray, Plan]:
        """The stored (height, width) of each image of ``enc``, and field ``name``'s plan
        (with the boxes its ops read from ``batch``, e.g. RandomIoUCrop's)."""
        sizes = enc.sizes.numpy()
        targets = {}
        for op in self.ops[name]:
            field = getattr(op, "boxes", None)
            if isinstance(field, str):
                if field not in batch:
                    raise SchemaError(
                        f"{self._where(name)}: {type(op).__name__}(boxes={field!r}) reads "
                        f"each sample's boxes from field {field!r}; the dataset has none "
                        f"({sorted(self.dataset.schema)})"
                    )
                targets[field] = list(batch[field])
        h, w, seed = sizes[:, 0], sizes[:, 1], self._seed(name)
        ops = self.ops[name]
        if name in self.scales:  # the sizing op at this batch's size
            ops = at_batch(ops, self.scales[name], seed, epoch, idx)
        return sizes, plan(ops, h, w, idx, seed, epoch, targets)

    def _planned(
        self, name: str, enc: Any, idx: np.ndarray, planned: tuple[np.ndarray, Plan]
    ) -> DeviceImages:
        """Field ``name`` planned, not decoded: :func:`chute.to_device` decodes it."""
        sizes, p = planned
        where = self._where(name)
        device = self.on_device[name]
        if padded(p).any():
            j = int(np.flatnonzero(padded(p))[0])
            raise ArgumentError(
                f"{where}: sample {int(idx[j])}'s crop is larger than the image and would be "
                "padded, which is done in the loader's workers, not on the device: drop device="
            )
        return DeviceImages(
            enc.values, enc.offsets, sizes, p.boxes, p.flips, p.size, device, where, idx
        )

    def _decode(
        self,
        name: str,
        enc: Any,
        idx: np.ndarray,
        planned: tuple[np.ndarray, Plan],
        dst: torch.Tensor | None,
        bad: set[int] | None = None,
    ) -> torch.Tensor:
        """Field ``name`` decoded into ``dst``; with on_error="skip" and a set ``bad``, the
        positions of images that fail are added to ``bad`` instead of raising."""
        from ..image.batch_decode import as_buffers, decode_planned, plan_slice

        b = len(idx)
        sizes, p = planned
        dst = self._out(name, b, dst, p.size)
        h, w, arr = sizes[:, 0], sizes[:, 1], as_numpy(dst)
        try:
            if self.threads > 1:  # see with_split
                decode_split(enc, h, w, p, arr, idx, self.threads)
            else:
                decode_planned(enc, h, w, p, arr, idx)
        except FormatError as exc:
            if self.on_error == "raise" or bad is None:
                raise FormatError(f"{self._where(name)}: {self._dataset_index(exc)}") from None
            bufs = as_buffers(enc)
            for i in range(b):  # one at a time, to find every corrupt image
                try:
                    one = plan_slice(p, i, i + 1)
                    decode_planned(bufs[i : i + 1], h[i : i + 1], w[i : i + 1], one, arr[i : i + 1])
                except FormatError:
                    bad.add(i)
        return dst

    def at_epoch(self, epoch: int) -> Decoded:
        """This view with the crops and flips of ``epoch`` (a shallow copy; a mix underneath
        is bound to ``epoch`` too): the loaders take one per pass, or per batch in a worker
        process (:class:`~chute.reader.gatherable.PerEpoch`)."""
        view = self._at_epoch(epoch)
        view.epoch = int(epoch)
        return view

    def _where(self, name: str) -> str:
        field = self.views.get(name, name)
        view = f" (view {name!r})" if name in self.views else ""
        return f"{getattr(self.dataset, 'path', self.dataset)}: field {field!r}{view}"

    def _dataset_index(self, exc: ChuteError) -> str:
        """The error's message; its sample index is a position in a Subset: say so."""
        indices = getattr(self.dataset, "indices", None)
        return str(exc) + ("" if indices is None else " (a position in the Subset)")

    def __repr__(self) -> str:
        ops = {k: list(v) for k, v in self.ops.items()}
        return f"chute.loader.decode.Decoded({self.dataset!r}, decode={ops}, seed={self.seed})"


def with_decode(
    ds: Gatherable,
    decode: Mapping[str, Any] | None,
    seed: int,
    on_error: str = "raise",
    warn: bool = True,
) -> Gatherable:
    """``ds`` decoding the fields of ``decode`` (None: ``ds`` itself); ``on_error="skip"``
    replaces a sample whose image fails to decode by the next good one of its batch, and
    warns once per sample (``warn=False``: only records it in the view's ``skipped``)."""
    if decode is None:
        if on_error != "raise":
            raise ArgumentError(f"on_error={on_error!r} applies to decode=; no field is decoded")
        return ds
    return Decoded(ds, decode, seed, on_error=on_error, warn=warn)


def sizes_vary(ds: Gatherable) -> bool:
    """Whether ``ds``'s batches differ in shape from one to the next (a :class:`Decoded`
    view with a ``chute.MultiScale``, also under a :class:`~chute.loader.finish.Finished`
    one): the Loader then gathers each batch on its own, never a group of them at once."""
    while isinstance(ds, Finished):
        ds = ds.dataset
    return isinstance(ds, Decoded) and bool(ds.scales)


def with_split(ds: Gatherable, threads: int) -> Gatherable:
    """``ds`` whose decodes are split across ``threads`` threads (a :class:`Decoded` view,
    also under a :class:`~chute.loader.finish.Finished` one; ``chute/loader/decode_split.py``
    says how many); any other dataset as it is."""
    if isinstance(ds, Finished):  # dtype=, pad_to=: their view is over the decodes
        inner = with_split(ds.dataset, threads)
        return ds if inner is ds.dataset else ds.over(inner)
    if threads == 1 or not isinstance(ds, Decoded):
        return ds
    view = copy.copy(ds)
    view.threads = threads
    return view
