"""The HF ``Trainer`` (real, 2 CPU processes under torchrun): a chute dataset as
``train_dataset`` (read with one gather per batch), and ``chute.dataloader`` or a
``chute.Loader`` from ``get_train_dataloader``, read every sample once per epoch, reshuffled,
and resume exactly with ``resume_from_checkpoint`` from a checkpoint 3 steps into an epoch.
Every scenario runs in one torchrun launch (``_transformers_run.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import exactly_once, run_scenarios

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

SCRIPT = str(Path(__file__).with_name("_transformers_run.py"))
KINDS = ["dataset", "dataloader", "loader"]


@pytest.fixture(scope="module")
def runs(ids_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("transformers")
    scenarios = KINDS + [f"{kind}-resume" for kind in KINDS]
    return run_scenarios(SCRIPT, scenarios, ids_dataset, out)


@pytest.mark.parametrize("kind", KINDS)
def test_each_sample_once_per_epoch_reshuffled(runs, kind):
    a, b = runs[kind]
    for epoch in ("0", "1"):
        exactly_once(a[epoch], b[epoch])
    assert a["0"] != a["1"]
    if kind == "dataset":  # one gather per batch, not one ds[i] per sample
        assert a["gathers"] == b["gathers"] == 2 * 10


@pytest.mark.parametrize("kind", KINDS)
def test_resume_from_checkpoint_mid_epoch(runs, kind):
    a, b = runs[f"{kind}-resume"]
    assert len(a["before"]) == len(b["before"]) == 3 * 20
    exactly_once(a["before"] + a["after"], b["before"] + b["after"])
