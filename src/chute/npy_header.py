""".npy headers: written with room to grow (streaming writes), read back strictly (no pickle).

The header is a fixed-size, space-padded dict literal, as numpy itself writes it; the writer
reserves room for a 21-digit first dimension so the final shape can be written in place once
the sample count is known. The reader accepts any valid version 1-3 header, refuses object
dtypes and Fortran order, and checks that the file holds exactly the bytes the header promises.
"""

from __future__ import annotations

import io
import math
import re
import threading
import tokenize
from typing import BinaryIO

import numpy as np

from .errors import FormatError

MAGIC = b"\x93NUMPY"
MAX_HEADER_BYTES = 1 << 16  # numpy itself refuses headers of more than 10,000 characters
# numpy parses the header with ast.literal_eval. On CPython 3.11 the AST builder keeps one
# recursion counter per interpreter, so a parse while another thread builds an AST (another
# parse, or an import compiling a module from source) can fail with a spurious "SystemError:
# AST constructor recursion depth mismatch" (cpython#106905). The header numpy and chute
# write (a plain dtype, C order) is therefore matched by _PLAIN, without the AST; any other
# goes to numpy, one at a time. Reentrant, because a garbage-collector finalizer may open a
# file in the middle of a parse.
_PARSE_LOCK = threading.RLock()
_PLAIN = re.compile(
    rb"\{'descr': '(?P<descr>[<>|=]?[a-zA-Z]\d{0,4})', 'fortran_order': False, "
    rb"'shape': \((?P<shape>(?:\d{1,30}(?:, \d{1,30})*,?)?)\), \} *\n"
)
_VERSIONS = (MAGIC + b"\x01\x00", MAGIC + b"\x02\x00", MAGIC + b"\x03\x00")
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
    literal = f.read(size)
    match = _PLAIN.fullmatch(literal) if start in _VERSIONS else None
    dtype = _plain_dtype(match["descr"]) if match is not None else None
    if match is not None and dtype is not None:
        shape: tuple[int, ...] = tuple(int(d) for d in match["shape"].split(b",") if d.strip())
        fortran = False
    else:
        dtype, shape, fortran = _numpy_header(io.BytesIO(start + length + literal), path)
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


def _plain_dtype(descr: bytes) -> np.dtype | None:
    """The dtype a plain header's ``descr`` names; None if numpy has no such dtype."""
    try:
        return np.dtype(descr.decode("ascii"))
    except TypeError:  # numpy's own parse names what is wrong
        return None


def _numpy_header(head: io.BytesIO, path: str) -> tuple[np.dtype, tuple[int, ...], bool]:
    """(dtype, shape, fortran order) of the header in ``head`` as numpy reads it."""
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
    return dtype, shape, fortran


def check_size(path: str, dtype: np.dtype, shape: tuple[int, ...], offset: int, size: int) -> None:
    """The file must hold exactly header + data: a truncated or extended file is an error."""
    expected = offset + math.prod(shape) * dtype.itemsize
    if size != expected:
        raise FormatError(
            f"{path}: file is {size} bytes but its header {shape} {dtype} needs {expected}; "
            "the file is truncated or was modified (run `chute verify`)"
        )
