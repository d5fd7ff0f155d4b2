"""The contenders of ``chute bench``, one module per family, in table order."""

from __future__ import annotations

from . import (
    hdf5_files,
    hf_datasets,
    litdata,
    mosaic_streaming,
    native,
    plain,
    webdataset_tars,
    zarr_stores,
)
from .contender import Contender, Setup

CONTENDERS: list[Contender] = [
    *plain.CONTENDERS[:1],  # the gather limit first: its checksum is the reference
    *native.CONTENDERS,
    *plain.CONTENDERS[1:],
    *hdf5_files.CONTENDERS,
    *zarr_stores.CONTENDERS,
    *hf_datasets.CONTENDERS,
    *webdataset_tars.CONTENDERS,
    *litdata.CONTENDERS,
    *mosaic_streaming.CONTENDERS,
]

__all__ = ["CONTENDERS", "Contender", "Setup"]
