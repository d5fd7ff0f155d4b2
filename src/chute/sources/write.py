"""Write a :class:`~chute.sources.base.Source` into a new dataset: what every converter ends
with (``chute.convert``, ``chute.from_image_folder``, ...)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..store.url import is_url
from ..writer.writer import Writer
from .base import Source

PathLike = str | os.PathLike


def write_source(
    source: Source,
    dst: PathLike,
    *,
    overwrite: bool = False,
    progress: bool = True,
    metadata: Mapping[str, Any] | None = None,
    part_size: int | None = None,
) -> Path | str:
    """Write every batch of ``source`` into a new dataset at ``dst``, atomically, in parts of
    at most ``part_size`` samples (None: one part, or about 128 MiB parts for a URL).

    The dataset's metadata is the source's own (e.g. HDF5 attributes) updated with
    ``metadata``. If the source fails midway nothing is left at ``dst`` (the writer's staging
    folder is removed) and the error propagates unchanged.
    """
    bar = tqdm(total=source.num_samples, unit=" samples", disable=not progress, desc=Path(dst).name)
    meta = {**source.metadata, **(metadata or {})}
    with (
        source,
        bar,
        Writer(dst, source.schema, overwrite=overwrite, metadata=meta, part_size=part_size) as w,
    ):
        for batch in source.batches():
            w.extend(batch)
            bar.update(len(w) - bar.n)
    return str(dst) if is_url(dst) else Path(dst)  # a URL: the Writer uploaded it
