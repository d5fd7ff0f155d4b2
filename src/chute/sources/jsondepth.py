"""How deep the JSON lines of a block nest, found before any parser sees them.

pyarrow's JSON reader recurses once per level of nesting with no limit (a line of lists nested
100,000 deep kills the interpreter with a segmentation fault), and Python's ``json`` raises
``RecursionError`` past about 1,000 levels. So every block of JSON lines is scanned first, at
byte level: escaped bytes are blanked, everything but quotes, brackets and newlines
is dropped, and numpy counts the brackets outside strings. A line nested deeper than
:data:`MAX_DEPTH` is a :class:`chute.SourceError` naming the file and the line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import SourceError

MAX_DEPTH = 100  # lists / objects inside each other on one line; real data rarely passes 10
_PIECE = 1 << 22  # structural bytes scanned at a time: bounds the scan's memory (~40 MiB)
_KEEP = b'"[]{}\n'
_DROP = bytes(sorted(set(range(256)) - set(_KEEP)))
_QUOTE, _NEWLINE, _BACKSLASH = ord('"'), ord("\n"), ord("\\")
_STEP = np.zeros(256, np.int32)  # +1 opens a list / object, -1 closes one
_STEP[[ord("["), ord("{")]], _STEP[[ord("]"), ord("}")]] = 1, -1


def check_depth(data: bytes, path: Path | str, first_line: int) -> None:
    """Refuse a line of ``data`` (whole lines, numbered from ``first_line``) that nests lists
    and objects deeper than :data:`MAX_DEPTH`."""
    line = _deep_line(_structure(data))
    if line is not None:
        raise SourceError(
            f"{path}: line {first_line + line}: nested deeper than {MAX_DEPTH} lists / objects; "
            "such a line is refused before it is parsed (parsers recurse once per level)"
        )


def _structure(data: bytes | bytearray) -> np.ndarray:
    """The quotes, brackets and newlines of ``data``, those a backslash escapes left out (an
    odd run of backslashes escapes the byte after it)."""
    if b"\\" in data:
        text = bytearray(data)
        raw = np.frombuffer(text, np.uint8)
        slashes = np.flatnonzero(raw == _BACKSLASH)
        breaks = np.flatnonzero(np.diff(slashes) != 1)
        starts = np.concatenate([slashes[:1], slashes[breaks + 1]])
        ends = np.concatenate([slashes[breaks], slashes[-1:]])
        escaped = ends[(ends - starts) % 2 == 0] + 1  # after a run of odd length
        raw[escaped[escaped < len(raw)]] = ord("_")
        data = text
    return np.frombuffer(data.translate(None, _DROP), np.uint8)


def _deep_line(s: np.ndarray) -> int | None:
    """The index of the first line of ``s`` (a block's :func:`_structure`) nested deeper than
    :data:`MAX_DEPTH`, or None.

    Quote parity and depth run on across lines; both are 0 at the end of each valid JSON
    line, so they are exact up to the first line that leaves a string or a bracket open. Such
    a line is not JSON (the parser refuses it); the lines after it are scanned one at a time.
    """
    parity, depth, lines = 0, 0, 0
    for start in range(0, len(s), _PIECE):
        piece = s[start : start + _PIECE]
        inside = np.bitwise_xor.accumulate(piece == _QUOTE) ^ bool(parity)  # in a string
        step = _STEP[piece]
        step[inside] = 0
        level = np.cumsum(step, dtype=np.int32) + depth
        deep = np.flatnonzero(level > MAX_DEPTH)
        newlines = np.flatnonzero(piece == _NEWLINE)
        open_at = newlines[(level[newlines] != 0) | inside[newlines]]
        first_deep = int(deep[0]) if len(deep) else len(piece)
        if len(open_at) and open_at[0] < first_deep:  # a line that is not JSON: go line by line
            done = lines + int(np.searchsorted(newlines, open_at[0])) + 1
            return _deep_line_alone(s[start + int(open_at[0]) + 1 :], done)
        if len(deep):
            return lines + int(np.searchsorted(newlines, first_deep))
        parity, depth = int(inside[-1]), int(level[-1])
        lines += len(newlines)
    return None


def _deep_line_alone(s: np.ndarray, first: int) -> int | None:
    """:func:`_deep_line` for each line of ``s`` alone (numbered from ``first``)."""
    ends = np.flatnonzero(s == _NEWLINE)
    start = 0
    for k, end in enumerate(ends):
        line = s[start : end + 1]
        start = end + 1
        if np.count_nonzero(_STEP[line] == 1) > MAX_DEPTH:
            found = _deep_line(line[:-1])  # one line: nothing after it to go wrong
            if found is not None:
                return first + k
    return None
