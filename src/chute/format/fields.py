"""The chute on-disk format, version 1: constants, dtypes, field kinds and their files.

No I/O. ``docs/format.md`` is the prose version of the same spec.

A dataset is a folder holding ``chute.json`` (the manifest) and plain ``.npy`` files, one set
per part: the root folder itself (part ``"."``) and/or ``part-NNNNN/`` sub-folders. Paths are
never read from the manifest: they are derived from validated field and part names, so a
manifest cannot point outside its folder.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Union

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


@dataclass(frozen=True)
class Tensor:
    """A fixed-shape field: every sample is an array of ``shape`` and ``dtype``.

    Stored as ``NAME.npy`` of shape ``(N, *shape)``; a batch is one ``take`` from the map.
    """

    shape: tuple[int, ...] = ()
    dtype: str = "float32"
    kind = "tensor"

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _check_shape(self.shape, allow_none=False))
        object.__setattr__(self, "dtype", dtype_name(self.dtype))


@dataclass(frozen=True)
class Ragged:
    """A variable-size field, e.g. token ids or images of different sizes.

    ``inner_shape`` gives the sample shape after the first (variable) axis; ``None`` marks
    further variable dimensions, e.g. ``Ragged("uint8", (None, 3))`` for HxWx3 images.
    Stored as ``NAME.values.npy`` + ``NAME.offsets.npy`` (int64, N+1), plus
    ``NAME.shapes.npy`` (int64, N x ndim) when a dimension other than the first varies.
    """

    dtype: str = "float32"
    inner_shape: tuple[int | None, ...] = ()
    kind = "ragged"

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", dtype_name(self.dtype))
        object.__setattr__(self, "inner_shape", _check_shape(self.inner_shape, allow_none=True))

    @property
    def variable_dims(self) -> bool:
        """True when some dimension besides the first varies (a shapes file is stored)."""
        return None in self.inner_shape


@dataclass(frozen=True)
class Bytes:
    """Raw bytes per sample (e.g. an encoded JPEG). Read back as a 1-D uint8 tensor."""

    kind = "bytes"
    dtype = "uint8"
    inner_shape: tuple[int | None, ...] = field(default=(), init=False)
    variable_dims = False


@dataclass(frozen=True)
class String:
    """A ``str`` per sample, stored UTF-8 encoded. Read back as ``str``."""

    kind = "string"
    dtype = "uint8"
    inner_shape: tuple[int | None, ...] = field(default=(), init=False)
    variable_dims = False


@dataclass(frozen=True)
class Image:
    """An encoded image per sample (JPEG), plus its ``(height, width)``, so that crops are
    planned before decoding. ``ds[i]`` decodes it to uint8 ``(3, H, W)``; the loaders decode
    batches with ``decode=`` (see :mod:`chute.image`).

    Written from PIL images, encoded bytes or uint8 arrays: a JPEG within ``max_side`` is kept
    as it is, anything else is converted to RGB, shrunk so its longer side is ``max_side``
    (None: never) and encoded at ``quality`` (see :func:`chute.image.encode_image`). Stored as
    ``NAME.values.npy`` + ``NAME.offsets.npy`` (the bytes, as :class:`Bytes`) and
    ``NAME.sizes.npy`` (int32, N x 2: height, width).
    """

    max_side: int | None = None
    quality: int = 90
    kind = "image"
    codec = "jpeg"
    dtype = "uint8"
    inner_shape: tuple[int | None, ...] = field(default=(), init=False)
    variable_dims = False

    def __post_init__(self) -> None:
        m, q = self.max_side, self.quality
        if m is not None and (type(m) is not int or not 1 <= m < 2**31):
            raise SchemaError(f"Image: max_side must be a positive int or None, got {m!r}")
        if type(q) is not int or not 1 <= q <= 100:
            raise SchemaError(f"Image: quality must be an int in 1..100, got {q!r}")


Field = Union[Tensor, Ragged, Bytes, String, Image]  # noqa: UP007 - a runtime alias, py3.10 safe
VarField = (Ragged, Bytes, String, Image)  # kinds stored as values + offsets
IMAGE_CODECS = ("jpeg",)


def _check_shape(shape: Any, *, allow_none: bool) -> tuple:
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


def field_files(name: str, f: Field) -> dict[str, str]:
    """Role -> file name (relative to its part folder) for field ``name``."""
    if isinstance(f, Tensor):
        return {"data": f"{name}.npy"}
    files = {"values": f"{name}.values.npy", "offsets": f"{name}.offsets.npy"}
    if f.variable_dims:
        files["shapes"] = f"{name}.shapes.npy"
    if isinstance(f, Image):
        files["sizes"] = f"{name}.sizes.npy"
    return files


def role_dtype(f: Field, role: str) -> str:
    """The dtype name of file ``role`` of field ``f``: the field's own for ``data`` and
    ``values``, int64 for ``offsets`` and ``shapes``, int32 for an image's ``sizes``."""
    if role in ("data", "values"):
        return f.dtype
    return "int32" if role == "sizes" else "int64"


