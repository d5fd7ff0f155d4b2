"""Sources to convert from, one kind per module; ``chute.convert`` picks the right one.

``base`` holds the contract (:class:`Source`: batches in sample order) and the machinery
shared by array sources (field picking, length checks, chunk-aligned ranges, read-ahead).
Optional dependencies (h5py, zarr, dask) are imported only when their source is used.
"""

from .base import ArraySource, Source
from .hdf5 import HDF5Source
from .iterable import IterableSource
from .npy import MemorySource, NpyFolderSource, NpySource, NpzSource
from .torch import TorchSource
from .zarr import ZarrSource

__all__ = [
    "ArraySource",
    "HDF5Source",
    "IterableSource",
    "MemorySource",
    "NpyFolderSource",
    "NpySource",
    "NpzSource",
    "Source",
    "TorchSource",
    "ZarrSource",
]
