"""One Lightning run on 2 CPU processes (its own launcher), for test_lightning.py.

    python _lightning_run.py SCENARIOS DATASET OUT

SCENARIOS, comma-separated, run one after the other in one launch, each writing into
OUT/SCENARIO. A scenario is ``KIND[-OPTION]``: KIND ``dataloader`` or ``loader`` (what
``train_dataloader()`` returns), OPTION ``reload`` (``reload_dataloaders_every_n_epochs=1``),
``spawn`` (strategy ``ddp_spawn``), ``resume`` (stop 3 steps into epoch 1, save a checkpoint,
fit again from it), ``single`` (fit again from ``KIND-resume``'s checkpoint on one device:
single0.json) or ``early`` (the loader made in the module's ``__init__``, before the process
group starts: refused). The Trainer keeps its defaults otherwise
(``use_distributed_sampler=True``). Each rank writes rank{r}.json: the sample ids of each
epoch (``resume``: also ``before`` and ``after``).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import lightning as L
import torch
from _launch import each_scenario

import chute

STEPS = 10  # per rank and epoch: 400 samples, 2 ranks, batches of 20


class Model(L.LightningModule):
    def __init__(self, kind: str, path: str) -> None:
        super().__init__()
        self.kind, self.path = kind, path
        self.layer = torch.nn.Linear(4, 1)
        self.seen: dict[int, list[int]] = defaultdict(list)
        self.early = self.make() if kind.endswith("early") else None

    def train_dataloader(self) -> Any:
        return self.make() if self.early is None else self.early

    def make(self) -> Any:
        ds = chute.open(self.path)
        if self.kind.startswith("dataloader"):
            return chute.dataloader(ds, 20, num_workers=0, seed=5)
        return chute.Loader(ds, 20, num_workers=1, seed=5)

    def training_step(self, batch: dict[str, Any], i: int) -> torch.Tensor:
        self.seen[self.current_epoch] += batch["id"].tolist()
        return self.layer(batch["x"]).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def trainer(option: str, **kwargs: Any) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        devices=1 if option == "single" else 2,
        strategy="ddp_spawn" if option == "spawn" else "ddp",
        max_epochs=2,
        reload_dataloaders_every_n_epochs=1 if option == "reload" else 0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )


class Record(L.Callback):
    """Write what each rank saw (with ddp_spawn the module lives in the spawned processes)."""

    def __init__(self, out: str, name: str) -> None:
        self.out, self.name = out, name

    def on_train_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        assert isinstance(module, Model)
        path = Path(self.out, f"{self.name}{trainer.global_rank}.json")
        path.write_text(json.dumps({str(e): ids for e, ids in module.seen.items()}))


class Save(L.Callback):
    """A checkpoint 3 steps into epoch 1, taken during training (as ModelCheckpoint does)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == STEPS + 3:
            trainer.save_checkpoint(self.path)


def wait_for(*paths: Path) -> None:
    """Until the other rank wrote its files (the launching process may end first)."""
    deadline = time.monotonic() + 120  # only against a hang
    while not all(p.exists() for p in paths):
        assert time.monotonic() < deadline, paths
        time.sleep(0.05)


def main(scenario: str, path: str, out: str) -> None:
    kind, _, option = scenario.partition("-")
    if option == "early":
        trainer(option).fit(Model(scenario, path))
        return
    ckpt = str(Path(out, "mid.ckpt"))
    if option == "single":  # from the checkpoint the resume scenario took
        ckpt = str(Path(out).parent / f"{kind}-resume" / "mid.ckpt")
        trainer(option, callbacks=[Record(out, "single")]).fit(Model(kind, path), ckpt_path=ckpt)
        return
    if option != "resume":
        first = trainer(option, callbacks=[Record(out, "rank")])
        first.fit(Model(kind, path))
        wait_for(*(Path(out, f"rank{r}.json") for r in (0, 1)))
        return
    first = trainer(option, max_steps=STEPS + 3, callbacks=[Record(out, "before"), Save(ckpt)])
    first.fit(Model(kind, path))
    trainer(option, callbacks=[Record(out, "after")]).fit(Model(kind, path), ckpt_path=ckpt)
    if first.global_rank != 0:
        return
    wait_for(*(Path(out, f"after{r}.json") for r in (0, 1)))
    for r in (0, 1):
        before = json.loads(Path(out, f"before{r}.json").read_text())
        after = json.loads(Path(out, f"after{r}.json").read_text())
        seen = {"0": before["0"], "before": before["1"], "after": after["1"]}
        Path(out, f"rank{r}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    each_scenario(main)
