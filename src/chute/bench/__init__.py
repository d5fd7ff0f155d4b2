"""``chute bench``: settle "memmap vs HDF5 vs Zarr vs chute" on the user's own data and machine.

>>> report = chute.bench.run_bench("train.chute", max_bytes=1e9)
>>> print(chute.bench.table(report))

Every contender reads the same sample of the data, in the same shuffled order, with the same
batch size and worker count; a checksum column proves each read every sample exactly once.
"""

from __future__ import annotations

from .contenders import CONTENDERS, Contender, Setup
from .measure import Result
from .report import BenchReport, plot, table
from .run import run_bench

__all__ = [
    "CONTENDERS",
    "BenchReport",
    "Contender",
    "Result",
    "Setup",
    "plot",
    "run_bench",
    "table",
]
