"""Ray Train (real: ``TorchTrainer`` with 2 CPU workers on a local Ray started and stopped by
the run): ``prepare_data_loader`` keeps a ``chute.dataloader`` as it is (its sampler is a
``DistributedSampler``), and it and a ``chute.Loader`` read every sample once per epoch,
reshuffled by ``loader.sampler.set_epoch``."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import exactly_once, run_two

pytest.importorskip("ray.train")
pytestmark = pytest.mark.slow

SCRIPT = str(Path(__file__).with_name("_ray_run.py"))


@pytest.mark.parametrize("kind", ["dataloader", "loader"])
def test_each_sample_once_per_epoch_reshuffled(ids_dataset, tmp_path, kind):
    a, b = run_two([SCRIPT, kind, str(ids_dataset), str(tmp_path)], tmp_path, torchrun=False)
    for epoch in ("0", "1"):
        exactly_once(a[epoch], b[epoch])
    assert a["0"] != a["1"]
