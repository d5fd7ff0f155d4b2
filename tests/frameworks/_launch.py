"""The entry of the framework scripts (``_*_run.py``), run as 2 processes by conftest.py."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path


def each_scenario(main: Callable[[str, str, str], None]) -> None:
    """A framework script's entry: ``SCENARIOS DATASET OUT``, each scenario of the
    comma-separated list run by ``main(scenario, dataset, OUT/scenario)`` in turn."""
    scenarios, path, out = sys.argv[1:4]
    for scenario in scenarios.split(","):
        Path(out, scenario).mkdir(parents=True, exist_ok=True)
        main(scenario, path, str(Path(out, scenario)))
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():  # both ranks done before either exits:
        dist.barrier()  # a rank exiting while gloo still talks to it aborts the other
        dist.destroy_process_group()
