"""One accelerate run under torchrun (2 CPU processes, gloo), for test_accelerate.py.

    python -m torch.distributed.run --standalone --nproc-per-node=2 _accelerate_run.py \
        SCENARIO DATASET OUT

Each rank writes OUT/rank{r}.json: the sample ids it trained on, per epoch, and len(loader).
Scenarios: ``dataloader`` / ``loader`` (``accelerator.prepare`` of ``chute.dataloader`` / of a
``chute.Loader``, 2 epochs); ``*-resume`` (epoch 1 stopped after 3 steps and saved with
``save_state``, then new objects and ``load_state``; a Loader registered for checkpointing
resumes itself, a prepared ``chute.dataloader`` with ``skip_first_batches``: the ids before the
stop and after the resume, which must make up the uninterrupted epoch); ``loader-skip``
(``skip_first_batches`` of a Loader).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from _launch import each_scenario
from accelerate import Accelerator

import chute

STOP = 3  # steps of epoch 1 before the checkpoint


def make(kind: str, ds: chute.Dataset) -> Any:
    if kind == "dataloader":
        return chute.dataloader(ds, 20, num_workers=1, seed=5)
    return chute.Loader(ds, 20, num_workers=1, seed=5)


def ids(batch: dict[str, Any]) -> list[int]:
    return batch["id"].tolist()


def session(kind: str, ds: chute.Dataset, register: bool) -> tuple[Accelerator, Any]:
    """A new Accelerator with a model and a prepared loader (as a new process would make);
    ``register``: the loader's own state saved and loaded with the Accelerator's."""
    acc = Accelerator(cpu=True)
    _, loader = acc.prepare(torch.nn.Linear(4, 1), make(kind, ds))
    if register:
        acc.register_for_checkpointing(loader)
    return acc, loader


def main(scenario: str, path: str, out: str) -> None:
    kind, _, resume = scenario.partition("-")
    ds = chute.open(path)
    register = kind == "loader" and resume == "resume"
    acc, loader = session(kind, ds, register)
    seen: dict[str, Any] = {"len": len(loader)}
    if not resume:
        for epoch in range(2):
            if kind == "loader":
                loader.set_epoch(epoch)
            seen[str(epoch)] = [i for b in loader for i in ids(b)]
    else:  # resume or skip
        loader.set_epoch(1)
        before = []
        for step, b in enumerate(loader):
            before += ids(b)
            if step + 1 == STOP:
                acc.save_state(str(Path(out) / "ckpt"))
                break
        acc, loader = session(kind, ds, register)
        acc.load_state(str(Path(out) / "ckpt"))
        if register:  # its state came back with load_state
            after = [i for b in loader for i in ids(b)]
        else:  # the stack's own skip
            loader.set_epoch(1)
            after = [i for b in acc.skip_first_batches(loader, STOP) for i in ids(b)]
        _, fresh = session(kind, ds, False)
        fresh.set_epoch(1)
        seen.update(before=before, after=after, whole=[i for b in fresh for i in ids(b)])
    Path(out, f"rank{acc.process_index}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    each_scenario(main)
