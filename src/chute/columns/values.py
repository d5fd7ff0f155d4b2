"""The writer's checks and conversions: user values -> arrays of the field's dtype and shape.

A batch is checked and converted whole (each kind's ``prepare``, built from the functions here)
before anything is appended, so a bad sample never leaves the field's files out of step with
the others. Python ints and floats
(and lists of them) follow the field's dtype when they fit: numpy's ``same_kind`` rule (an int
into a float field, a float into float16; never a float into an int field), range-checked (300
into uint8 or 1e40 into float32 are refused). Arrays keep their dtype: they are cast only where
numpy's ``safe`` rule says no value changes.
A sample that does not fit an *inferred* field raises :class:`Promote` (the field becomes
ragged); one that does not fit a declared field is a :class:`~chute.SchemaError`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch

from .._torch import as_numpy
from ..errors import SchemaError
from ..format import DTYPE_NAMES, storage_dtype
from .var_batch import VarBatch


class Layout(Protocol):
    """What the conversions ask of a field (a :mod:`chute.kinds` kind): its dtype and the
    shape of one sample, None where a dimension varies."""

    @property
    def dtype(self) -> str: ...

    @property
    def sample_shape(self) -> tuple[int | None, ...]: ...


def to_array(value: Any, name: str, index: int) -> tuple[np.ndarray, str, bool]:
    """Convert a user value to ``(array, dtype name, came from native Python)``."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().resolve_conj().resolve_neg()
        if t.dtype == torch.bfloat16:
            return as_numpy(t.contiguous()), "bfloat16", False
        arr, native = t.numpy(), False
    elif isinstance(value, np.ndarray):
        arr, native = value, False
    elif isinstance(value, (str, bytes, bytearray, memoryview)):
        raise SchemaError(
            f"field {name!r}, sample {index}: got {type(value).__name__}, expected an array"
        )
    else:
        native = not isinstance(value, np.generic) and not hasattr(value, "__array_interface__")
        try:
            arr = np.asarray(value)
        except ValueError as exc:  # e.g. a list of lists of different lengths
            raise SchemaError(
                f"field {name!r}, sample {index}: cannot make an array ({exc})"
            ) from None
    if arr.dtype.kind in "OUSVMm" or arr.dtype.name not in DTYPE_NAMES:
        raise SchemaError(
            f"field {name!r}, sample {index}: dtype {arr.dtype} cannot be stored (object, str, "
            "structured, datetime and long double arrays are refused); use String()/Bytes() "
            "for text and encoded data, or convert to a numeric dtype"
        )
    return arr, arr.dtype.name, native


def string_row(name: str) -> Callable[[Any, int], np.ndarray]:
    """The conversion of one sample of String field ``name``: a ``str`` -> its UTF-8 bytes."""

    def row(value: Any, index: int) -> np.ndarray:
        if not isinstance(value, str):
            raise SchemaError(
                f"field {name!r}, sample {index}: expected str, got {type(value).__name__}"
            )
        try:
            return np.frombuffer(value.encode("utf-8"), np.uint8)
        except UnicodeEncodeError as exc:  # a lone surrogate, e.g. from a bad decode
            raise SchemaError(
                f"field {name!r}, sample {index}: the str has no UTF-8 form ({exc.reason} at "
                f"character {exc.start}: {value[exc.start : exc.end]!r}); clean it first"
            ) from None

    return row


def bytes_row(name: str) -> Callable[[Any, int], np.ndarray]:
    """The conversion of one sample of Bytes field ``name``: bytes or a 1-D uint8 array."""

    def row(value: Any, index: int) -> np.ndarray:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return np.frombuffer(bytes(value), np.uint8)
        arr, dt, _ = to_array(value, name, index)
        if dt != "uint8" or arr.ndim != 1:
            raise SchemaError(
                f"field {name!r}, sample {index}: Bytes takes bytes or a 1-D uint8 array"
            )
        return arr

    return row


_PYTHON_KIND = {"b": "bool", "i": "int", "u": "int", "f": "float", "c": "complex"}


def _dtype_fits(src: str, native: bool, dtype: str) -> bool:
    """Whether values of dtype ``src`` may go into a field of ``dtype`` (values from native
    Python also need to be in range, see :func:`_cast`)."""
    if src == dtype:
        return True
    if "bfloat16" in (src, dtype):
        return False
    if native and np.dtype(src).kind in "iu" and np.dtype(dtype).kind in "iu":
        return True  # a Python int has no signedness: 5 fits uint8 (the range is checked)
    return bool(np.can_cast(src, dtype, "same_kind" if native else "safe"))


