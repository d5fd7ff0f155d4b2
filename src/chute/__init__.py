"""chute: fast, memory-conscious data loading for PyTorch.

A dataset is a folder of plain ``.npy`` files plus a JSON manifest: opened in O(1) with lazy
memory maps, gathered in batches with zero per-sample Python, fed to the GPU with the copy
overlapped. See https://github.com/chute-dev/chute#readme.
"""

# -- exports of the other stages (loader, device, sources, ...) are added below --
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
from .format import Bytes, Image, Ragged, String, Tensor
from .image.normalize import normalize
from .image.ops import CenterCrop, RandomHorizontalFlip, RandomResizedCrop, Resize
from .loader.dataloader import dataloader
from .loader.loader import Loader, LoaderStats
from .order import Order
from .reader.dataset import Dataset
from .reader.images import EncodedImages
from .reader.mix import Mix, mix
from .reader.opening import open
from .reader.verify import verify
from .sources.dask import from_dask
from .sources.image_folder import from_image_folder
from .writer.writer import Writer, write

__version__ = "0.1.0"

__all__ = [
    "ArgumentError",
    "ArgumentValueError",
    "Bytes",
    "CacheError",
    "CenterCrop",
    "ChecksumError",
    "ChuteError",
    "Dataset",
    "DatasetChangedError",
    "DatasetExistsError",
    "DatasetNotFoundError",
    "DescriptorLimitError",
    "EncodedImages",
    "FormatError",
    "Image",
    "Loader",
    "LoaderStats",
    "MissingDependencyError",
    "Mix",
    "NotWritableError",
    "Order",
    "Ragged",
    "RaggedBatch",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "RemoteError",
    "Resize",
    "SampleIndexError",
    "SchemaError",
    "SourceError",
    "StaleIteratorError",
    "String",
    "Tensor",
    "UnsafePathError",
    "VersionError",
    "WorkerError",
    "WriteError",
    "Writer",
    "cache",
    "convert",
    "dataloader",
    "from_dask",
    "from_image_folder",
    "from_iterable",
    "from_torch",
    "mix",
    "normalize",
    "open",
    "to_device",
    "verify",
    "write",
]
