"""accelerate (real, 2 CPU processes under torchrun): ``accelerator.prepare`` of a
``chute.dataloader`` and of a ``chute.Loader`` reads every sample once per epoch, reshuffled,
and resumes mid-epoch through ``save_state`` / ``load_state`` and ``skip_first_batches``.
Every scenario runs in one torchrun launch (``_accelerate_run.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import N, exactly_once, run_scenarios

pytest.importorskip("accelerate")
pytestmark = pytest.mark.slow

SCRIPT = str(Path(__file__).with_name("_accelerate_run.py"))
PREPARED = ["dataloader", "loader"]
RESUMED = ["dataloader-resume", "loader-resume", "loader-skip"]


@pytest.fixture(scope="module")
def runs(ids_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("accelerate")
    return run_scenarios(SCRIPT, PREPARED + RESUMED, ids_dataset, out)


@pytest.mark.parametrize("kind", PREPARED)
def test_prepare_reads_each_sample_once_per_epoch_reshuffled(runs, kind):
    a, b = runs[kind]
    assert a["len"] == b["len"] == N // 40
    for epoch in ("0", "1"):
        exactly_once(a[epoch], b[epoch])
    assert a["0"] != a["1"]  # a new order in epoch 1


@pytest.mark.parametrize("scenario", RESUMED)
def test_resume_mid_epoch_through_the_stack(runs, scenario):
    a, b = runs[scenario]
    for r in (a, b):
        assert len(r["before"]) == 3 * 20
        assert r["before"] + r["after"] == r["whole"]  # the uninterrupted epoch 1, exactly
    exactly_once(a["whole"], b["whole"])