def _cast(
    arr: np.ndarray,
    src: str,
    native: bool,
    f: Layout,
    name: str,
    index: int,
    batch: bool = False,
) -> np.ndarray:
    """``arr`` in the field's storage dtype: exact for arrays, range-checked for native Python
    numbers (``batch``: ``arr`` holds samples ``index``, ``index + 1``...)."""
    target = storage_dtype(f.dtype)
    if src == f.dtype or arr.size == 0:  # no value of an empty array can fail to fit
        return np.ascontiguousarray(arr, dtype=target)
    fit = f"field {name!r}, sample {index}: dtype {src} does not fit the schema dtype {f.dtype}"
    if not _dtype_fits(src, native, f.dtype):
        what = f" (a Python {_PYTHON_KIND.get(arr.dtype.kind, src)})" if native else ""
        raise SchemaError(f"{fit}{what}; cast it first (or declare the field with that dtype)")
    if not native:
        return np.ascontiguousarray(arr, dtype=target)
    with np.errstate(over="ignore", invalid="ignore"):  # what did not fit is found below
        out = arr.astype(target)
    if target.kind in "iub":
        bad = out != arr  # compared by value: a wrapped int differs
        limits = np.iinfo(target) if target.kind != "b" else None
        span = f" ({limits.min} to {limits.max})" if limits is not None else ""
    else:
        bad = np.isfinite(arr) & ~np.isfinite(out)  # overflow to inf
        span = f" (largest {np.finfo(target).max:.4g})"
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        row = index + (first // max(1, bad.size // len(arr)) if batch and arr.ndim else 0)
        value = arr.reshape(-1)[first].item()
        raise SchemaError(
            f"field {name!r}, sample {row}: dtype {src} does not fit the schema dtype "
            f"{f.dtype}: the value {value!r} is out of its range{span}; clip or cast it first "
            "(or declare the field with a wider dtype)"
        )
    return out


class Promote(Exception):
    """Internal: the inferred field must become ragged, of ``dtype`` and ``inner_shape`` (the
    shape after the first axis, None where it varies), to take this sample."""

    def __init__(self, dtype: str, inner_shape: tuple[int | None, ...]):
        self.dtype, self.inner_shape = dtype, inner_shape


def _widen(
    old: Layout,
    shape: tuple[int, ...],
    dtype: str,
    native: bool,
    auto: bool,
    name: str,
    i: int,
):
    """Raise Promote (inferred schema) or SchemaError for a sample that does not fit ``old``.

    The dtype is checked first: a change of shape alone makes an inferred field ragged, so
    when the dtype does not fit either, that is the cause to name."""
    fixed = old.sample_shape
    want = "(n, " + ", ".join(map(str, fixed[1:])) + ")" if fixed[:1] == (None,) else str(fixed)
    if not _dtype_fits(dtype, native, old.dtype):
        ragged = " (a change of shape alone would make it ragged)" if auto else ""
        raise SchemaError(
            f"field {name!r}, sample {i}: dtype {dtype} does not fit the field's {old.dtype}, "
            f"and its shape {shape} differs from {want}{ragged}; cast it to {old.dtype} first"
        )
    if auto and len(shape) == len(fixed) and len(shape) > 0:
        inner = tuple(None if a != b else a for a, b in zip(fixed[1:], shape[1:], strict=True))
        raise Promote(old.dtype, inner)
    hint = "" if auto else "; declare it as chute.Ragged(...) for variable shapes"
    raise SchemaError(f"field {name!r}, sample {i}: shape {shape} does not match {want}{hint}")


def prepare_fixed(values: Any, f: Layout, name: str, start: int, auto: bool) -> np.ndarray:
    """A batch of ``values`` for fixed-shape field ``f`` as one ``(B, *shape)`` array (raises
    Promote / SchemaError)."""
    shape: tuple[int, ...] = f.sample_shape  # type: ignore[assignment]
    if isinstance(values, (list, tuple)):
        rows = []
        for i, v in enumerate(values):
            arr, dt, native = to_array(v, name, start + i)
            if arr.shape != shape:
                _widen(f, arr.shape, dt, native, auto, name, start + i)
            rows.append(_cast(arr, dt, native, f, name, start + i))
        return np.stack(rows) if rows else np.empty((0, *shape), storage_dtype(f.dtype))
    arr, dt, native = to_array(values, name, start)
    if arr.shape[1:] != shape:
        _widen(f, arr.shape[1:], dt, native, auto, name, start)
    return _cast(arr, dt, native, f, name, start, batch=True)


def ragged_row(f: Layout, name: str, auto: bool) -> Callable[[Any, int], np.ndarray]:
    """The conversion of one sample of Ragged field ``f``: an array of its dtype and inner
    shape (raises Promote / SchemaError)."""
    fixed = f.sample_shape

    def row(value: Any, index: int) -> np.ndarray:
        arr, dt, native = to_array(value, name, index)
        if arr.ndim != len(fixed) or any(
            b is not None and a != b for a, b in zip(arr.shape, fixed, strict=True)
        ):
            _widen(f, arr.shape, dt, native, auto, name, index)
        return _cast(arr, dt, native, f, name, index)

    return row


def prepare_var(
    values: Any, f: Layout, name: str, start: int, row: Callable[[Any, int], np.ndarray]
) -> VarBatch:
    """A batch of ``values`` for values+offsets field ``f``, each sample converted by
    ``row(value, index)``."""
    variable_dims = None in f.sample_shape[1:]
    pieces, lengths, shapes = [], [], []
    for i, v in enumerate(values):
        arr = row(v, start + i)
        pieces.append(arr.reshape(-1) if variable_dims else arr)
        lengths.append(len(pieces[-1]))
        shapes.append(arr.shape)
    sd = storage_dtype(f.dtype)
    inner: tuple[int, ...] = () if variable_dims else f.sample_shape[1:]  # type: ignore[assignment]
    flat = np.concatenate(pieces) if pieces else np.empty((0, *inner), sd)
    shape_arr = np.array(shapes, np.int64).reshape(len(shapes), -1) if variable_dims else None
    return VarBatch(flat, np.array(lengths, np.int64), shape_arr)
