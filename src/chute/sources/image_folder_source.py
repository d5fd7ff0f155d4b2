"""An ImageFolder tree (``root/CLASS/.../file.jpg``) or a flat folder of images as a source.

``chute convert ROOT DST`` (and ``chute.convert(root, dst)``) detect the torchvision
ImageFolder layout and flat folders of images (:func:`chute.sniff.image_layout`) and write
what :func:`chute.from_image_folder` writes: fields ``image`` (:class:`chute.fields.Image`),
``label`` (int64; none in a flat folder), ``path`` (String), the class names, ignored and
skipped files in the metadata. Options: ``max_side``, ``quality``, ``num_workers`` (encoding
threads; ``workers`` is taken when it is not given; default one per CPU), ``on_error``
(``"raise"`` or ``"skip"``), ``allow_empty`` (keep class folders without images).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from .. import kinds
from ..sniff import NOUNS
from .base import Batch, FieldsArg, Source, field_map
from .image_folder import ImageFolder
from .write import write_source

__all__ = ["ImageFolderSource", "from_image_folder"]


class ImageFolderSource(Source):
    """The images of an ImageFolder tree, encoded in threads, in torchvision's order."""

    noun = NOUNS["image_folder"]

    def __init__(
        self,
        path: Path,
        fields: FieldsArg = None,
        *,
        max_side: int | None = None,
        quality: int = 90,
        num_workers: int | None = None,
        on_error: str = "raise",
        allow_empty: bool = False,
        batch_size: int = 256,
        workers: int | None = None,
        samples: Sequence[tuple[str, int]] | None = None,
        classes: Sequence[str] | None = None,
    ):
        self.name = str(path)
        threads = workers if num_workers is None else num_workers
        self.folder = ImageFolder(
            path,
            max_side,
            quality,
            threads,
            on_error,
            progress=False,
            allow_empty=allow_empty,
            samples=samples,
            classes=classes,
        )
        self.batch_size = batch_size
        schema: dict[str, kinds.Field] = {"image": kinds.Image(max_side, quality)}
        if self.folder.classes:
            schema["label"] = kinds.Tensor((), "int64")
        schema["path"] = kinds.String()
        self.rename = field_map(fields or list(schema), list(schema), self.name)
        self.schema = {new: schema[old] for old, new in self.rename.items()}
        self.num_samples = len(self.folder)
        # ``skipped`` is filled while converting: the writer's metadata (a shallow copy of
        # this dict, taken before the first batch) refers to this same list.
        self._skipped: list[dict[str, str]] = []
        self.metadata = {
            "classes": self.folder.classes,
            "class_to_idx": self.folder.class_to_idx,
            "ignored": self.folder.ignored,
            "skipped": self._skipped,
        }

    def batches(self) -> Iterator[Batch]:
        samples = iter(self.folder)
        while chunk := list(islice(samples, self.batch_size)):
            cols: dict[str, Any] = {"image": [s["image"] for s in chunk]}
            if self.folder.classes:
                cols["label"] = np.array([s["label"] for s in chunk], np.int64)
            cols["path"] = [s["path"] for s in chunk]
            yield {new: cols[old] for old, new in self.rename.items()}
        self._skipped[:] = [{"path": p, "reason": r} for p, r in self.folder.skipped]


def dataset_folder(dataset: Any, fields: FieldsArg = None, **options: Any) -> Source | None:
    """A torchvision ``DatasetFolder`` / ``ImageFolder`` (``root``, ``samples``, ``classes``,
    no ``transform`` or ``target_transform``) read from its files, the JPEG bytes kept and
    encoded in threads, its own sample order and labels: an :class:`ImageFolderSource`.
    None for any other dataset (it is read through ``__getitem__``)."""
    attrs = ("root", "samples", "classes", "class_to_idx", "loader")
    if not all(hasattr(dataset, a) for a in attrs):
        return None
    if getattr(dataset, "transform", None) or getattr(dataset, "target_transform", None):
        return None  # the stored samples must be what the dataset returns
    samples = dataset.samples
    if not all(isinstance(s, tuple) and len(s) == 2 for s in samples):
        return None
    options = {k: v for k, v in options.items() if k in _FOLDER_OPTIONS}
    return ImageFolderSource(
        Path(dataset.root), fields, samples=samples, classes=list(dataset.classes), **options
    )


_FOLDER_OPTIONS = ("max_side", "quality", "num_workers", "on_error", "batch_size", "workers")


def from_image_folder(
    root: str | os.PathLike,
    dst: str | os.PathLike,
    max_side: int | None = None,
    quality: int = 90,
    num_workers: int | None = None,
    on_error: str = "raise",
    *,
    allow_empty: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    batch_size: int = 256,
) -> Path:
    """Convert an ImageFolder tree (``root/CLASS/.../file.jpg``) to a chute dataset at ``dst``.

    Fields: ``image`` (:class:`chute.fields.Image`: JPEGs within ``max_side`` kept byte for byte,
    others converted to RGB, shrunk to ``max_side`` and encoded at ``quality``, see
    :func:`chute.image.encode_image`), ``label`` (int64, the class's position in the sorted
    class folders; torchvision's ``targets``), ``path`` (the file's path relative to ``root``).
    Samples come in torchvision's order (see :class:`ImageFolder`). A flat folder of images
    gives ``image`` and ``path`` only. Encoded in ``num_workers`` threads (default: one per
    CPU). Metadata: ``classes`` (label -> class name), ``class_to_idx``, ``skipped`` (files
    left out with ``on_error="skip"``, with the reason), ``ignored`` (hidden entries and files
    that are not images by extension). A file that fails to decode raises
    :class:`chute.SourceError` naming it (``on_error="raise"``); nothing is left at ``dst``.
    """
    source = ImageFolderSource(
        Path(root),
        max_side=max_side,
        quality=quality,
        num_workers=num_workers,
        on_error=on_error,
        allow_empty=allow_empty,
        batch_size=batch_size,
    )
    return Path(write_source(source, dst, overwrite=overwrite, progress=progress))
