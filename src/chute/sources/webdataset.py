"""WebDataset shards: ``.tar`` files (``.tar.gz`` too) of samples stored as members sharing a key.

``train-000.tar`` holding ``a/0001.jpg``, ``a/0001.cls``, ``a/0001.json``, ``a/0002.jpg``...
gives one sample per key (``a/0001``), one field per extension (what follows the first dot
of the member's base name, as ``webdataset`` splits it), plus ``__key__`` (String). Shards are
a file, a folder of ``.tar`` files (sorted), or a glob / brace pattern
(``train-{000..099}.tar``), local or at a URL (``s3://``, ``gs://``, ``az://``, ``http(s)://``
through :class:`chute.store.Store`; ``storage_options`` as for remote datasets). Each is read
once, as a stream (Python's ``tarfile``, nothing extracted), in bounded memory:
``batch_size`` samples at a time, fewer once their members pass ``batch_bytes`` (a batch holds
at most that plus one sample), each member at most ``max_member_bytes``, members no field
reads never read; a remote shard
is downloaded to a temporary file first, one shard at a time (the first shard twice: once
to find the fields).

Fields, from the extensions of the first sample (``fields=`` picks / renames by extension,
and ``__key__``; a ``.`` in an extension becomes ``_`` in the field name, ``seg.png`` ->
``seg_png``):

* ``jpg``, ``jpeg``, ``png``, ``webp``, ... (image extensions) -> :class:`chute.fields.Image`: a
  JPEG within ``max_side`` is stored byte for byte, others converted (``quality``);
* ``cls``, ``cls2``, ``index``, ``id``, ``label`` -> int64, parsed from the member's text;
* ``txt``, ``text``, ``caption``, ``json``, ``jsonl`` -> String (JSON kept as its text);
* anything else (``npy``, ``pth``, ``pickle``, audio...) -> Bytes: stored, never unpickled or
  parsed.

Hostile shards: members that are not regular files (symlinks, hard links, devices), names
that are absolute, hold ``..`` or start with ``.``, and members without an extension are
ignored and counted in the metadata (``ignored_members``), as are extensions the first sample
did not have (``extra_members``). A sample lacking a field's member, a label that is not an
integer, text that is not UTF-8 and an image that does not decode are
:class:`chute.SourceError` errors naming the shard and the member (or key); with
``on_error="skip"`` the sample is left out and listed in ``skipped``. A member bigger than
``max_member_bytes``, two members with one key and extension, a key that comes again after
other samples (in the same shard or another), two extensions that become one field name
(``seg.txt`` and ``seg_txt``), and a truncated or corrupt shard (no end-of-archive block; a
compressed shard whose stream is cut or fails its checksum) are errors naming the shard and
the member.
"""

from __future__ import annotations

import bz2
import fnmatch
import gzip
import lzma
import os
import re
import tarfile
import tempfile
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO, Any

import numpy as np

from .. import kinds
from ..columns.source_images import SKIP_HINT, check_on_error
from ..errors import ChuteError, DatasetNotFoundError, SourceError
from ..sniff import IMAGE_EXTENSIONS, NOUNS, TAR_SUFFIXES
from ..store.url import is_url
from .base import (
    BATCH_BYTES,
    Batch,
    FieldsArg,
    Source,
    check_name,
    field_map,
    one_field_each,
)
from .paths import expand_braces, expand_paths

MAX_MEMBER_BYTES = 256 << 20  # a bigger member is refused before it is read
BYTES, STRING = kinds.Bytes(), kinds.String()  # compared with each member's field, made once
KEY = "__key__"
INT_EXTENSIONS = ("cls", "cls2", "index", "id", "label")
TEXT_EXTENSIONS = ("txt", "text", "caption", "json", "jsonl")
_COMPRESSED: dict[bytes, Callable[..., Any]] = {  # by magic: modules that check the end
    b"\x1f\x8b": gzip.open,
    b"BZh": bz2.open,
    b"\xfd7zXZ\x00": lzma.open,
}
_KEY_EXT = re.compile(r"^((?:.*/|)[^./][^./]*)\.([^/]*)$")  # webdataset's base_plus_ext

