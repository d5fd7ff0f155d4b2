""".npy headers: written with room to grow (streaming writes), read back strictly (no pickle).

The header is a fixed-size, space-padded dict literal, as numpy itself writes it; the writer
reserves room for a 21-digit first dimension so the final shape can be written in place once
the sample count is known. The reader accepts any valid version 1-3 header, refuses object
dtypes and Fortran order, and checks that the file holds exactly the bytes the header promises.
"""

from __future__ import annotations

import io
import math
import threading
import tokenize
from typing import BinaryIO

import numpy as np

from .errors import FormatError

MAGIC = b"\x93NUMPY"
MAX_HEADER_BYTES = 1 << 16  # numpy itself refuses headers of more than 10,000 characters
# numpy parses the header with ast.literal_eval. On CPython 3.11 the AST builder keeps one
# recursion counter per interpreter, so two threads parsing at once (loader workers mapping
# their first columns) can fail with a spurious "SystemError: AST constructor recursion depth
# mismatch" (cpython#106905). Headers are tiny: parse one at a time. Reentrant, because a
# garbage-collector finalizer may open a file in the middle of a parse.
_PARSE_LOCK = threading.RLock()
_ALIGN = 64
_GROWTH_DIGITS = 21


def _dict_literal(dtype: np.dtype, shape: tuple[int, ...]) -> str:
    return f"{{'descr': {dtype.str!r}, 'fortran_order': False, 'shape': {tuple(shape)!r}, }}"


def header_size(dtype: np.dtype, inner_shape: tuple[int, ...]) -> int:
    """Bytes reserved for the header of an array ``(n, *inner_shape)`` for any ``n < 10**21``."""
    widest = _dict_literal(dtype, (10**_GROWTH_DIGITS - 1, *inner_shape))
    return -(-(len(MAGIC) + 4 + len(widest) + 1) // _ALIGN) * _ALIGN


def header_bytes(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """A version 1.0 header for ``shape``, padded to :func:`header_size`."""
    size = header_size(dtype, shape[1:])
    literal = _dict_literal(dtype, shape).encode("latin1")
    pad = size - len(MAGIC) - 4 - len(literal) - 1
    return MAGIC + b"\x01\x00" + (size - 10).to_bytes(2, "little") + literal + b" " * pad + b"\n"


def length_width(start: bytes) -> int:
    """Bytes of the header-length field after ``start`` (the magic and the version): 2 in
    version 1.0, 4 in versions 2 and 3."""
    return 2 if start[len(MAGIC) : len(MAGIC) + 2] == b"\x01\x00" else 4


def read_header(
    f: BinaryIO, path: str, *, structured: bool = False
) -> tuple[np.dtype, tuple[int, ...], int]:
    """Parse and check a .npy header: returns (dtype, shape, data offset).

    ``structured=True`` lets structured dtypes without objects through (a source to convert,
    whose members become fields); a chute dataset never holds them.
    """
    # Read the header ourselves, bounded: numpy would first allocate the (up to 4 GiB) length
    # a version 2/3 header declares, then find the file too short.
    start = f.read(len(MAGIC) + 2)
    length = f.read(length_width(start))
    size = int.from_bytes(length, "little")
    if size > MAX_HEADER_BYTES:
        raise FormatError(f"{path}: .npy header declares {size} bytes; not a chute file")
    head = io.BytesIO(start + length + f.read(size))
    try:
        with _PARSE_LOCK:
            version = np.lib.format.read_magic(head)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(head)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(head)
            else:
                raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, SyntaxError, TypeError, OverflowError, tokenize.TokenError) as exc:
        # TokenError: numpy re-tokenizes a header it cannot parse, as written by Python 2
        raise FormatError(f"{path}: not a valid .npy file ({exc})") from None
    if any(d < 0 for d in shape):
        raise FormatError(f"{path}: .npy header has a negative dimension in shape {shape}")
    plain = dtype.fields is None or structured
    if dtype.hasobject or not plain or dtype.subdtype is not None:
        raise FormatError(
            f"{path}: dtype {dtype} is refused (object/structured .npy is never loaded)"
        )
    if fortran:
        raise FormatError(f"{path}: Fortran-order .npy is not a chute file")
    return dtype, tuple(int(d) for d in shape), f.tell()


def check_size(path: str, dtype: np.dtype, shape: tuple[int, ...], offset: int, size: int) -> None:
    """The file must hold exactly header + data: a truncated or extended file is an error."""
    expected = offset + math.prod(shape) * dtype.itemsize
    if size != expected:
        raise FormatError(
            f"{path}: file is {size} bytes but its header {shape} {dtype} needs {expected}; "
            "the file is truncated or was modified (run `chute verify`)"
        )
