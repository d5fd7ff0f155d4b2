"""accelerate (real, 2 CPU processes under torchrun): ``accelerator.prepare`` of a
``chute.dataloader`` and of a ``chute.Loader`` reads every sample once per epoch, reshuffled,
and resumes mid-epoch through ``save_state`` / ``load_state`` and ``skip_first_batches``."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import N, exactly_once, run_two

pytest.importorskip("accelerate")
pytestmark = pytest.mark.slow

SCRIPT = str(Path(__file__).with_name("_accelerate_run.py"))


@pytest.mark.parametrize("kind", ["dataloader", "loader"])
def test_prepare_reads_each_sample_once_per_epoch_reshuffled(ids_dataset, tmp_path, kind):
    a, b = run_two([SCRIPT, kind, str(ids_dataset), str(tmp_path)], tmp_path)
    assert a["len"] == b["len"] == N // 40
    for epoch in ("0", "1"):
        exactly_once(a[epoch], b[epoch])
    assert a["0"] != a["1"]  # a new order in epoch 1


@pytest.mark.parametrize("scenario", ["dataloader-resume", "loader-resume", "loader-skip"])
def test_resume_mid_epoch_through_the_stack(ids_dataset, tmp_path, scenario):
    a, b = run_two([SCRIPT, scenario, str(ids_dataset), str(tmp_path)], tmp_path)
    for r in (a, b):
        assert len(r["before"]) == 3 * 20
        assert r["before"] + r["after"] == r["whole"]  # the uninterrupted epoch 1, exactly
    exactly_once(a["whole"], b["whole"])
