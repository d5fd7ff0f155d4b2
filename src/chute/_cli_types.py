"""The argument types of the ``chute`` command line (:mod:`chute.cli`): sizes, counts, JSON
objects, and a check that an output file can be written before a long run."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._args import parse_size
from .errors import ChuteError, NotWritableError


def size(text: str) -> float:
    """An argparse type: a byte count, ``2e9``, ``500MB``, ``2GB``, ``64MiB``..."""
    try:
        return parse_size(text)
    except ChuteError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def count(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer ``>= minimum`` (worker counts, batch sizes)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def json_object(text: str) -> dict[str, Any]:
    """An argparse type: a JSON object (``--storage-options '{"region": "eu-west-1"}'``)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"a JSON object {{...}}, got {text!r}")
    return value


def check_writable(path: str, option: str) -> None:
    """Fail now, not after a benchmark of several minutes, if ``path`` cannot be written."""
    file = Path(path)
    folder = file.parent
    if file.is_dir():
        raise NotWritableError(f"{option} {path}: is a folder; give a file name")
    if not folder.is_dir():
        raise NotWritableError(f"{option} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (file.exists() and not os.access(file, os.W_OK)):
        raise NotWritableError(f"{option} {path}: cannot write there (permission denied)")
