"""Hugging Face ``datasets``: a ``save_to_disk`` folder, or a ``datasets.Dataset`` object.

A ``save_to_disk`` folder is Arrow IPC stream files listed in ``state.json`` plus
``dataset_info.json`` (the features); it is read with pyarrow alone, ``datasets`` need not be
installed. The file names in ``state.json`` must be plain names of regular files in the
folder (no ``..``, no ``/``, no symlink leading out), else :class:`chute.SourceError`. A
``DatasetDict`` folder (``dataset_dict.json``) is refused with its split names: convert one
split folder. A ``datasets.Dataset`` object is read through its public Arrow format
(``with_format("arrow")``, so ``select``/``shuffle`` indices are honoured), one slice of about
``batch_bytes`` at a time.

Fields follow :mod:`chute.sources.arrow`: an ``Image()`` feature becomes a
:class:`chute.fields.Image` field holding the stored bytes, a ``ClassLabel`` an integer field with
its names in the metadata (``class_names``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import SourceError
from ..sniff import HF_DICT_MARKER, NOUNS
from .arrow import ArrowSource, rows_from, rows_per_batch
from .base import FieldsArg
from .ipc import ArrowFileSource

MAX_JSON = 16 << 20  # state.json / dataset_info.json larger than this are not read


def _json(path: Path) -> Any:
    try:
        if path.stat().st_size > MAX_JSON:
            raise SourceError(f"{path}: larger than {MAX_JSON >> 20} MiB; not a datasets file")
        return json.loads(path.read_text("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise SourceError(f"{path}: cannot be read as JSON ({exc})") from None


def data_files(folder: Path) -> list[Path]:
    """The Arrow files of a ``save_to_disk`` folder, from its ``state.json``, checked."""
    if (folder / HF_DICT_MARKER).is_file():
        info = _json(folder / HF_DICT_MARKER)
        splits = info.get("splits") if isinstance(info, dict) else None
        if not isinstance(splits, list):
            raise SourceError(
                f"{folder / HF_DICT_MARKER}: not a DatasetDict's file (no list of splits); "
                "convert a split's folder (one with state.json)"
            )
        raise SourceError(
            f"{folder}: a DatasetDict with splits {splits}; convert one split, e.g. "
            f"{folder / str(splits[0] if splits else 'train')}"
        )
    state = _json(folder / "state.json")
    entries = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(entries, list) or not entries:
        raise SourceError(f"{folder / 'state.json'}: no _data_files listed")
    root = folder.resolve()
    files = []
    for e in entries:
        name = e.get("filename") if isinstance(e, dict) else None
        if not isinstance(name, str) or not name or "/" in name or "\\" in name or name[0] == ".":
            raise SourceError(f"{folder / 'state.json'}: data file {name!r} is not a plain name")
        path = folder / name
        if path.resolve().parent != root or not path.is_file():
            raise SourceError(f"{path}: listed in state.json but not a file in {folder}")
        files.append(path)
    return files


class HFFolderSource(ArrowFileSource):
    """A ``datasets`` ``save_to_disk`` folder of one split."""

    noun = NOUNS["hf"]

    def __init__(self, src: str | Path, fields: FieldsArg = None, **options: Any):
        folder = Path(src)
        info_path = folder / "dataset_info.json"
        info = _json(info_path) if info_path.is_file() else {}
        features = info.get("features") if isinstance(info, dict) else None
        if isinstance(features, dict):
            options.setdefault("features", features)
        super().__init__(data_files(folder), fields, **options)
        self.name = str(folder)


class HFDatasetSource(ArrowSource):
    """A ``datasets.Dataset`` object, sliced through ``with_format("arrow")``."""

    noun = "a Hugging Face Dataset"

    def __init__(self, dataset: Any, fields: FieldsArg = None, **options: Any):
        kind = type(dataset).__name__
        if kind == "DatasetDict":
            raise SourceError(
                f"a DatasetDict with splits {list(dataset)}; convert one split, e.g. "
                f"ds[{next(iter(dataset), 'train')!r}]"
            )
        if kind != "Dataset":
            raise SourceError(
                f"a datasets {kind} is read by iteration: convert it with chute.from_iterable"
            )
        self._table = dataset.with_format("arrow")
        features = dataset.features.to_dict()
        options.setdefault("features", features)
        super().__init__("<datasets.Dataset>", self._table[:0].schema, fields, **options)
        self.num_samples = self._n = len(dataset)
        self._row_bytes = dataset.data.nbytes / max(dataset.data.num_rows, 1)

    def record_batches(self) -> Iterator[tuple[Any, Callable[[int], str]]]:
        step = rows_per_batch(self._row_bytes, self.batch_bytes)
        for first in range(0, self._n, step):
            table = self._table[first : first + step].select(self.top_columns)
            start = first
            for rb in table.combine_chunks().to_batches():
                yield rb, rows_from(self.name, start)
                start += rb.num_rows


def is_hf_object(obj: Any) -> bool:
    """True for a ``datasets`` Dataset / DatasetDict / IterableDataset, without importing it."""
    return type(obj).__module__.split(".", 1)[0] == "datasets"
