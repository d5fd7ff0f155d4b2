"""A batch's schema where the user gives none: a field kind inferred from the first samples
(:func:`infer_schema`, :func:`infer_field`), an empty sample's field left open until a
non-empty one decides it (:func:`decided_field`), nested dicts flattened to ``group/name``
fields (:func:`flatten`), a declared schema and a batch checked against each other
(:func:`check_schema`, :func:`sample_count`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch

from .. import kinds
from ..columns.values import to_array
from ..errors import SchemaError
from ..format import check_field_name


def flatten(values: Any) -> Any:
    """Nested dicts as ``group/name`` fields (``{"a": {"b": x}}`` -> ``{"a/b": x}``); anything
    else as it is."""
    if not isinstance(values, Mapping) or not any(isinstance(v, Mapping) for v in values.values()):
        return values
    items = list(_flat_items(values, ""))
    flat = dict(items)
    if len(flat) != len(items):  # {"a": {"b": x}, "a/b": y}: one would hide the other
        seen: set[str] = set()
        twice = next(k for k, _ in items if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise SchemaError(
            f"field {twice!r} is given twice, nested and by its 'group/name': rename one of them"
        )
    return flat


def _flat_items(sample: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    for key, value in sample.items():
        if isinstance(value, Mapping):
            yield from _flat_items(value, f"{prefix}{key}/")
        else:
            yield prefix + str(key), value


def infer_field(name: str, value: Any, batch: bool = False) -> kinds.Field:
    """The field kind of one sample (or, with ``batch``, of an array of samples)."""
    if isinstance(value, str):
        return kinds.String()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return kinds.Bytes()
    from ..image.codec import EncodedImage

    # An image already encoded (chute.image.encode_image) is an Image field. A PIL image is
    # not: without a declared chute.fields.Image() it stays its pixels (lossless, as before),
    # never a JPEG re-encoded behind the caller's back.
    if isinstance(value, EncodedImage):
        return kinds.Image()
    arr, dt, _ = to_array(value, name, 0)
    return kinds.Tensor(arr.shape[1:] if batch else arr.shape, dt)


def sample_count(
    batch: Mapping[str, Any], schema: Mapping[str, kinds.Field], start: int = 0
) -> int:
    """Number of samples in ``batch``; every schema field present, all of the same length."""
    if not isinstance(batch, Mapping):
        raise SchemaError(f"expected a dict of field -> values, got {type(batch).__name__}")
    missing, extra = set(schema) - set(batch), set(batch) - set(schema)
    if missing or extra:
        raise SchemaError(
            f"sample {start}: fields {sorted(batch)} do not match the schema {sorted(schema)} "
            f"(missing {sorted(missing)}, unexpected {sorted(extra)})"
        )
    lengths = {}
    for k, v in batch.items():
        if isinstance(v, (str, bytes, bytearray, memoryview)):  # len() would count characters
            raise SchemaError(
                f"field {k!r}: a batch needs a list or array of samples, got one "
                f"{type(v).__name__} ({v[:32]!r}); wrap it in a list for one sample"
            )
        try:
            lengths[k] = len(v)
        except TypeError:
            raise SchemaError(
                f"field {k!r}: a batch needs a sequence or array, got {v!r}"
            ) from None
    if len(set(lengths.values())) > 1:
        raise SchemaError(f"samples {start}+: fields have different lengths {lengths}")
    return next(iter(lengths.values()))


def is_empty(value: Any) -> bool:
    """Whether ``value`` is an empty list or array (``[]``, ``np.zeros(0)``): its dtype is
    numpy's default, not the data's, so an inferred field keeps its dtype open until a
    non-empty value decides it (:func:`decided_field`)."""
    if isinstance(value, (str, bytes, bytearray, memoryview)):
        return False
    if isinstance(value, (list, tuple)):
        return len(value) == 0
    if isinstance(value, torch.Tensor):
        return value.numel() == 0
    size = getattr(value, "size", None)
    return isinstance(size, int) and size == 0 and hasattr(value, "dtype")


def decided_field(old: kinds.Field, values: Any, name: str, start: int) -> kinds.Field | None:
    """The field that an inferred field ``old`` whose samples so far were all empty becomes
    at the first non-empty sample of the batch ``values`` (a list of samples): a Ragged field
    of that sample's dtype and shape. None while the batch's samples are all empty too (or
    are not a list of samples: an array batch is read with its own dtype as it is)."""
    if not isinstance(values, (list, tuple)) or not old.numeric:
        return None
    fixed = old.sample_shape
    for i, v in enumerate(values):
        if is_empty(v) or isinstance(v, (str, bytes, bytearray, memoryview)):
            continue
        arr, dt, _ = to_array(v, name, start + i)
        if arr.size == 0:
            continue
        if arr.ndim != len(fixed) or arr.ndim == 0:
            return None  # not the same kind of value: prepare() says so
        inner = tuple(a if a == b else None for a, b in zip(fixed[1:], arr.shape[1:], strict=True))
        return kinds.Ragged(dt, inner)
    return None


def infer_schema(sample: Mapping[str, Any]) -> dict[str, kinds.Field]:
    """The schema of one sample: arrays -> Tensor, ``str`` -> String, bytes -> Bytes, a PIL
    image -> Image."""
    if not isinstance(sample, Mapping) or not sample:
        raise SchemaError(
            f"a sample must be a non-empty dict of field -> value, got {type(sample)}"
        )
    return check_schema({check_field_name(k): infer_field(k, v) for k, v in sample.items()})


def check_schema(schema: Mapping[str, Any]) -> dict[str, kinds.Field]:
    """``schema`` as a dict of checked field names -> chute field kinds; else a SchemaError."""
    if not isinstance(schema, Mapping) or not schema:
        raise SchemaError(
            "schema must be a non-empty dict of field name -> chute.fields.Tensor/Ragged/..."
        )
    out = {}
    folded: dict[str, str] = {}
    for name, f in schema.items():
        check_field_name(name)
        if folded.setdefault(name.lower(), name) != name:  # one file on macOS / Windows
            raise SchemaError(
                f"fields {folded[name.lower()]!r} and {name!r} differ only in case: their files "
                "would be one on a case-insensitive filesystem; rename one"
            )
        if not kinds.is_field(f):
            raise SchemaError(f"field {name!r}: {f!r} is not a chute field kind")
        out[name] = f
    return out
