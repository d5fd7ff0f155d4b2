"""The files a source names: a file, a folder of files, a list of files, or a glob or brace
pattern (``shard-{000..009}.tar``, ``data/*.parquet``) expanded in order."""

from __future__ import annotations

import glob
import re
from collections.abc import Sequence
from pathlib import Path

from ..errors import DatasetNotFoundError, SourceError

__all__ = ["expand_braces", "expand_paths", "expand_pattern", "has_pattern"]


def expand_paths(src: str | Path | Sequence[str | Path], suffixes: tuple[str, ...]) -> list[Path]:
    """The files of a source given as a file, a folder (its files ending in ``suffixes``,
    sorted) or a list of files."""
    if isinstance(src, (str, Path)):
        path = Path(src)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.name.lower().endswith(suffixes))
            if not files:
                raise SourceError(f"{path}: no {'/'.join(suffixes)} files in this folder")
            return files
        return [path]
    files = [Path(p) for p in src]
    if not files:
        raise SourceError("no files given")
    return files


def has_pattern(text: str) -> bool:
    """Whether ``text`` is a glob (``*``, ``?``, ``[``) or brace (``{000..009}``) pattern."""
    return any(ch in text for ch in "*?[{")


def expand_pattern(text: str) -> list[Path]:
    """The existing files a pattern names, in order: braces expanded in place
    (``shard-{000..002}.tar``, ``{a,b}.parquet``; every name must exist), globs sorted."""
    names = expand_braces(text)
    files: list[Path] = []
    for name in names:
        if any(ch in name for ch in "*?["):
            files.extend(Path(p) for p in sorted(glob.glob(name)))
        elif Path(name).exists():
            files.append(Path(name))
        else:
            raise DatasetNotFoundError(f"{name}: does not exist (from the pattern {text!r})")
    if not files:
        raise DatasetNotFoundError(f"{text}: no file matches this pattern")
    return files


def expand_braces(text: str) -> list[str]:
    """Brace expansion: ``{a,b}`` lists, ``{000..009}`` zero-padded ranges, nested left to
    right."""
    m = re.search(r"\{([^{}]*)\}", text)
    if m is None:
        return [text]
    body = m.group(1)
    r = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if r:
        lo, hi = r.groups()
        width = len(lo) if lo.startswith("0") else 0
        step = 1 if int(hi) >= int(lo) else -1
        items = [str(i).zfill(width) for i in range(int(lo), int(hi) + step, step)]
    else:
        items = body.split(",")
    head, tail = text[: m.start()], text[m.end() :]
    return [out for item in items for out in expand_braces(head + item + tail)]
