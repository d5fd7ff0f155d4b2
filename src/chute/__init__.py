"""chute: fast, memory-conscious data loading for PyTorch.

A dataset is a folder of plain ``.npy`` files plus a JSON manifest: opened without reading
data (the manifest, and each file's size) with lazy memory maps, gathered in batches with zero
per-sample Python, fed to the GPU with the copy overlapped. See https://github.com/chute-dev/chute#readme.
"""

import warnings
from typing import Any

from . import fields
from .batch import RaggedBatch
from .cache import cache
from .convert import convert, from_iterable, from_torch
from .device import to_device
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
from .fields import Bytes, Mask, Ragged, String
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
from .image.placing import RandomCrop, RandomIoUCrop, ResizePad, ScaleJitter, ZoomOut
from .image.randaugment import RandAugment, TrivialAugmentWide
from .image.scales import MultiScale
from .loader.dataloader import dataloader
from .loader.loader import Loader, LoaderStats
from .order import Order
from .reader.dataset import Dataset
from .reader.images import EncodedImages
from .reader.mix import Mix, mix
from .reader.opening import open as open  # public, not in __all__: see below
from .reader.pack import Pack, pack
from .reader.verify import verify
from .reader.windows import Windows, windows
from .sources.dask import from_dask
from .sources.images import from_image_folder
from .sources.shards import from_shards
from .transfer import download, upload
from .writer.arrays import write
from .writer.writer import Writer

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
    "RandomCrop",
    "RandomErasing",
    "RandomHorizontalFlip",
    "RandomIoUCrop",
    "RandomResizedCrop",
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
    if name in _RENAMED:
        warnings.warn(
            f"chute.{name} is deprecated and will be removed: use chute.fields.{name} (the kinds "
            f"live in chute.fields, clear of torch.Tensor and PIL.Image)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(fields, name)
    raise AttributeError(f"module 'chute' has no attribute {name!r}")
