"""The HF ``Trainer`` (real, 2 CPU processes under torchrun): a chute dataset as
``train_dataset`` (read with one gather per batch), and ``chute.dataloader`` or a
``chute.Loader`` from ``get_train_dataloader``, read every sample once per epoch, reshuffled,
and resume exactly with ``resume_from_checkpoint`` from a checkpoint 3 steps into an epoch."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import exactly_once, run_two

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

SCRIPT = str(Path(__file__).with_name("_transformers_run.py"))


@pytest.mark.parametrize("kind", ["dataset", "dataloader", "loader"])
def test_each_sample_once_per_epoch_reshuffled(ids_dataset, tmp_path, kind):
    a, b = run_two([SCRIPT, kind, str(ids_dataset), str(tmp_path)], tmp_path)
    for epoch in ("0", "1"):
        exactly_once(a[epoch], b[epoch])
    assert a["0"] != a["1"]
    if kind == "dataset":  # one gather per batch, not one ds[i] per sample
        assert a["gathers"] == b["gathers"] == 2 * 10


@pytest.mark.parametrize("kind", ["dataset", "dataloader", "loader"])
def test_resume_from_checkpoint_mid_epoch(ids_dataset, tmp_path, kind):
    a, b = run_two([SCRIPT, f"{kind}-resume", str(ids_dataset), str(tmp_path)], tmp_path)
    assert len(a["before"]) == len(b["before"]) == 3 * 20
    exactly_once(a["before"] + a["after"], b["before"] + b["after"])
