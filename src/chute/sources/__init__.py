"""Sources to convert from, one kind per module; ``chute.convert`` picks the right one.

``base`` holds the contract (:class:`Source`: batches in sample order) and the machinery
shared by array sources (field picking, length checks, chunk-aligned ranges, read-ahead).
Optional dependencies (h5py, zarr, dask, pyarrow, datasets) are imported only when their
source is used. Tables (Parquet, Arrow IPC, Hugging Face, JSONL, CSV, an in-memory pyarrow
Table) share ``arrow``: their schema comes from the Arrow types; ``webdataset`` reads ``.tar``
shards with ``tarfile``.
"""

from .arrow import ArrowSource
from .base import ArraySource, Source
from .csv import CsvSource
from .hdf5 import HDF5Source
from .hf import HFDatasetSource, HFFolderSource
from .ipc import ArrowFileSource
from .iterable import IterableSource
from .jsonl import JsonlSource
from .npy import MemorySource, NpyFolderSource, NpySource, NpzSource
from .parquet import ParquetSource
from .table import ArrowTableSource
from .torch import TorchSource
from .webdataset import WebDatasetSource
from .zarr import ZarrSource

__all__ = [
    "ArraySource",
    "ArrowFileSource",
    "ArrowSource",
    "ArrowTableSource",
    "CsvSource",
    "HDF5Source",
    "HFDatasetSource",
    "HFFolderSource",
    "IterableSource",
    "JsonlSource",
    "MemorySource",
    "NpyFolderSource",
    "NpySource",
    "NpzSource",
    "ParquetSource",
    "Source",
    "TorchSource",
    "WebDatasetSource",
    "ZarrSource",
]
