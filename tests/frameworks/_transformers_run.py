"""One HF ``Trainer`` run under torchrun (2 CPU processes, gloo), for test_transformers.py.

    python -m torch.distributed.run --standalone --nproc-per-node=2 _transformers_run.py \
        SCENARIO DATASET OUT

SCENARIO is ``KIND[-resume]``: KIND ``dataset`` (``train_dataset=chute.open(...)``),
``dataloader`` or ``loader`` (``get_train_dataloader`` returns ``chute.dataloader(...)`` /
a ``chute.Loader``); ``-resume`` stops 3 steps into epoch 1 with a checkpoint there and trains
again with ``resume_from_checkpoint``. Each rank writes OUT/rank{r}.json: the sample ids of
epochs 0 and 1 (``resume``: epoch 1's ``before`` and ``after``) and how many batches were
read with one ``__getitems__``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from _launch import each_scenario
from transformers import Trainer, TrainingArguments

import chute
from chute.reader.samples import ReadsBatches

STEPS = 10  # per rank and epoch: 400 samples, 2 ranks, batches of 20
GATHERS = [0]


def counted(self: Any, indices: Any) -> Any:
    GATHERS[0] += 1
    return READ(self, indices)


READ = ReadsBatches.__getitems__
ReadsBatches.__getitems__ = counted  # type: ignore[method-assign]


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.seen: list[int] = []

    def forward(self, id: torch.Tensor, x: torch.Tensor, **_: Any) -> dict[str, torch.Tensor]:
        self.seen += id.tolist()
        return {"loss": self.layer(x).mean()}


class ChuteTrainer(Trainer):
    """``get_train_dataloader`` returning a chute loader (``kind``)."""

    kind = "dataloader"

    def get_train_dataloader(self) -> Any:
        assert self.train_dataset is not None
        if self.kind == "dataloader":
            return chute.dataloader(self.train_dataset, 20, num_workers=0, seed=5)
        return chute.Loader(self.train_dataset, 20, num_workers=1, seed=5)


def train(kind: str, path: str, out: str, **kwargs: Any) -> Model:
    args = TrainingArguments(
        output_dir=str(Path(out, "run")),
        per_device_train_batch_size=20,
        num_train_epochs=2,
        use_cpu=True,
        report_to=[],
        logging_strategy="no",
        save_strategy="steps" if "max_steps" in kwargs else "no",
        save_steps=STEPS + 3,
        dataloader_num_workers=0,
        seed=5,
        **{k: v for k, v in kwargs.items() if k == "max_steps"},
    )
    model = Model()
    cls = Trainer if kind == "dataset" else type("T", (ChuteTrainer,), {"kind": kind})
    trainer = cls(model=model, args=args, train_dataset=chute.open(path))
    trainer.train(resume_from_checkpoint=kwargs.get("resume"))
    return model


def main(scenario: str, path: str, out: str) -> None:
    kind, _, resume = scenario.partition("-")
    GATHERS[0] = 0
    if not resume:
        seen = train(kind, path, out).seen
        result: dict[str, Any] = {"0": seen[: STEPS * 20], "1": seen[STEPS * 20 :]}
    else:
        before = train(kind, path, out, max_steps=STEPS + 3).seen
        ckpt = str(Path(out, "run", f"checkpoint-{STEPS + 3}"))
        after = train(kind, path, out, resume=ckpt).seen
        result = {"0": before[: STEPS * 20], "before": before[STEPS * 20 :], "after": after}
    rank = torch.distributed.get_rank()
    Path(out, f"rank{rank}.json").write_text(json.dumps({**result, "gathers": GATHERS[0]}))


if __name__ == "__main__":
    each_scenario(main)
