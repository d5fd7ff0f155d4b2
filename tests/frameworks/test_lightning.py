"""Lightning (real, 2 CPU processes, ``Trainer`` defaults: ``use_distributed_sampler=True``):
a ``train_dataloader()`` returning ``chute.dataloader`` or a ``chute.Loader`` reads every sample
once per epoch, reshuffled, with ddp and ddp_spawn, with and without
``reload_dataloaders_every_n_epochs``, and resumes exactly from a mid-epoch checkpoint."""

from __future__ import annotations

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
