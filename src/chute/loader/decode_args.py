"""``decode=`` read and checked, once, when a loader is made: which image fields are decoded
by which ops (:func:`chute.image.ops.check_ops`) to which size, which on a device
(``device=``, decoded by :func:`chute.to_device`), which follow another's plan
(:class:`chute.Follow`, :class:`chute.Geometry`), which are views of another
(:class:`chute.View`), and the batch's fields that result. Every mistake is an error naming
the ``decode=`` entry at fault, before a batch is read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ArgumentError, SchemaError
from ..image.augment import AUGMENTS
from ..image.follow import Follow, Geometry, View, check_fill, check_followable, geometry_width
from ..image.on_device import check_device
from ..image.ops import check_ops
from ..image.scales import MultiScale, unwrap
from ..kinds import Field, Tensor

__all__ = ["DecodeArgs", "read_decode"]


@dataclass
class DecodeArgs:
    """What ``decode=`` asks for (see the module doc)."""

    ops: dict[str, tuple[Any, ...]]  # field (or view) -> its checked decode ops
    sizes: dict[str, tuple[int, int]]  # field (or view) -> the (height, width) it comes out
    on_device: dict[str, str]  # fields decoded by to_device (image/on_device.py)
    tied: dict[str, Follow | Geometry]  # fields that take a leader's plan
    views: dict[str, str]  # view name -> the image field it decodes
    scales: dict[str, MultiScale]  # fields decoded at a size drawn per batch
    schema: dict[str, Field]  # the batch's fields, decoded ones as decoded


def read_decode(schema: Mapping[str, Field], ops: Any) -> DecodeArgs:
    """``decode=`` ``ops`` over a dataset of fields ``schema``, checked."""
    if not isinstance(ops, Mapping) or not ops:
        raise ArgumentError(
            "decode= takes a dict field -> decode ops, e.g. {'image': "
            "[chute.RandomResizedCrop(224), chute.RandomHorizontalFlip()]}"
        )
    got = DecodeArgs({}, {}, {}, {}, {}, {}, {})
    for name, field_ops in ops.items():
        if isinstance(field_ops, (Follow, Geometry)):
            got.tied[name] = field_ops
            continue
        if isinstance(field_ops, View):
            _check_new(schema, name, f"View({field_ops.field!r}, ...)", "view")
            _check_image(schema, name, f"View({field_ops.field!r}, ...)", field=field_ops.field)
            got.views[name] = field_ops.field
            field_ops = field_ops.ops
        else:
            _check_image(schema, name, "ops")
        field_ops, scale = unwrap(field_ops)  # MultiScale: checked at its largest size
        if scale is not None:
            got.scales[name] = scale
        checked = check_ops(field_ops)
        got.ops[name] = checked
        geo = next(op for op in checked if hasattr(op, "out_size"))
        got.sizes[name] = geo.out_size
        if geo.device is not None and any(isinstance(op, AUGMENTS) for op in checked):
            raise ArgumentError(
                f"decode={{{name!r}: ...}}: augmentations run in the loader's workers, not "
                f"with device={geo.device!r}; apply them after chute.to_device"
            )
        device = check_device(geo.device, f"decode={{{name!r}: {type(geo).__name__}}}")
        if device is not None and name in got.views:
            raise ArgumentError(
                f"decode={{{name!r}: View(...)}}: a view is decoded in the loader's "
                f"workers, not with device={geo.device!r}"
            )
        if device is not None:
            got.on_device[name] = device
    here = [k for k in got.ops if k not in got.on_device]  # a field decoded on the device
    got.schema = {  # stays encoded
        **schema,  # decoded fields keep their place; views come after
        **{k: Tensor((3, *got.sizes[k]), "uint8") for k in here},
    }
    for name, tie in got.tied.items():
        got.schema[name] = _tie_field(schema, got, name, tie)
    return got


def _check_image(
    schema: Mapping[str, Field],
    name: str,
    what: str,
    kinds: tuple[str, ...] = ("image",),
    field: str | None = None,
) -> None:
    """``decode={name: what}`` reads dataset field ``field`` (``name`` itself by default),
    which must be of one of ``kinds``."""
    f = schema.get(field or name)
    if f is None or f.kind not in kinds:
        found = f"no field {field or name!r}" if f is None else f"a {f.kind} field"
        images = [k for k, v in schema.items() if v.kind in kinds]
        raise SchemaError(
            f"decode={{{name!r}: {what}}}: {found}; it takes the dataset's "
            f"{' or '.join(kinds)} fields ({images})"
        )


def _check_new(schema: Mapping[str, Field], name: str, what: str, kind: str) -> None:
    """A batch field that ``decode=`` adds must not shadow a field of the dataset."""
    if name in schema:
        raise SchemaError(
            f"decode={{{name!r}: {what}}}: the dataset has a field {name!r}; name the "
            f"{kind} field differently"
        )


def _tie_field(
    schema: Mapping[str, Field], got: DecodeArgs, name: str, tie: Follow | Geometry
) -> Field:
    """The batch field of ``decode={name: tie}``, checked against its leader."""
    what = f"{type(tie).__name__}({tie.field!r})"
    if tie.field not in got.ops or tie.field in got.on_device:
        raise ArgumentError(
            f"decode={{{name!r}: {what}}}: {tie.field!r} must have its own decode ops in "
            f"decode=, decoded in the loader (not device=); got {sorted(got.ops)}"
        )
    h, w = got.sizes[tie.field]
    leader = got.ops[tie.field]
    check_followable(leader, f"decode={{{name!r}: {what}}}")
    if isinstance(tie, Geometry):
        _check_new(schema, name, what, "geometry")
        return Tensor((geometry_width(leader),), "float64")
    _check_image(schema, name, what, ("image", "mask"))
    f = schema[name]
    check_fill(tie.fill, f.kind, f.dtype, f"decode={{{name!r}: {what}}}")
    if getattr(f, "instances", False):
        return f  # ragged: each sample's (N, h, w) planes, a RaggedBatch
    return Tensor((h, w), f.dtype) if f.kind == "mask" else Tensor((3, h, w), "uint8")
