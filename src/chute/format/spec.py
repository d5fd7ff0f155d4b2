"""The chute on-disk format, version 1: constants, dtypes and names (the field kinds are the
layer above: :mod:`chute.kinds`).

No I/O. ``docs/format.md`` is the prose version of the same spec.

A dataset is a folder holding ``chute.json`` (the manifest) and plain ``.npy`` files, one set
per part: the root folder itself (part ``"."``) and/or ``part-NNNNN/`` sub-folders. Paths are
never read from the manifest: they are derived from validated field and part names, so a
manifest cannot point outside its folder.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from ..errors import FormatError, SchemaError

FORMAT_NAME = "chute"
FORMAT_VERSION = 1
MANIFEST = "chute.json"
CHECKSUM = "xxh3_64"  # of the bytes after the .npy header (the header is validated field by field)
OFFSETS_DTYPE = np.dtype("<i8")
SHAPES_DTYPE = np.dtype("<i8")
ROOT_PART = "."

# Field and part names become file names; they are checked before any path is built from them.
_NAME_COMPONENT = r"[A-Za-z0-9_][A-Za-z0-9_\-]{0,127}"
FIELD_NAME = re.compile(rf"{_NAME_COMPONENT}(/{_NAME_COMPONENT}){{0,7}}")
PART_NAME = re.compile(r"part-[0-9]{5,9}")

# The dtypes a field may have: numpy's names, plus bfloat16, which has no numpy dtype and is
# stored as its 16 bits ('<u2'). torch has a dtype of each name (chute._torch maps them).
DTYPE_NAMES = (
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "bfloat16",
)
_STORAGE = {"bfloat16": np.dtype("<u2")}
MAX_NDIM = 32
MAX_SAMPLES = 2**48


def dtype_name(dtype: Any) -> str:
    """Canonical name of a numpy or torch dtype, e.g. ``"float32"`` or ``"bfloat16"``."""
    if type(dtype).__module__ == "torch" and str(dtype).startswith("torch."):  # a torch.dtype
        name = str(dtype).removeprefix("torch.")
        if name not in DTYPE_NAMES:
            raise SchemaError(f"torch dtype {dtype} is not supported; supported: {DTYPE_NAMES}")
        return name
    if isinstance(dtype, str) and dtype == "bfloat16":
        return dtype
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError, SyntaxError) as exc:  # all three occur for odd strings
        raise SchemaError(f"{dtype!r} is not a dtype") from exc
    if dt.name not in DTYPE_NAMES:
        raise SchemaError(
            f"dtype {dt} cannot be stored: chute stores numeric dtypes, bool and bfloat16 "
            f"({', '.join(sorted(DTYPE_NAMES))}); convert object/str arrays to String() or Bytes()"
        )
    return dt.name


def storage_dtype(name: str) -> np.dtype:
    """The little-endian numpy dtype a field of dtype ``name`` is stored as."""
    if name in _STORAGE:
        return _STORAGE[name]
    return np.dtype(name).newbyteorder("<")


def check_shape(shape: Any, *, allow_none: bool) -> tuple:
    if isinstance(shape, int):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError as exc:
        raise SchemaError(f"shape must be a tuple of ints, got {shape!r}") from exc
    if len(dims) > MAX_NDIM:
        raise SchemaError(f"shape {dims} has more than {MAX_NDIM} dimensions")
    for d in dims:
        ok = (d is None and allow_none) or (
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) and 0 <= d < 2**40
        )
        if not ok:
            raise SchemaError(f"bad dimension {d!r} in shape {dims}")
    # Bounded so that sizes and strides of a batch fit in int64 (torch checks with an error
    # that is not a chute one) even for a zero-size dimension.
    if math.prod(d for d in dims if d) >= 2**40:
        raise SchemaError(f"shape {dims} has 2**40 or more elements per sample")
    return tuple(None if d is None else int(d) for d in dims)


def check_field_name(name: Any) -> str:
    """``name`` if it may name a field: its files are ``NAME.npy`` & co. in each part's
    folder, so no path tricks, and no first segment that names a part folder
    (``part-00001/x`` of the root part would be part 1's ``x``)."""
    if (
        not isinstance(name, str)
        or not FIELD_NAME.fullmatch(name)
        or PART_NAME.fullmatch(name.split("/", 1)[0].lower())
    ):
        raise SchemaError(
            f"field name {name!r} is not allowed: use ASCII letters, digits, '_' and '-' "
            "(nested names as 'group/name'); no '.', '..', or leading '/', and no first "
            "segment like a part folder ('part-NNNNN')"
        )
    return name


def json_list(obj: dict, key: str) -> list:
    """``obj[key]``, a list read from a manifest; else a FormatError."""
    value = obj.get(key)
    if not isinstance(value, list):
        raise FormatError(f"{key!r} must be a list, got {value!r}")
    return value


def json_dtype(name: str, obj: dict) -> str:
    """The ``dtype`` of a manifest field entry: only the canonical names chute writes (numpy
    never parses an untrusted dtype string); else a FormatError."""
    dtype = obj.get("dtype")
    if not (isinstance(dtype, str) and dtype in DTYPE_NAMES):
        raise FormatError(f"field {name!r}: unknown dtype {dtype!r}; one of {sorted(DTYPE_NAMES)}")
    return dtype