Sample = dict[str, Any]  # extension -> member bytes, plus KEY and "__shard__"


def member_kind(ext: str, max_side: int | None, quality: int) -> kinds.Field:
    """The field kind an extension gets (by its last component, case-insensitive)."""
    last = ext.rsplit(".", 1)[-1].lower()
    if f".{last}" in IMAGE_EXTENSIONS:
        return kinds.Image(max_side, quality)
    if last in INT_EXTENSIONS:
        return kinds.Tensor((), "int64")
    if last in TEXT_EXTENSIONS:
        return kinds.String()
    return kinds.Bytes()


class WebDatasetSource(Source):
    """WebDataset ``.tar`` shards, read once each as a stream, samples in shard order."""

    noun = NOUNS["webdataset"]
    schema: dict[str, kinds.Field]

    def __init__(
        self,
        src: str | Path | Sequence[str | Path],
        fields: FieldsArg = None,
        *,
        on_error: str = "raise",
        max_side: int | None = None,
        quality: int = 90,
        batch_size: int = 256,
        batch_bytes: int = BATCH_BYTES,
        workers: int | None = None,
        max_member_bytes: int = MAX_MEMBER_BYTES,
        storage_options: Mapping[str, Any] | None = None,
    ):
        self._store: Any = None  # the bucket of remote shards
        self.files: Sequence[Path | str]
        if is_url(src):
            self._store, self.files = remote_shards(str(src), storage_options)
        else:
            self.files = expand_paths(src, TAR_SUFFIXES)
        self.name = str(src) if isinstance(src, (str, Path)) else str(self.files[0])
        self.on_error = check_on_error(on_error)
        self.batch_size, self.max_member_bytes = batch_size, max_member_bytes
        self.batch_bytes = batch_bytes
        self.wanted: set[str] | None = None  # the extensions read (None: all, to find fields)
        self.threads = workers if workers is not None else (os.cpu_count() or 1)
        # filled while converting: the writer's metadata refers to these same objects
        self.ignored: Counter[str] = Counter()  # why -> members
        self.extra: Counter[str] = Counter()  # extension -> members
        self.skipped: list[dict[str, str]] = []
        peek = self._samples(self.files[:1])
        first = next(peek, None)
        peek.close()
        if first is None:
            raise SourceError(f"{self.files[0]}: no samples (no regular members with an extension)")
        exts = sorted(k for k in first if not k.startswith("__"))
        names = {e: e.replace(".", "_") for e in exts}
        chosen = names if fields is None else field_map(fields, [*exts, KEY], self.name)
        key_name = chosen.pop(KEY, KEY if fields is None else None)
        self.exts = {e: check_name(new, e, self.name) for e, new in chosen.items()}
        one_field_each(
            ((f"members .{e}", new) for e, new in [*self.exts.items(), (KEY, key_name)] if new),
            self.name,
            "name them apart with fields= (by extension), or leave one out",
        )
        self.wanted = set(self.exts)
        self.schema = {new: member_kind(e, max_side, quality) for e, new in self.exts.items()}
        self.key_name = None if key_name is None else check_name(key_name, KEY, self.name)
        if self.key_name is not None:
            self.schema[self.key_name] = kinds.String()
        self.ignored.clear()  # counted again by the conversion
        self.metadata = {
            "ignored_members": self.ignored,
            "extra_members": self.extra,
            "skipped": self.skipped,
        }

    @contextmanager
    def _local(self, shard: Path | str) -> Iterator[Path]:
        """The shard as a local file: itself, or a remote one downloaded into a temporary
        folder that is removed once the shard is read (one shard on disk at a time)."""
        if isinstance(shard, Path):
            yield shard
            return
        with tempfile.TemporaryDirectory(prefix="chute-shard-") as tmp:
            local = Path(tmp) / "shard"
            name = shard.rpartition("/")[2]
            info = self._store.head(name)  # its size bounds the download
            if info is None:
                raise DatasetNotFoundError(f"{shard}: no such object in the bucket")
            with open(local, "wb+") as f:
                self._store.get_to_file(name, f, size=int(info["size"]))
            yield local

    def _members(self, shard: Path | str) -> Iterator[tuple[str, str, bytes | None]]:
        """``(key, extension, bytes)`` of the regular members of a shard, in order (bytes
        None for an extension no field reads). The shard must end with the end-of-archive
        block and, compressed, with an intact checksum: a cut shard is an error."""
        last, header = "(none)", _header_type()
        try:
            with (
                self._local(shard) as path,
                _unpacked(path) as stream,
                tarfile.open(fileobj=stream, mode="r|", tarinfo=header) as tar,
            ):
                for m in tar:
                    last = m.name
                    why = _ignore(m)
                    match = None if why else _KEY_EXT.match(m.name)
                    if why or match is None:
                        self.ignored[why or "no extension"] += 1
                        continue
                    key, ext = match.groups()
                    if self.wanted is not None and ext not in self.wanted:
                        yield key, ext, None  # not read: only counted
                        continue
                    if m.size > self.max_member_bytes:
                        raise SourceError(
                            f"{shard}: member {m.name} is {m.size} bytes, over the "
                            f"{self.max_member_bytes} allowed (max_member_bytes=)"
                        )
                    f = tar.extractfile(m)
                    yield key, ext, f.read() if f is not None else b""
                if not header.ended:
                    raise SourceError(
                        f"{shard}: cut short after member {last}: no end-of-archive block "
                        "(a truncated copy, or a shard still being written); copy it again"
                    )
                while stream.read(1 << 20):  # to the end: a compressed stream checks itself
                    pass
        except ChuteError:  # a missing remote shard, a member too big: already named
            raise
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise SourceError(
                f"{shard}: not a readable tar shard after member {last} ({exc})"
            ) from None

    def _samples(self, shards: Sequence[Path | str]) -> Generator[Sample, None, None]:
        """Samples: consecutive members sharing a key, grouped; a key seen before (in this
        shard or an earlier one) is an error."""
        seen: dict[str, str] = {}  # key -> its shard
        for shard in shards:
            sample: Sample = {}
            for key, ext, data in self._members(shard):
                if sample and sample[KEY] != key:
                    yield sample
                    sample = {}
                if not sample:
                    if key in seen:
                        raise SourceError(
                            f"{shard}: sample key {key!r} again, after other samples (first in "
                            f"{seen[key]}); a sample's members must be adjacent and keys unique"
                        )
                    seen[key] = str(shard)
                    sample = {KEY: key, "__shard__": str(shard), "__bytes__": 0}
                if ext in sample:
                    raise SourceError(f"{shard}: sample {key!r} has two .{ext} members")
                sample[ext] = data
                sample["__bytes__"] += len(data or b"")
            if sample:
                yield sample

    def _value(self, sample: Sample, ext: str, field: kinds.Field) -> Any:
        """The value of one member for its field; a failure is raised, or returned as a
        :class:`_Reason` with ``on_error="skip"``."""
        shard, key = sample["__shard__"], sample[KEY]
        where = f"{shard}: {key}.{ext}"
        if ext not in sample:
            have = sorted(k for k in sample if not k.startswith("__"))
            return self._fail(f"{shard}: sample {key!r} has no .{ext} member (it has {have})")
        data = sample[ext]
        if field.encodes:
            done = field.encode_source(data, self.on_error, where)
            return _Reason(done) if isinstance(done, str) else done
        if field == BYTES:
            return data
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return self._fail(f"{where}: not UTF-8 text ({exc})")
        if field == STRING:
            return text
        try:
            return int(text.strip())
        except ValueError:
            return self._fail(f"{where}: {text[:40]!r} is not an integer label")

    def _fail(self, reason: str) -> _Reason:
        if self.on_error == "skip":
            return _Reason(reason)
        raise SourceError(f"{reason}; fix the shard, or {SKIP_HINT}")

    def _row(self, sample: Sample) -> dict[str, Any] | _Reason:
        """A sample's values by field, or why it is skipped."""
        row = {}
        for ext, new in self.exts.items():
            value = self._value(sample, ext, self.schema[new])
            if isinstance(value, _Reason):
                return value
            row[new] = value
        return row

    def _chunks(self) -> Iterator[list[Sample]]:
        """Samples in lists of ``batch_size``, or fewer once their bytes reach
        ``batch_bytes``: a batch holds at most that plus one sample's members."""
        chunk: list[Sample] = []
        size = 0
        for s in self._samples(self.files):
            chunk.append(s)
            size += s["__bytes__"]
            if len(chunk) == self.batch_size or size >= self.batch_bytes:
                yield chunk
                chunk, size = [], 0
        if chunk:
            yield chunk

    def batches(self) -> Iterator[Batch]:
        with ThreadPoolExecutor(max(1, self.threads), thread_name_prefix="chute-wds") as pool:
            for chunk in self._chunks():
                for s in chunk:
                    self.extra.update(k for k in s if k[:2] != "__" and k not in self.exts)
                rows = list(pool.map(self._row, chunk))  # in order: the first error is raised
                keep = [i for i, r in enumerate(rows) if not isinstance(r, _Reason)]
                self.skipped.extend(
                    {"key": s[KEY], "shard": s["__shard__"], "reason": str(r)}
                    for s, r in zip(chunk, rows, strict=True)
                    if isinstance(r, _Reason)
                )
                if not keep:
                    continue
                batch: Batch = {new: [rows[i][new] for i in keep] for new in self.exts.values()}  # type: ignore[index]
                for new, f in self.schema.items():
                    if f.fixed:
                        batch[new] = np.array(batch[new], np.int64)
                if self.key_name is not None:
                    batch[self.key_name] = [chunk[i][KEY] for i in keep]
                yield batch


