"""The remote manifest: ``chute.json`` as fetched, and its files as cache entries.

A remote manifest is a local one (:func:`chute.kinds.parse_manifest`) plus, for a dataset
stored compressed, ``"compression": "zstd"`` and per file ``"stored": {"bytes", "xxh3_64"}``
(the zstd object's size and checksum; the file's own ``bytes`` and ``xxh3_64`` are those of
the decompressed ``.npy``). A local reader ignores both keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .. import format as fmt
from .. import kinds
from ..errors import FormatError
from ..manifest_file import parse_manifest_bytes

ZSTD_SUFFIX = ".zst"


@dataclass(frozen=True)
class Entry:
    """A data file of the manifest: its size and checksum, and how it is stored remotely
    (``stored``: size and xxh3_64 of the whole zstd object, None when not compressed)."""

    relpath: str
    nbytes: int
    checksum: str
    stored: tuple[int, str] | None = None

    @property
    def key(self) -> str:
        return self.relpath + ZSTD_SUFFIX if self.stored is not None else self.relpath


def parse_remote_manifest(raw: bytes, where: str) -> tuple[kinds.Manifest, dict[str, Entry]]:
    """Parse a remote ``chute.json``: the manifest, and its files as :class:`Entry` (with
    their stored zstd size and checksum when ``"compression": "zstd"``)."""
    manifest, obj = parse_manifest_bytes(raw, where)
    try:  # the cache writes it back as JSON: strict JSON, no NaN (what chute's writer makes)
        json.dumps(manifest.metadata, allow_nan=False)
    except (ValueError, RecursionError) as exc:
        raise FormatError(
            f"{where}: its 'metadata' is not strict JSON ({type(exc).__name__}: {exc}): NaN "
            "and Infinity, or nesting deeper than Python can encode, are not metadata that "
            "chute writes; write the dataset again with plain JSON metadata"
        ) from None
    compression = obj.get("compression")
    if compression not in (None, "zstd"):
        raise FormatError(f"{where}: unknown compression {compression!r} (this chute reads zstd)")
    entries = {}
    for raw_part, info in zip(obj["parts"], manifest.parts, strict=True):
        for fn, fi in info.files.items():
            rel = fn if info.name == fmt.ROOT_PART else f"{info.name}/{fn}"
            stored = None
            if compression:
                s = raw_part["files"][fn].get("stored")
                if not (
                    isinstance(s, dict)
                    and isinstance(s.get("bytes"), int)
                    and isinstance(s.get(fmt.CHECKSUM), str)
                ):
                    raise FormatError(f"{where}: file {rel!r} has no 'stored' size and checksum")
                stored = (s["bytes"], s[fmt.CHECKSUM])
            entries[rel] = Entry(rel, fi.nbytes, fi.checksum, stored)
    return manifest, entries
