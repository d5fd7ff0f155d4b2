"""One Ray Train run (``TorchTrainer``, 2 CPU workers, a local Ray started here), for
test_ray_train.py.

    python _ray_run.py KINDS DATASET OUT

KINDS, comma-separated, ``dataloader`` and/or ``loader``: what the training function builds and
hands to ``ray.train.torch.prepare_data_loader`` (a ``chute.dataloader``) or iterates as it is
(a ``chute.Loader``), 2 epochs with ``loader.sampler.set_epoch(epoch)`` as Ray's guide says,
one kind after the other in one run. Each worker writes OUT/KIND/rank{r}.json: its sample ids
per epoch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import ray
import ray.train
import ray.train.torch
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer


def train(config: dict[str, Any]) -> None:
    import chute

    ds = chute.open(config["path"])
    rank = ray.train.get_context().get_world_rank()
    for kind in config["kinds"]:
        if kind == "dataloader":
            loader = ray.train.torch.prepare_data_loader(chute.dataloader(ds, 20, num_workers=0))
        else:
            loader = chute.Loader(ds, 20, num_workers=1)
        seen = {}
        for epoch in range(2):
            loader.sampler.set_epoch(epoch)
            seen[str(epoch)] = [i for b in loader for i in b["id"].tolist()]
        out = Path(config["out"], kind)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"rank{rank}.json").write_text(json.dumps(seen))


def main(kinds: str, path: str, out: str) -> None:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        TorchTrainer(
            train,
            train_loop_config={"kinds": kinds.split(","), "path": path, "out": out},
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
            run_config=RunConfig(storage_path=str(Path(out, "ray")), name="chute"),
        ).fit()
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:4])
