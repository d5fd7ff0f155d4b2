"""Ray Train (real: ``TorchTrainer`` with 2 CPU workers on a local Ray started and stopped by
the run): ``prepare_data_loader`` keeps a ``chute.dataloader`` as it is (its sampler is a
``DistributedSampler``), and it and a ``chute.Loader`` read every sample once per epoch,
reshuffled by ``loader.sampler.set_epoch``. Both run in one ``TorchTrainer.fit``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import exactly_once, run_scenarios

pytest.importorskip("ray.train")
pytestmark = pytest.mark.slow

SCRIPT = str(Path(__file__).with_name("_ray_run.py"))
KINDS = ["dataloader", "loader"]


@pytest.fixture(scope="module")
def runs(ids_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("ray")
    return run_scenarios(SCRIPT, KINDS, ids_dataset, out, torchrun=False)


@pytest.mark.parametrize("kind", KINDS)
def test_each_sample_once_per_epoch_reshuffled(runs, kind):
    a, b = runs[kind]
    for epoch in ("0", "1"):
        exactly_once(a[epoch], b[epoch])
    assert a["0"] != a["1"]