def field_to_json(f: Field) -> dict[str, Any]:
    if isinstance(f, Tensor):
        return {"kind": f.kind, "dtype": f.dtype, "shape": list(f.shape)}
    if isinstance(f, Ragged):
        return {"kind": f.kind, "dtype": f.dtype, "inner_shape": list(f.inner_shape)}
    if isinstance(f, Image):
        return {"kind": f.kind, "codec": f.codec, "max_side": f.max_side, "quality": f.quality}
    return {"kind": f.kind}


def field_from_json(name: str, obj: Any) -> Field:
    if not isinstance(obj, dict):
        raise FormatError(f"field {name!r}: expected an object, got {type(obj).__name__}")
    kind = obj.get("kind")
    dtype = obj.get("dtype")
    if kind in ("tensor", "ragged") and not (isinstance(dtype, str) and dtype in DTYPE_NAMES):
        # only the canonical names chute writes: numpy never parses an untrusted dtype string
        raise FormatError(f"field {name!r}: unknown dtype {dtype!r}; one of {sorted(DTYPE_NAMES)}")
    try:
        if kind == "tensor":
            return Tensor(tuple(_list(obj, "shape")), str(dtype))
        if kind == "ragged":
            return Ragged(str(dtype), tuple(_list(obj, "inner_shape")))
    except SchemaError as exc:
        raise FormatError(f"field {name!r}: {exc}") from None
    if kind == "bytes":
        return Bytes()
    if kind == "string":
        return String()
    if kind == "image":
        return _image_from_json(name, obj)
    raise FormatError(f"field {name!r}: unknown kind {kind!r}")


def _image_from_json(name: str, obj: dict) -> Image:
    codec = obj.get("codec")
    if codec not in IMAGE_CODECS:
        raise FormatError(
            f"field {name!r}: image codec {codec!r} is not supported by this chute (reads "
            f"{list(IMAGE_CODECS)}); upgrade chute"
        )
    try:
        return Image(obj.get("max_side"), obj.get("quality", 90))
    except SchemaError as exc:
        raise FormatError(f"field {name!r}: {exc}") from None


def _list(obj: dict, key: str) -> list:
    value = obj.get(key)
    if not isinstance(value, list):
        raise FormatError(f"{key!r} must be a list, got {value!r}")
    return value


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


def expected_shape(f: Field, role: str, n: int, total: int | None = None) -> tuple[int, ...] | None:
    """Shape of file ``role`` of field ``f`` in a part of ``n`` samples.

    For ``values`` the leading dimension ``total`` comes from the offsets (None: unknown yet).
    """
    if isinstance(f, Tensor):
        return (n, *f.shape)
    if role == "offsets":
        return (n + 1,)
    if role == "shapes":
        return (n, 1 + len(f.inner_shape))
    if role == "sizes":
        return (n, 2)
    if total is None:
        return None
    if f.variable_dims:
        return (total,)
    return (total, *f.inner_shape)  # type: ignore[arg-type]


def row_nbytes(f: Field) -> int:
    """Bytes of one sample of a fixed field (or one row of a ragged field's values)."""
    inner = f.shape if isinstance(f, Tensor) else tuple(d or 1 for d in f.inner_shape)
    if isinstance(f, Ragged) and f.variable_dims:
        inner = ()
    return math.prod(inner) * storage_dtype(f.dtype).itemsize
