"""Lightning (real, 2 CPU processes, ``Trainer`` defaults: ``use_distributed_sampler=True``):
a ``train_dataloader()`` returning ``chute.dataloader`` or a ``chute.Loader`` reads every sample
once per epoch, reshuffled, with ddp and ddp_spawn, with and without
``reload_dataloaders_every_n_epochs``; resumes exactly from a mid-epoch checkpoint, also on
another number of devices; and a loader made before the process group starts is refused.
Scenarios of one strategy share one launch (``_lightning_run.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import exactly_once, run_scenarios

pytest.importorskip("lightning")
pytestmark = pytest.mark.slow

SCRIPT = str(Path(__file__).with_name("_lightning_run.py"))
DDP = ["dataloader", "loader", "dataloader-reload", "loader-reload"]
RESUMED = ["dataloader-resume", "loader-resume"]


@pytest.fixture(scope="module")
def runs(ids_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("lightning")
    found = run_scenarios(SCRIPT, DDP + RESUMED, ids_dataset, out, torchrun=False)
    found.update(run_scenarios(SCRIPT, ["dataloader-spawn"], ids_dataset, out, torchrun=False))
    found["out"] = out  # type: ignore[assignment]
    return found


@pytest.mark.parametrize("scenario", [*DDP, "dataloader-spawn"])
def test_each_sample_once_per_epoch_reshuffled(runs, scenario):
    a, b = runs[scenario]
    for epoch in ("0", "1"):
        exactly_once(a[epoch], b[epoch])
    assert a["0"] != a["1"]  # a new order in epoch 1, also from a loader built anew


@pytest.mark.parametrize("scenario", RESUMED)
def test_resume_from_a_mid_epoch_checkpoint(runs, scenario):
    a, b = runs[scenario]
    assert len(a["before"]) == len(b["before"]) == 3 * 20
    exactly_once(a["before"] + a["after"], b["before"] + b["after"])
    assert a["0"] != a["before"] + a["after"]


def one_device(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=600, cwd=cwd
    )


def test_resume_on_another_number_of_devices(runs, ids_dataset):
    """A checkpoint taken on 2 devices, resumed on 1: the rest of the epoch, none repeated."""
    out = runs["out"]
    done = one_device(["dataloader-single", str(ids_dataset), str(out)], out)
    assert done.returncode == 0, done.stderr[-4000:]
    single = json.loads((out / "dataloader-single" / "single0.json").read_text())
    a, b = runs["dataloader-resume"]
    exactly_once(a["before"] + b["before"] + single["1"])


@pytest.mark.parametrize("kind", ["dataloader", "loader"])
def test_a_loader_made_before_the_process_group_is_refused(ids_dataset, tmp_path, kind):
    """Made in the module's __init__ (rank 0 of 1 in the launching process), it would give
    every rank the whole epoch: the first pass raises FrameworkError saying where to make it."""
    done = one_device([f"{kind}-early", str(ids_dataset), str(tmp_path)], tmp_path)
    assert done.returncode != 0
    assert "FrameworkError" in done.stderr and "train_dataloader()" in done.stderr
