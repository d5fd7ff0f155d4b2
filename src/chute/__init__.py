"""chute: fast, memory-conscious data loading for PyTorch.

A dataset is a folder of plain ``.npy`` files plus a JSON manifest: opened without reading
data (the manifest, and each file's size) with lazy memory maps, gathered in batches with zero
per-sample Python, fed to the GPU with the copy overlapped. See https://github.com/chute-dev/chute#readme.
"""

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from .errors import (
    ArgumentError,
    ArgumentValueError,
    CacheError,
    ChecksumError,
    ChuteError,
    DatasetChangedError,
    DatasetExistsError,
    DatasetNotFoundError,
    DescriptorLimitError,
    FormatError,
    FrameworkError,
    MapLimitError,
    MissingDependencyError,
    NotWritableError,
    RemoteError,
    SampleIndexError,
    SchemaError,
    SourceError,
    StaleIteratorError,
    UnsafePathError,
    VersionError,
    WorkerError,
    WriteError,
)

if TYPE_CHECKING:
    from . import fields
    from .batch import RaggedBatch
    from .cached_build import cache
    from .columns.encoded_images import EncodedImages
    from .conversion import convert, from_iterable, from_torch
    from .device import to_device
    from .fields import Bytes, Mask, Ragged, String
    from .image.affine import RandomAffine, RandomRotation
    from .image.augment import (
        BatchTransform,
        ColorJitter,
        CutMix,
        GaussianBlur,
        Grayscale,
        MixUp,
        RandomErasing,
    )
    from .image.boxes import transform_boxes, transform_points
    from .image.follow import Follow, Geometry, View
    from .image.mosaic import Mosaic
    from .image.normalize import normalize
    from .image.ops import CenterCrop, RandomHorizontalFlip, RandomResizedCrop, Resize
    from .image.perspective import RandomPerspective
    from .image.placing import RandomCrop, RandomIoUCrop, ResizePad, ScaleJitter, ZoomOut
    from .image.randaugment import RandAugment, TrivialAugmentWide
    from .image.scales import MultiScale
    from .loader.dataloader import dataloader
    from .loader.loader import Loader, LoaderStats
    from .order import Order
    from .reader.dataset import Dataset
    from .reader.mix import Mix, mix
    from .reader.opening import open as open
    from .reader.pack import Pack, pack
    from .reader.verify import verify
    from .reader.windows import Windows, windows
    from .sources.dask import from_dask
    from .sources.image_folder_source import from_image_folder
    from .sources.shards import from_shards
    from .transfer import download, upload
    from .writer.arrays import write
    from .writer.writer import Writer

# Each public name -> the module defining it, imported on first use (PEP 562), so that
# ``import chute`` is light and ``import chute.format`` (the on-disk spec) loads no torch.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "batch": ("RaggedBatch",),
    "cached_build": ("cache",),
    "columns.encoded_images": ("EncodedImages",),
    "conversion": ("convert", "from_iterable", "from_torch"),
    "device": ("to_device",),
    "fields": ("Bytes", "Mask", "Ragged", "String"),
    "image.augment": (
        "BatchTransform",
        "ColorJitter",
        "CutMix",
        "GaussianBlur",
        "Grayscale",
        "MixUp",
        "RandomErasing",
    ),
    "image.affine": ("RandomAffine", "RandomRotation"),
    "image.boxes": ("transform_boxes", "transform_points"),
    "image.follow": ("Follow", "Geometry", "View"),
    "image.mosaic": ("Mosaic",),
    "image.normalize": ("normalize",),
    "image.perspective": ("RandomPerspective",),
    "image.ops": ("CenterCrop", "RandomHorizontalFlip", "RandomResizedCrop", "Resize"),
    "image.placing": ("RandomCrop", "RandomIoUCrop", "ResizePad", "ScaleJitter", "ZoomOut"),
    "image.randaugment": ("RandAugment", "TrivialAugmentWide"),
    "image.scales": ("MultiScale",),
    "loader.dataloader": ("dataloader",),
    "loader.loader": ("Loader", "LoaderStats"),
    "order": ("Order",),
    "reader.dataset": ("Dataset",),
    "reader.mix": ("Mix", "mix"),
    "reader.opening": ("open",),
    "reader.pack": ("Pack", "pack"),
    "reader.verify": ("verify",),
    "reader.windows": ("Windows", "windows"),
    "sources.dask": ("from_dask",),
    "sources.image_folder_source": ("from_image_folder",),
    "sources.shards": ("from_shards",),
    "transfer": ("download", "upload"),
    "writer.arrays": ("write",),
    "writer.writer": ("Writer",),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

__version__ = "0.1.0"

# ``chute.open`` is public but not in ``__all__``: ``from chute import *`` must not shadow the
# builtin ``open``.
__all__ = [
    "ArgumentError",
    "ArgumentValueError",
    "BatchTransform",
    "Bytes",
    "CacheError",
    "CenterCrop",
    "ChecksumError",
    "ChuteError",
    "ColorJitter",
    "CutMix",
    "Dataset",
    "DatasetChangedError",
    "DatasetExistsError",
    "DatasetNotFoundError",
    "DescriptorLimitError",
    "EncodedImages",
    "Follow",
    "FormatError",
    "FrameworkError",
    "GaussianBlur",
    "Geometry",
    "Grayscale",
    "Loader",
    "LoaderStats",
    "MapLimitError",
    "Mask",
    "MissingDependencyError",
    "Mix",
    "MixUp",
    "Mosaic",
    "MultiScale",
    "NotWritableError",
    "Order",
    "Pack",
    "Ragged",
    "RaggedBatch",
    "RandAugment",
    "RandomAffine",
    "RandomCrop",
    "RandomErasing",
    "RandomHorizontalFlip",
    "RandomIoUCrop",
    "RandomPerspective",
    "RandomResizedCrop",
    "RandomRotation",
    "RemoteError",
    "Resize",
    "ResizePad",
    "SampleIndexError",
    "ScaleJitter",
    "SchemaError",
    "SourceError",
    "StaleIteratorError",
    "String",
    "TrivialAugmentWide",
    "UnsafePathError",
    "VersionError",
    "View",
    "Windows",
    "WorkerError",
    "WriteError",
    "Writer",
    "ZoomOut",
    "cache",
    "convert",
    "dataloader",
    "download",
    "fields",
    "from_dask",
    "from_image_folder",
    "from_iterable",
    "from_shards",
    "from_torch",
    "mix",
    "normalize",
    "pack",
    "to_device",
    "transform_boxes",
    "transform_points",
    "upload",
    "verify",
    "windows",
    "write",
]

# The kinds whose names collide with torch.Tensor and PIL.Image: kept for one release, each
# access warning. chute.fields holds every kind.
_RENAMED = ("Tensor", "Image")


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value  # looked up once
        return value
    if name in _RENAMED:
        warnings.warn(
            f"chute.{name} is deprecated and will be removed: use chute.fields.{name} (the kinds "
            f"live in chute.fields, clear of torch.Tensor and PIL.Image)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(".fields", __name__), name)
    try:  # a sub-module (chute.fields, chute.image...), as after an eager import
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module 'chute' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
