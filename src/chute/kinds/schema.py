"""The manifest (``chute.json``) schema of the chute format, version 1: a dataset's fields
(each of a kind of :mod:`chute.kinds`) and parts, and its validation. No I/O:
:mod:`chute.manifest_file` reads and writes the file."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import FormatError, SchemaError, UnsafePathError, VersionError
from ..format.spec import (
    CHECKSUM,
    FORMAT_NAME,
    FORMAT_VERSION,
    MAX_SAMPLES,
    PART_NAME,
    ROOT_PART,
    check_field_name,
)
from .registry import Field, field_from_json


@dataclass(frozen=True)
class FileInfo:
    """A data file as recorded in the manifest."""

    nbytes: int
    checksum: str


@dataclass(frozen=True)
class PartInfo:
    """One part: a folder of files holding ``num_samples`` consecutive samples."""

    name: str
    num_samples: int
    files: Mapping[str, FileInfo]


@dataclass(frozen=True)
class Manifest:
    """The parsed, validated content of ``chute.json``."""

    fields: Mapping[str, Field]
    parts: tuple[PartInfo, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def num_samples(self) -> int:
        return sum(p.num_samples for p in self.parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "num_samples": self.num_samples,
            "checksum": CHECKSUM,
            "fields": {n: f.to_json() for n, f in self.fields.items()},
            "parts": [
                {
                    "name": p.name,
                    "num_samples": p.num_samples,
                    "files": {
                        fn: {"bytes": fi.nbytes, CHECKSUM: fi.checksum}
                        for fn, fi in p.files.items()
                    },
                }
                for p in self.parts
            ],
            "metadata": dict(self.metadata),
        }


def parse_manifest(obj: Any) -> Manifest:
    """Validate a decoded ``chute.json``; every problem is a :class:`FormatError`."""
    if not isinstance(obj, dict):
        raise FormatError("manifest must be a JSON object")
    if obj.get("format") != FORMAT_NAME:
        raise FormatError(f"not a chute manifest (format is {obj.get('format')!r})")
    version = obj.get("version")
    if version != FORMAT_VERSION:
        raise VersionError(
            f"format version {version!r} is not supported by this chute (reads version "
            f"{FORMAT_VERSION}); upgrade chute or rewrite the dataset"
        )
    if obj.get("checksum", CHECKSUM) != CHECKSUM:
        raise FormatError(f"unknown checksum algorithm {obj.get('checksum')!r}")
    raw_fields = obj.get("fields")
    if not isinstance(raw_fields, dict) or not raw_fields:
        raise FormatError("manifest 'fields' must be a non-empty object")
    fields: dict[str, Field] = {}
    for name, spec in raw_fields.items():
        try:
            check_field_name(name)
        except SchemaError as exc:
            raise _name_error(name)(str(exc)) from None
        fields[name] = field_from_json(name, spec)
    expected = {fn for n, f in fields.items() for fn in f.files(n).values()}
    raw_parts = obj.get("parts")
    if not isinstance(raw_parts, list):
        raise FormatError("manifest 'parts' must be a list")
    parts = []
    seen: set[str] = set()
    for i, p in enumerate(raw_parts):
        parts.append(_parse_part(i, p, expected, seen))
    if ROOT_PART in seen and parts[0].name != ROOT_PART:
        raise FormatError("the root part '.' may only be the first part")
    _check_distinct_files(parts)
    metadata = obj.get("metadata", {})
    if not isinstance(metadata, dict):
        raise FormatError("manifest 'metadata' must be an object")
    manifest = Manifest(fields, tuple(parts), metadata)
    if obj.get("num_samples") != manifest.num_samples:
        raise FormatError(
            f"num_samples {obj.get('num_samples')!r} disagrees with the parts' total "
            f"{manifest.num_samples}"
        )
    return manifest


def _check_distinct_files(parts: list[PartInfo]) -> None:
    """No two (part, file) entries may be one file, also on a case-insensitive filesystem
    (fields ``X`` and ``x``): one file would serve as two."""
    seen: dict[str, str] = {}
    for part in parts:
        for fn in part.files:
            rel = fn if part.name == ROOT_PART else f"{part.name}/{fn}"
            other = seen.setdefault(rel.lower(), rel)
            if other != rel:
                raise FormatError(
                    f"the files {other!r} and {rel!r} are one file on a case-insensitive "
                    "filesystem: a manifest lists each file once"
                )


def _name_error(name: Any) -> type[FormatError]:
    """UnsafePathError for a refused name that, as a path, would leave the dataset folder."""
    if not isinstance(name, str):
        return FormatError
    absolute = name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name)
    return UnsafePathError if absolute or ".." in re.split(r"[/\\]", name) else FormatError


def _parse_part(i: int, p: Any, expected: set[str], seen: set[str]) -> PartInfo:
    if not isinstance(p, dict):
        raise FormatError(f"part {i}: expected an object")
    name = p.get("name")
    if not isinstance(name, str) or not (name == ROOT_PART or PART_NAME.fullmatch(name)):
        raise _name_error(name)(f"part {i}: bad name {name!r} (expected '.' or 'part-NNNNN')")
    if name in seen:
        raise FormatError(f"part {name!r} is listed twice")
    seen.add(name)
    n = p.get("num_samples")
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_SAMPLES:
        raise FormatError(f"part {name!r}: bad num_samples {n!r}")
    files = p.get("files")
    if not isinstance(files, dict) or set(files) != expected:
        got = sorted(files) if isinstance(files, dict) else files
        raise FormatError(
            f"part {name!r}: files {got} do not match the fields ({sorted(expected)})"
        )
    infos = {}
    for fn, fi in files.items():
        nbytes = fi.get("bytes") if isinstance(fi, dict) else None
        checksum = fi.get(CHECKSUM) if isinstance(fi, dict) else None
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
            raise FormatError(f"part {name!r}, file {fn!r}: bad byte size {nbytes!r}")
        if not isinstance(checksum, str):
            raise FormatError(f"part {name!r}, file {fn!r}: missing {CHECKSUM} checksum")
        infos[fn] = FileInfo(nbytes, checksum)
    return PartInfo(name, n, infos)
