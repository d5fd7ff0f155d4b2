"""What a benchmark's numbers depend on: the machine, how busy it was, the library versions.
One description for ``chute bench`` and the scripts in ``benchmarks/``."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from typing import Any

import torch

from .._args import usable_cpus


def machine() -> dict[str, Any]:
    """CPUs usable by this process, load average, platform, versions, torch threads, CUDA."""
    cpus = usable_cpus()
    versions: dict[str, str | None] = {}
    for dist in ("chute", "numpy", "torch", "h5py", "zarr"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return {
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cpus": cpus,
        # other work on the machine skews every number: say how busy it was
        "load_avg_1_5_15min": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "versions": versions,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
    }
