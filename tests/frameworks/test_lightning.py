"""Lightning (real, 2 CPU processes, ``Trainer`` defaults: ``use_distributed_sampler=True``):
a ``train_dataloader()`` returning ``chute.dataloader`` or a ``chute.Loader`` reads every sample
once per epoch, reshuffled, with ddp and ddp_spawn, with and without
``reload_dataloaders_every_n_epochs``, and resumes exactly from a mid-epoch checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import exactly_once, run_two

pytest.importorskip("lightning")
pytestmark = pytest.mark.slow

SCRIPT = str(Path(__file__).with_name("_lightning_run.py"))


@pytest.mark.parametrize(
    "scenario",
    ["dataloader", "loader", "dataloader-reload", "loader-reload", "dataloader-spawn"],
)
def test_each_sample_once_per_epoch_reshuffled(ids_dataset, tmp_path, scenario):
    a, b = run_two([SCRIPT, scenario, str(ids_dataset), str(tmp_path)], tmp_path, torchrun=False)
    for epoch in ("0", "1"):
        exactly_once(a[epoch], b[epoch])
    assert a["0"] != a["1"]  # a new order in epoch 1, also from a loader built anew


@pytest.mark.parametrize("kind", ["dataloader", "loader"])
def test_resume_from_a_mid_epoch_checkpoint(ids_dataset, tmp_path, kind):
    a, b = run_two(
        [SCRIPT, f"{kind}-resume", str(ids_dataset), str(tmp_path)], tmp_path, torchrun=False
    )
    assert len(a["before"]) == len(b["before"]) == 3 * 20
    exactly_once(a["before"] + a["after"], b["before"] + b["after"])
    assert a["0"] != a["before"] + a["after"]


def test_resume_on_another_number_of_devices(ids_dataset, tmp_path):
    """A checkpoint taken on 2 devices, resumed on 1: the rest of the epoch, none repeated."""
    a, b = run_two(
        [SCRIPT, "dataloader-resume", str(ids_dataset), str(tmp_path)], tmp_path, torchrun=False
    )
    done = subprocess.run(
        [sys.executable, SCRIPT, "dataloader-single", str(ids_dataset), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    single = json.loads((tmp_path / "single0.json").read_text())
    exactly_once(a["before"] + b["before"] + single["1"])


@pytest.mark.parametrize("kind", ["dataloader", "loader"])
def test_a_loader_made_before_the_process_group_is_refused(ids_dataset, tmp_path, kind):
    """Made in the module's __init__ (rank 0 of 1 in the launching process), it would give
    every rank the whole epoch: the first pass raises FrameworkError saying where to make it."""
    done = subprocess.run(
        [sys.executable, SCRIPT, f"{kind}-early", str(ids_dataset), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode != 0
    assert "FrameworkError" in done.stderr and "train_dataloader()" in done.stderr
