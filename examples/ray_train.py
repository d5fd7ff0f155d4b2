"""Ray Train fed from a chute dataset, two ways (see docs/ray.md).

    python examples/ray_train.py --mode ray-data   # chute.ray.read -> Ray Data shards
    python examples/ray_train.py --mode loader     # each worker runs a chute.Loader (exact resume)

Runs on CPU (``use_gpu=False``) with 2 Ray Train workers on a small synthetic dataset written
to a temporary folder (or ``--path`` to an existing one with fields ``x`` float32 (16,) and
``y`` int64). Needs ``pip install 'chute[ray]' 'ray[train]'``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
import ray
import ray.train
import torch
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer, prepare_model

import chute
import chute.ray

BATCH = 64


def make_dataset(path: Path, n: int = 4096) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 16)).astype(np.float32)
    y = (x[:, :4].sum(1) > 0).astype(np.int64)  # something a linear model can learn
    chute.write(path, {"x": x, "y": y}, part_size=1024, overwrite=True)


def step(model, opt, x: torch.Tensor, y: torch.Tensor) -> float:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def train_ray_data(config: dict) -> None:
    """Way 1: Ray Data streams this worker's shard of ``chute.ray.read(path)``."""
    model = prepare_model(torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    shard = ray.train.get_dataset_shard("train")
    for epoch in range(config["epochs"]):
        losses = [
            step(model, opt, b["x"], b["y"])
            for b in shard.iter_torch_batches(batch_size=BATCH, dtypes=None)
        ]
        ray.train.report({"epoch": epoch, "loss": float(np.mean(losses)), "steps": len(losses)})


def train_loader(config: dict) -> None:
    """Way 2: every worker opens the dataset and runs a chute.Loader on its rank's shard; the
    loader's state goes into each checkpoint, so a restarted run resumes at the exact batch."""
    ctx = ray.train.get_context()
    ds = chute.open(config["path"])
    loader = chute.Loader(
        ds,
        batch_size=BATCH,
        shuffle=True,
        seed=0,
        num_workers=1,
        rank=ctx.get_world_rank(),
        world_size=ctx.get_world_size(),
    )
    model = prepare_model(torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    start = 0
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:  # a restart: model, optimizer and the loader's position
        with ckpt.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        loader.load_state_dict(state["loader"])
        start = state["loader"]["epoch"]
    for epoch in range(start, config["epochs"]):
        loader.set_epoch(epoch)
        losses = [step(model, opt, b["x"], b["y"]) for b in loader]
        metrics = {"epoch": epoch, "loss": float(np.mean(losses)), "steps": len(losses)}
        with tempfile.TemporaryDirectory() as d:
            checkpoint = None
            if ctx.get_world_rank() == 0:  # one copy: the state is the same on every rank
                state = {
                    "model": model.state_dict(),
                    "opt": opt.state_dict(),
                    "loader": loader.state_dict(),
                }
                torch.save(state, os.path.join(d, "state.pt"))
                checkpoint = Checkpoint.from_directory(d)
            ray.train.report(metrics, checkpoint=checkpoint)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["ray-data", "loader"], default="loader")
    ap.add_argument("--path", default=None, help="a chute dataset (default: a synthetic one)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()

    ray.init(num_cpus=args.workers + 1, include_dashboard=False, logging_level="ERROR")
    ray.data.DataContext.get_current().enable_progress_bars = False
    tmp = Path(tempfile.mkdtemp(prefix="chute-ray-train-"))
    path = Path(args.path) if args.path else tmp / "train.chute"
    if args.path is None:
        make_dataset(path)
    config = {"path": str(path.absolute()), "epochs": args.epochs}
    common = {
        "scaling_config": ScalingConfig(num_workers=args.workers, use_gpu=False),
        "run_config": RunConfig(storage_path=str(tmp / "runs"), name=args.mode),
    }
    if args.mode == "ray-data":
        trainer = TorchTrainer(
            train_ray_data,
            train_loop_config=config,
            datasets={"train": chute.ray.read(path)},
            **common,
        )
    else:
        trainer = TorchTrainer(train_loader, train_loop_config=config, **common)
    result = trainer.fit()
    print(f"{args.mode}: done, error={result.error}, last checkpoint={result.checkpoint}")
    ray.shutdown()


if __name__ == "__main__":
    main()
