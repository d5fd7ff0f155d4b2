"""The loaders' ``dtype=``, ``pad_to=`` and ``pad_multiple=``: the last step of a batch in the
workers, after the gather (and ``pad=``) and before the user's transform.

:func:`with_finish` wraps the dataset as the loaders read it (after ``max_length=`` and
``decode=``) in a :class:`Finished` view, whose ``gather`` runs the step, so that
:class:`~chute.Loader`'s worker threads and :func:`chute.dataloader`'s worker processes run
the same code:

* ``dtype``: fields cast, per field (``{"tokens": torch.int64}``) or one dtype for every
  fixed-shape numeric field. A fixed-shape field is gathered into this thread's scratch
  buffer and cast straight into the batch's buffer (``out=``: the Loader's pool or ring, a
  worker process's shared-memory slot), whose dtype the view's ``empty_batch`` reports; a
  Ragged field's values, or its padded tensor, are cast as they come. The cast is then one
  copy in a worker instead of a torch op in the training step, where torch's intra-op threads
  would compete with the loader's (``docs/tuning.md``).
* ``pad_to`` / ``pad_multiple``: every padded field widened along its length dimension
  (dimension 1) to exactly ``pad_to``, or to the next multiple of ``pad_multiple``, filled
  with the field's ``pad`` value; ``FIELD_lengths`` stay the true lengths. Constant shapes for
  ``torch.compile`` (``docs/tokens.md``). A sample longer than ``pad_to`` is an
  :class:`~chute.errors.ArgumentValueError` naming the field, the sample and its length.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from .. import kinds
from .._args import check_int
from .._torch import TORCH_DTYPES
from ..batch import RaggedBatch, pad_value
from ..buffers import thread_scratch
from ..errors import ArgumentError, ArgumentValueError, SchemaError
from ..format.spec import DTYPE_NAMES, dtype_name
from ..reader.gatherable import Batch, Buffers, Gatherable, Pad
from ..reader.wrapper import Wrapper

__all__ = ["Finished", "with_finish"]


def with_finish(
    ds: Gatherable,
    dtype: Any,
    pad: Pad | None,
    pad_to: int | None,
    pad_multiple: int | None,
    who: str,
) -> Gatherable:
    """``ds`` as the loader ``who`` hands it out: a :class:`Finished` view when ``dtype``,
    ``pad_to`` or ``pad_multiple`` is given, else ``ds`` itself. Every argument is checked
    here, an :class:`~chute.errors.ArgumentError` naming the field at fault."""
    if dtype is None and pad_to is None and pad_multiple is None:
        return ds
    casts = _casts(ds.schema, dtype, who)
    width: tuple[str, int] | None = None
    if pad_to is not None or pad_multiple is not None:
        if pad is None:
            raise ArgumentError(
                f"{who}: pad_to= and pad_multiple= widen the padded fields: pass pad= too, "
                "the value to fill with (e.g. pad=0)"
            )
        if pad_to is not None and pad_multiple is not None:
            raise ArgumentError(f"{who}: pass pad_to= (a fixed width) or pad_multiple=, not both")
        width = (
            ("pad_to", check_int("pad_to", pad_to, 1))
            if pad_to is not None
            else ("pad_multiple", check_int("pad_multiple", pad_multiple, 1))
        )
        for name, f in ds.schema.items():
            if f.pads and f.variable_dims:
                raise ArgumentValueError(
                    f"{who}: field {name!r} ({f.describe()}) varies in several dimensions, so "
                    f"{width[0]}= (one length) cannot make its shape constant; open the "
                    "dataset without it (chute.open(..., fields=[...]))"
                )
    return Finished(ds, casts, width, who)


def _casts(schema: Mapping[str, kinds.Field], dtype: Any, who: str) -> dict[str, str]:
    """Field -> the dtype name it is cast to (casts to its own dtype left out)."""
    if dtype is None:
        return {}
    if isinstance(dtype, Mapping):
        wanted = dict(dtype)
        unknown = [k for k in wanted if k not in schema]
        if unknown:
            raise ArgumentError(
                f"{who}: dtype= names field {unknown[0]!r}, which the dataset does not have; "
                f"its fields: {sorted(schema)}"
            )
    else:  # one dtype: every fixed-shape numeric field (a pack's int32 cu_seqlens stay so)
        wanted = {k: dtype for k, f in schema.items() if f.numeric and f.fixed}
    casts = {}
    for name, want in wanted.items():
        f = schema[name]
        if not f.numeric:
            raise ArgumentError(
                f"{who}: dtype= for field {name!r}: a {f.kind} field is not cast; dtype= casts "
                "numeric fields (tensor, ragged; images once decoded with decode=)"
            )
        try:
            casts[name] = dtype_name(want)
        except SchemaError:
            raise ArgumentError(
                f"{who}: dtype= for field {name!r}: {want!r} is not a dtype a field can have "
                f"(a torch dtype, or one of {', '.join(DTYPE_NAMES)})"
            ) from None
    return {k: v for k, v in casts.items() if v != schema[k].dtype}


class Finished(Wrapper):
    """``ds`` with its batches cast and widened (see the module doc): a Gatherable, as ``ds``
    is. ``casts``: field -> dtype name; ``width``: ``("pad_to", n)``, ``("pad_multiple", m)``
    or None."""

    def __init__(
        self, ds: Gatherable, casts: dict[str, str], width: tuple[str, int] | None, who: str
    ) -> None:
        self.dataset = ds
        self.casts = {k: TORCH_DTYPES[v] for k, v in casts.items()}
        self.width = width
        self.who = who
        self._schema = {
            k: dataclasses.replace(f, dtype=casts[k]) if k in casts else f  # type: ignore[arg-type]
            for k, f in ds.schema.items()
        }
        self.stored = {k: TORCH_DTYPES[f.dtype] for k, f in ds.schema.items() if k in casts}
        self.padded = [k for k, f in ds.schema.items() if f.pads] if width is not None else []

    @property
    def schema(self) -> Mapping[str, kinds.Field]:
        return self._schema

    def empty_batch(self, batch_size: int, pin_memory: bool = False) -> dict[str, torch.Tensor]:
        out = super().empty_batch(batch_size, pin_memory=pin_memory)
        for name, t in out.items():
            if name in self.casts:
                out[name] = torch.empty(t.shape, dtype=self.casts[name], pin_memory=pin_memory)
        return out

    def __getitem__(self, i: int) -> dict[str, Any]:
        sample = dict(self.dataset[i])
        for name, dt in self.casts.items():
            sample[name] = sample[name].to(dt)
        return sample

    def gather(self, indices: Any, out: Buffers | None = None, pad: Pad | None = None) -> Batch:
        """The dataset's batch (fixed-shape fields being cast gathered into this thread's
        scratch), widened under ``pad=``, then cast (into ``out`` where it has the field)."""
        inner = None if out is None else dict(out)
        if inner is not None:
            for name, t in inner.items():
                if name in self.casts:
                    raw = thread_scratch(f"cast {name}", t.numel() * self.stored[name].itemsize)
                    inner[name] = torch.from_numpy(raw).view(self.stored[name]).view(t.shape)
        batch = self.dataset.gather(indices, out=inner, pad=pad)
        if pad is not None and self.width is not None:
            for name in self.padded:
                if isinstance(batch.get(name), torch.Tensor):
                    batch[name] = self._widen(name, batch, indices, pad)
        for name, dt in self.casts.items():
            batch[name] = _cast(batch[name], dt, None if out is None else out.get(name))
        return batch

    def _widen(self, name: str, batch: dict[str, Any], indices: Any, pad: Pad) -> Any:
        """Padded field ``name`` of ``batch`` widened to the width ``self.width`` asks for."""
        assert self.width is not None
        how, n = self.width
        t = batch[name]
        have = t.shape[1]
        if how == "pad_multiple":
            want = -(-have // n) * n
        elif have > n:
            lengths = batch[f"{name}_lengths"]
            k = int(torch.nonzero(lengths > n)[0, 0])
            i = int(np.asarray(indices, np.int64).reshape(-1)[k]) % max(1, len(self))
            raise ArgumentValueError(
                f"{self.who}: field {name!r}: sample {i} has {int(lengths[k])} rows, more than "
                f"pad_to={n}; cut every sample to at most {n} rows with max_length={n}, or "
                "raise pad_to"
            )
        else:
            want = n
        if want == have:
            return t
        wide = t.new_full((t.shape[0], want, *t.shape[2:]), pad_value(pad, name))
        wide[:, :have] = t
        return wide

    def __repr__(self) -> str:
        casts = {k: str(v).removeprefix("torch.") for k, v in self.casts.items()}
        width = "" if self.width is None else f", {self.width[0]}={self.width[1]}"
        return f"{self.dataset!r} (dtype={casts}{width})"


def _cast(value: Any, dtype: torch.dtype, dst: torch.Tensor | None) -> Any:
    """``value`` (a tensor or a RaggedBatch) as ``dtype``: written into ``dst`` when it is
    given and of its shape, else new."""
    if isinstance(value, RaggedBatch):
        return RaggedBatch(value.values.to(dtype), value.offsets, value.shapes)
    if dst is not None and dst.shape == value.shape:
        return dst.copy_(value)
    return value.to(dtype)
