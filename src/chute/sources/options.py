"""The options :func:`chute.convert` hands to its source, typed, each with the sources that
take it: ``convert(src, dst, workers=4, nulls="skip")`` is checked by a type checker and
completed by an IDE. Each source takes its own; one a source does not take is an
:class:`~chute.ArgumentError` naming the options it does take (``chute/conversion.py``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from .. import kinds

__all__ = ["SourceOptions"]


class SourceOptions(TypedDict, total=False):
    """What ``chute.convert(src, dst, **options)`` passes to the source it opens; an option
    left out is the source's default."""

    workers: int | None
    """Reader threads running ahead of the writer (arrays, tables, image folders, shards)."""
    batch_bytes: int
    """Bytes read per batch, about (arrays, tables, shards; default 32 MiB)."""
    batch_size: int
    """Samples per batch (image folders, WebDataset shards, torch Datasets, iterables)."""
    split_compound: bool
    """Arrays: the members of a compound dtype stored as fields ``name/member``."""
    schema: Mapping[str, kinds.Field] | None
    """Tables, iterables: the fields to write, instead of those inferred."""
    features: Mapping[str, Any] | None
    """Tables: Hugging Face ``Features`` saying which columns hold images or classes."""
    types: Mapping[str, Any] | None
    """JSONL, CSV: column -> type, instead of those inferred (``{"id": "string"}``)."""
    delimiter: str | None
    """CSV: the field separator (default: a tab for ``.tsv``, else a comma)."""
    nulls: str
    """Tables: a null cell is an error (``"error"``, the default) or stored as 0 / NaN / empty
    and counted in the metadata (``"fill"``)."""
    images: Sequence[str] | Mapping[str, kinds.Image]
    """Tables: the columns holding encoded images or image paths; torch Datasets: the
    image fields and how to encode them."""
    image_root: str | os.PathLike[str] | None
    """Tables: the folder image paths are relative to (default: the table's folder)."""
    on_error: str
    """Images, shards: ``"raise"`` (the default) or ``"skip"`` a sample that does not
    decode."""
    max_side: int | None
    """Images: the longest side kept; larger images are downscaled and re-encoded."""
    quality: int
    """Images: the JPEG quality of a re-encoded image (default 90)."""
    allow_empty: bool
    """Image folders: a class folder without an image is kept rather than refused."""
    samples: Sequence[tuple[str, int]] | None
    """Image folders: ``(path, label)`` pairs to read instead of scanning the folder."""
    classes: Sequence[str] | None
    """Image folders: the class names of ``samples``' labels."""
    max_member_bytes: int
    """WebDataset shards: the largest member read (default 256 MiB)."""
    storage_options: Mapping[str, Any] | None
    """WebDataset shards in object storage: credentials and settings for ``chute.store``."""
    names: Sequence[str] | None
    """torch Datasets, iterables: the field names of tuple samples."""
    num_workers: int | None
    """torch Datasets: worker processes calling ``__getitem__``; image folders: encoding
    threads (default: one per CPU)."""
    multiprocessing_context: Any
    """torch Datasets: how the worker processes start (``"spawn"``, ...)."""
    scheduler: Any
    """Dask arrays: the scheduler that writes the parts (default: ``dask.compute``'s)."""
