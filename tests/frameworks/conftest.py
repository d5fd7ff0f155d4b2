"""Shared by the framework tests: a dataset of sample ids, and a launcher for 2 CPU processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import chute

N = 400  # samples: 20 global steps of 2 x 20, the same count on both ranks


@pytest.fixture(scope="session")
def ids_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``id`` (the sample's index) and a float feature ``x``, in 3 parts."""
    path = tmp_path_factory.mktemp("frameworks") / "ids.chute"
    x = np.random.default_rng(0).random((N, 4), dtype=np.float32)
    chute.write(path, {"id": np.arange(N), "x": x}, part_size=150)
    return path


def run_scenarios(
    script: str, scenarios: list[str], dataset: Path, out: Path, *, torchrun: bool = True
) -> dict[str, list[dict[str, Any]]]:
    """Run ``scenarios`` of ``script`` one after the other in one launch of 2 processes
    (torchrun, or the script's own launcher; the frameworks' start-up paid once):
    ``{scenario: [rank 0's, rank 1's]}``, each read from ``out/SCENARIO/rank{r}.json``."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable]
    if torchrun:
        cmd += ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    args = [script, ",".join(scenarios), str(dataset), str(out)]
    done = subprocess.run(
        [*cmd, *args], capture_output=True, text=True, timeout=600, cwd=out, env=env
    )
    if done.returncode != 0:  # the whole tail, not pytest's shortened repr
        pytest.fail(
            f"{' '.join(args[:2])} exited {done.returncode}\n--- stdout\n{done.stdout[-3000:]}"
            f"\n--- stderr\n{done.stderr[-12000:]}",
            pytrace=False,
        )
    return {
        name: [json.loads((out / name / f"rank{r}.json").read_text()) for r in (0, 1)]
        for name in scenarios
    }


def exactly_once(*ranks: list[int]) -> None:
    """The ranks' ids together are every sample once, and the ranks are disjoint."""
    together = [i for r in ranks for i in r]
    assert sorted(together) == list(range(N)), (len(together), len(set(together)))
