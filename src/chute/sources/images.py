"""An ImageFolder tree (``root/CLASS/.../file.jpg``) as a source for ``chute convert``.

``chute convert ROOT DST`` (and ``chute.convert(root, dst)``) detect the torchvision
ImageFolder layout (:func:`chute.sniff.is_image_folder`) and write what
:func:`chute.from_image_folder` writes: fields ``image`` (:class:`chute.fields.Image`), ``label``
(int64), ``path`` (String), the class names, ignored and skipped files in the metadata.
Options: ``max_side``, ``quality``, ``num_workers`` (encoding threads, default one per CPU),
``on_error`` (``"raise"`` or ``"skip"``); the array sources' ``workers`` and
``split_compound`` do not apply and are ignored.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from .. import format as fmt
from ..sniff import NOUNS
from .base import Batch, FieldsArg, Source, field_map
from .image_folder import ImageFolder

__all__ = ["ImageFolderSource"]


class ImageFolderSource(Source):
    """The images of an ImageFolder tree, encoded in threads, in file order."""

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
        batch_size: int = 256,
        **_array_options: Any,  # workers, split_compound: for array sources
    ):
        self.name = str(path)
        self.folder = ImageFolder(path, max_side, quality, num_workers, on_error, progress=False)
        self.batch_size = batch_size
        schema: dict[str, fmt.Field] = {
            "image": fmt.Image(max_side, quality),
            "label": fmt.Tensor((), "int64"),
            "path": fmt.String(),
        }
        self.rename = field_map(fields or list(schema), list(schema), self.name)
        self.schema = {new: schema[old] for old, new in self.rename.items()}
        self.num_samples = len(self.folder)
        # ``skipped`` is filled while converting: the writer's metadata (a shallow copy of
        # this dict, taken before the first batch) refers to this same list.
        self._skipped: list[dict[str, str]] = []
        self.metadata = {
            "classes": self.folder.classes,
            "ignored": self.folder.ignored,
            "skipped": self._skipped,
        }

    def batches(self) -> Iterator[Batch]:
        samples = iter(self.folder)
        while chunk := list(islice(samples, self.batch_size)):
            cols = {
                "image": [s["image"] for s in chunk],
                "label": np.array([s["label"] for s in chunk], np.int64),
                "path": [s["path"] for s in chunk],
            }
            yield {new: cols[old] for old, new in self.rename.items()}
        self._skipped[:] = [{"path": p, "reason": r} for p, r in self.folder.skipped]
