"""The contenders of ``chute bench``, one module per family, in table order."""

from __future__ import annotations

from . import hdf5, hf, litdata, mosaic_streaming, native, plain, webdataset, zarr_stores
from .base import Contender, Setup

CONTENDERS: list[Contender] = [
    *plain.CONTENDERS[:1],  # the gather limit first: its checksum is the reference
    *native.CONTENDERS,
    *plain.CONTENDERS[1:],
    *hdf5.CONTENDERS,
    *zarr_stores.CONTENDERS,
    *hf.CONTENDERS,
    *webdataset.CONTENDERS,
    *litdata.CONTENDERS,
    *mosaic_streaming.CONTENDERS,
]

__all__ = ["CONTENDERS", "Contender", "Setup"]