def remote_shards(url: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, list[str]]:
    """(the store of the shards' folder, the shards' URLs) for ``s3://b/train-{000..009}.tar``,
    ``s3://b/train-*.tar`` (listed) or ``s3://b/shards/`` (every ``.tar`` in it, sorted)."""
    from ..store.client import Store

    base, _, name = url.rpartition("/")
    store = Store(base, storage_options)
    names = expand_braces(name) if name else ["*"]
    if any(ch in n for n in names for ch in "*?["):
        listed = sorted(k for k in store.list() if "/" not in k and k.endswith(TAR_SUFFIXES))
        names = [k for n in names for k in listed if fnmatch.fnmatchcase(k, n)]
    if not names:
        raise DatasetNotFoundError(f"{url}: no .tar shard matches")
    return store, [f"{base}/{n}" for n in names]


class _Reason(str):
    """Why a sample is skipped (``on_error="skip"``), as a value in place of the field's."""


@contextmanager
def _unpacked(path: Path) -> Iterator[IO[bytes]]:
    """The shard's tar bytes: the file, or its gzip / bzip2 / xz stream (by its first bytes)
    decompressed by a module that checks the stream's checksum and length at its end and
    raises ``EOFError`` where the stream is cut (tarfile's own ``r|gz`` checks neither)."""
    with open(path, "rb") as raw:
        head = raw.read(6)
        raw.seek(0)
        unpack = next((f for magic, f in _COMPRESSED.items() if head.startswith(magic)), None)
        if unpack is None:
            yield raw
            return
        with unpack(raw, "rb") as stream:
            yield stream


def _header_type() -> Any:
    """A ``TarInfo`` class for one archive that notes whether the last header block read was
    the end-of-archive block (512 zero bytes): tarfile's iteration also ends quietly where the
    file is cut or a header is garbage."""

    class Header(tarfile.TarInfo):
        ended = False

        @classmethod
        def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> Any:
            Header.ended = len(buf) == tarfile.BLOCKSIZE and buf.count(0) == tarfile.BLOCKSIZE
            return super().frombuf(buf, encoding, errors)

    return Header


def _ignore(m: tarfile.TarInfo) -> str | None:
    """Why a tar member is ignored, or None for a regular file with a safe name."""
    if m.isdir():
        return "directory"
    if m.issym() or m.islnk():
        return "link"
    if not m.isfile():
        return "special file"
    parts = PurePosixPath(m.name).parts
    if m.name.startswith("/") or ".." in parts:
        return "unsafe path"
    if parts and parts[-1].startswith("."):
        return "hidden"
    return None
