"""Getting data in: ``convert`` any supported source into a chute dataset.

``convert`` looks at what it is given (a path to npy / npz / a folder of npy / HDF5 / Zarr, a
dict of arrays, a torch ``Dataset``, any iterable of samples) and drives the writer batch by
batch with a progress bar: memory stays bounded by a few batches, whatever the source's size.
``from_torch`` and ``from_iterable`` are the same with their options spelled out;
``chute.from_dask`` (``chute.sources.dask``) writes parts in parallel on a Dask cluster.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from torch.utils.data import Dataset, IterableDataset

from . import format as fmt
from .errors import ArgumentError, DatasetNotFoundError, SourceError
from .kinds import Field, image_field
from .sniff import TAR_SUFFIXES
from .sniff import source_kind as sniff_kind
from .sources.base import (
    FieldsArg,
    Source,
    field_map,
)
from .sources.csv import CsvSource
from .sources.hdf5 import HDF5Source, is_hdf5_object
from .sources.hf import HFDatasetSource, HFFolderSource, is_hf_object
from .sources.image_folder_source import ImageFolderSource, dataset_folder
from .sources.ipc import ArrowFileSource
from .sources.iterable import ColumnsSource, IterableSource
from .sources.jsonl import JsonlSource
from .sources.npy import MemorySource, NpyFolderSource, NpySource, NpzSource
from .sources.options import SourceOptions
from .sources.parquet import ParquetSource
from .sources.paths import expand_pattern, has_pattern
from .sources.process_convert import convert_in_processes
from .sources.table import ArrowTableSource, is_arrow_table
from .sources.torch import TorchSource
from .sources.webdataset import WebDatasetSource
from .sources.write import write_source
from .sources.zarr import ZarrSource, is_zarr_object
from .store.url import is_url

if TYPE_CHECKING:
    from typing_extensions import Unpack

PathLike = str | os.PathLike
PATH_SOURCES: dict[str, type[Source]] = {
    "npy": NpySource,
    "npz": NpzSource,
    "npy_folder": NpyFolderSource,
    "hdf5": HDF5Source,
    "zarr": ZarrSource,
    "image_folder": ImageFolderSource,
    "parquet": ParquetSource,
    "arrow": ArrowFileSource,
    "hf": HFFolderSource,
    "jsonl": JsonlSource,
    "csv": CsvSource,
    "webdataset": WebDatasetSource,
}
# kinds whose source reads several files given as a list (a glob or brace pattern)
MULTI_FILE = ("parquet", "arrow", "jsonl", "csv", "webdataset")


def open_source(src: Any, fields: FieldsArg = None, **options: Unpack[SourceOptions]) -> Source:
    """The :class:`~chute.sources.base.Source` for ``src``, detected from its type or path.

    An open h5py File / Group / Dataset or zarr Group / Array is read exactly like its path,
    a ``pyarrow.Table`` / ``RecordBatch`` like a Parquet file.
    ``options`` go to the source (:class:`~chute.sources.options.SourceOptions`):
    ``batch_bytes`` and ``workers`` (reader threads) for arrays, ``split_compound`` for
    HDF5/npy compound dtypes, ``num_workers``, ``batch_size`` and ``names`` for torch datasets
    and iterables.
    """
    given: dict[str, Any] = dict(options)  # each source checks those it takes
    if isinstance(src, Source):
        return src
    if is_url(src):
        if not str(src).endswith(("/", *TAR_SUFFIXES)):
            raise SourceError(
                f"{src}: from a URL chute converts WebDataset .tar shards (a shard, a pattern "
                "like train-{000..009}.tar, or a folder ending in /); download other sources "
                "first"
            )
        return _make(WebDatasetSource, src, fields, given)
    if isinstance(src, (str, os.PathLike)):
        if not Path(src).exists() and has_pattern(str(src)):
            return _pattern_source(str(src), fields, **given)
        return _path_source(Path(src), fields, **given)
    # before Mapping / Iterable: an h5py Group is a Mapping and a zarr Group an Iterable, but
    # both are read like the path they come from (links, strings, attributes, chunks)
    if is_hdf5_object(src):
        return HDF5Source(src, fields, **given)
    if is_zarr_object(src):
        return ZarrSource(src, fields, **given)
    if is_hf_object(src):
        return HFDatasetSource(src, fields, **given)
    if is_arrow_table(src):
        return _make(ArrowTableSource, src, fields, given, f"<pyarrow.{type(src).__name__}>")
    if isinstance(src, Mapping):
        if any(isinstance(v, (list, tuple)) for v in src.values()):
            return ColumnsSource(src, fields, **given)  # typed by the writer, as chute.write
        return MemorySource(src, fields, **given)
    map_style = isinstance(src, Dataset) and not isinstance(src, IterableDataset)
    if map_style and hasattr(src, "__len__"):
        return dataset_folder(src, fields, **given) or TorchSource(src, fields=fields, **given)
    if isinstance(src, Iterable):
        return IterableSource(src, fields=fields, **given)
    raise SourceError(
        f"cannot convert a {type(src).__name__}: pass a path, a dict of arrays, a pyarrow "
        "Table, a torch Dataset or an iterable of samples"
    )


def _path_source(path: Path, fields: FieldsArg, **options: Any) -> Source:
    if not path.exists():
        raise DatasetNotFoundError(f"{path}: source does not exist")
    if (path / fmt.MANIFEST).exists():
        raise SourceError(f"{path} is already a chute dataset; open it with chute.open()")
    try:
        kind = source_kind(path)
        if kind is not None:
            return _make(kind, path, fields, options)
    except PermissionError:
        raise SourceError(f"{path}: not readable (permission denied)") from None
    if path.is_dir():
        raise SourceError(
            f"{path}: a folder holding no source chute reads (Zarr metadata, .npy files, "
            "images, .parquet / .arrow / .jsonl / .csv / .tar files, a datasets save_to_disk "
            "folder)"
        )
    raise SourceError(f"{path}: unknown kind of source; chute converts {KNOWN}")


KNOWN = (
    ".npy, .npz, a folder of .npy, HDF5 (.h5/.hdf5), Zarr (folder or .zip), image folders, "
    "Parquet, Arrow IPC / Feather, JSONL, CSV, WebDataset .tar shards and datasets "
    "save_to_disk folders"
)


def _pattern_source(text: str, fields: FieldsArg, **options: Any) -> Source:
    files = expand_pattern(text)
    kinds = {sniff_kind(f) for f in files}
    kind = kinds.pop() if len(kinds) == 1 else None
    if kind not in MULTI_FILE:
        found = sorted(str(k) for k in {sniff_kind(f) for f in files})
        raise SourceError(
            f"{text}: a pattern must name files of one kind among {', '.join(MULTI_FILE)}; "
            f"it names {found}"
        )
    return _make(PATH_SOURCES[kind], files, fields, options)


def _make(
    cls: type[Source], src: Any, fields: FieldsArg, options: dict[str, Any], name: str = ""
) -> Source:
    """``cls(src, fields, **options)``; an option the source does not take is an
    :class:`~chute.ArgumentError` naming it (and ``src``, or ``name`` when given) and those it
    takes (not a bare ``TypeError``)."""
    taken = _options(cls)
    wrong = sorted(set(options) - taken) if taken is not None else []
    if wrong:
        assert taken is not None
        given = {"self", "src", "path", "name", "arrays", "fields", "arrow_schema"}  # not options
        raise ArgumentError(
            f"{name or src}: option(s) {wrong} do not apply to {cls.noun}; it takes "
            f"{sorted(taken - given)}"
        )
    return cls(src, fields, **options)  # type: ignore[call-arg]


def _options(cls: type) -> set[str] | None:
    """The keyword arguments ``cls(...)`` takes, following ``**options`` handed on to a base
    class; None where they end in ``object``'s (anything is taken)."""
    taken: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        if klass is object:
            return None
        params = inspect.signature(init).parameters.values()
        taken |= {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return taken
    return None


def source_kind(path: Path) -> type[Source] | None:
    """The source class ``convert`` reads the existing ``path`` with; None if it reads none.

    Detection is :func:`chute.sniff.source_kind` (suffix, signature, marker files); the class's
    ``noun`` names it in messages.
    """
    kind = sniff_kind(path)
    return None if kind is None else PATH_SOURCES[kind]


def convert(
    src: Any,
    dst: PathLike,
    fields: FieldsArg = None,
    overwrite: bool = False,
    progress: bool = True,
    *,
    metadata: Mapping[str, Any] | None = None,
    part_size: int | None = None,
    processes: int | None = None,
    **options: Unpack[SourceOptions],
) -> Path | str:
    """Convert ``src`` into a chute dataset at ``dst``; returns ``dst``.

    >>> chute.convert("train.h5", "train.chute", fields={"images": "image", "labels": "label"})

    ``src`` is a path (``.npy``, ``.npz``, a folder of ``.npy``, HDF5, Zarr v2/v3 folder or
    zip, an image folder, Parquet, Arrow IPC / Feather, JSONL, CSV, WebDataset ``.tar``
    shards, a ``datasets`` ``save_to_disk`` folder; several files as a glob or brace pattern:
    see ``docs/convert.md``), a Hugging Face ``datasets.Dataset``, a ``pyarrow.Table`` or
    ``RecordBatch`` (read as a Parquet file is), a dict of arrays (numpy,
    torch, or Dask: see :func:`chute.from_dask`), a map-style torch ``Dataset`` (see
    :func:`from_torch`) or an iterable of samples (see :func:`from_iterable`). From arrays,
    every array whose first axis has the most common length becomes a field (nested groups
    as ``group/name``); ``fields`` picks (a list) or picks and renames (a dict old -> new).
    Arrays are read in their own chunks, a batch of about ``batch_bytes`` (32 MiB) at a time,
    with ``workers`` reader threads (default 1) running ahead of the writer.
    ``split_compound=True`` stores the members of a compound dtype as fields
    ``name/member``. ``processes=N`` converts Parquet, Arrow IPC or WebDataset files in
    ``N`` worker processes, one part each (see :mod:`chute.sources.process_convert`).
    ``part_size``: split the dataset into parts of at most that many samples, as
    :func:`chute.write` does (not with ``processes`` or Dask arrays, whose parts are their
    files and row chunks).
    Other options belong to their source (:class:`~chute.sources.options.SourceOptions` lists
    them, typed: ``workers``, ``batch_bytes``, ``nulls`` for tables, ``on_error``,
    ``max_side``, ``quality`` for images, ...); one a source does not take is an
    :class:`~chute.ArgumentError`. Raises :class:`~chute.DatasetNotFoundError` for a
    missing source, :class:`~chute.SourceError` for one that cannot be mapped to fields,
    :class:`~chute.DatasetExistsError` if ``dst`` exists and ``overwrite`` is false.
    """
    dask = isinstance(src, Mapping) and bool(src) and all(_is_dask(v) for v in src.values())
    if part_size is not None and (dask or processes not in (None, 1)):
        raise ArgumentError(
            f"part_size={part_size!r}: "
            + (
                "Dask arrays are written one part per row chunk: rechunk them"
                if dask
                else "processes= writes one part per file: pass one of the two"
            )
        )
    if dask:
        from .sources.dask import from_dask

        if fields is not None:
            src = {
                new: src[old] for old, new in field_map(fields, list(src), "<dask arrays>").items()
            }
        dask_options = cast(dict[str, Any], options)  # a Dask option is from_dask's
        return from_dask(
            src, dst, overwrite=overwrite, progress=progress, metadata=metadata, **dask_options
        )
    source = open_source(src, fields, **options)
    if processes is None or processes == 1:
        return write_source(
            source,
            dst,
            overwrite=overwrite,
            progress=progress,
            metadata=metadata,
            part_size=part_size,
        )
    source.close()
    if not isinstance(source, (ParquetSource, ArrowFileSource, WebDatasetSource)):
        raise ArgumentError(
            f"processes= converts Parquet, Arrow IPC and WebDataset files, not {source.noun}; "
            "use workers= (threads)"
        )
    return convert_in_processes(
        source,
        dst,
        processes,
        fields,
        options,
        overwrite=overwrite,
        progress=progress,
        metadata=metadata,
    )


def _is_dask(value: Any) -> bool:
    return type(value).__module__.startswith("dask.")


def from_torch(
    dataset: Dataset,
    dst: PathLike,
    *,
    num_workers: int = 2,
    batch_size: int = 64,
    names: Sequence[str] | None = None,
    fields: FieldsArg = None,
    schema: Mapping[str, Field] | None = None,
    overwrite: bool = False,
    progress: bool = True,
    metadata: Mapping[str, Any] | None = None,
    multiprocessing_context: Any = None,
) -> Path | str:
    """Convert a map-style torch ``Dataset``, calling ``__getitem__`` in worker processes.

    >>> images = {"image": chute.fields.Image()}
    >>> chute.from_torch(my_dataset, "d.chute", num_workers=8, schema=images)

    Samples may be dicts, tuples (fields ``"0"``, ``"1"``, ... or ``names``) or single
    tensors. A field whose samples change shape becomes a :class:`chute.Ragged` field.
    ``schema`` may name only some fields (the others are inferred from the first batch): a
    field declared :class:`chute.fields.Image` is encoded in the workers, encoded JPEG bytes kept as
    they are; PIL images in a field not declared so are stored as uint8 pixels, with a warning.
    Sample order is kept.

    A torchvision ``ImageFolder`` / ``DatasetFolder`` without transforms is read from its
    files instead (its ``samples`` order and labels, each JPEG stored byte for byte, no
    decode): fields ``image``, ``label``, ``path`` (``names`` renames the first two), its
    ``classes`` and ``class_to_idx`` in the metadata; ``num_workers`` are then threads.
    """
    declared = dict(schema or {})
    image = image_field(declared.get("image"))
    if fields is None and names is not None:
        folder_fields: FieldsArg = dict(zip(("image", "label"), names, strict=False))
    else:
        folder_fields = fields
    folder = dataset_folder(
        dataset,
        folder_fields,
        num_workers=num_workers,
        max_side=image.max_side if image else None,
        quality=image.quality if image else 90,
    )
    if folder is not None:
        return write_source(folder, dst, overwrite=overwrite, progress=progress, metadata=metadata)
    source = TorchSource(
        dataset,
        num_workers=num_workers,
        batch_size=batch_size,
        names=names,
        fields=fields,
        multiprocessing_context=multiprocessing_context,
        images={k: img for k, f in declared.items() if (img := image_field(f))},
    )
    if declared:
        with source:  # stops the workers if the destination is refused
            source.schema = source.infer_schema(declared)
            return write_source(
                source, dst, overwrite=overwrite, progress=progress, metadata=metadata
            )
    return write_source(source, dst, overwrite=overwrite, progress=progress, metadata=metadata)


def from_iterable(
    iterable: Iterable[Any],
    dst: PathLike,
    schema: Mapping[str, Field] | None = None,
    *,
    names: Sequence[str] | None = None,
    fields: FieldsArg = None,
    batch_size: int = 256,
    overwrite: bool = False,
    progress: bool = True,
    metadata: Mapping[str, Any] | None = None,
) -> Path | str:
    """Convert the samples of any iterable (a generator, an ``IterableDataset``...).

    >>> chute.from_iterable(({"tokens": t, "text": s} for t, s in corpus), "corpus.chute")

    ``schema`` is inferred from the first sample when None. If the iterable raises midway,
    nothing is left at ``dst`` and the exception propagates.
    """
    source = IterableSource(iterable, schema, names=names, fields=fields, batch_size=batch_size)
    return write_source(source, dst, overwrite=overwrite, progress=progress, metadata=metadata)


def parse_fields(text: str | None) -> dict[str, str] | None:
    """``"a,b=c"`` (command line) -> ``{"a": "a", "b": "c"}``; an empty name is an error."""
    if text is None:
        return None
    pairs = [item.partition("=") for item in text.split(",")]
    if any(not old or (eq and not new) for old, eq, new in pairs):
        raise SourceError(
            f"--fields {text!r}: an empty field name; write a,b to pick fields, old=new to rename"
        )
    return {old: new or old for old, _, new in pairs}


def parse_types(text: str | None) -> dict[str, str] | None:
    """``"id=string,x=float32"`` (command line) -> ``{"id": "string", "x": "float32"}``."""
    if text is None:
        return None
    pairs = [item.partition("=") for item in text.split(",")]
    if any(not name or not kind for name, _, kind in pairs):
        raise SourceError(f"--types {text!r}: write column=type, e.g. id=string,score=float32")
    return {name: kind for name, _, kind in pairs}
