"""One rank of tests/loader/test_tokens_torchrun.py, started by torchrun: windows, packed rows
and batch_tokens batches (Loader and chute.dataloader) over a shared dataset, a collective
per step; writes what it saw."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist

import chute


def main(data: str, out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ds = chute.open(data)
    seen: dict = {}
    views = {
        "windows": chute.windows(ds, "tokens", 17, document_ids=True),
        "pack": chute.pack(ds, "tokens", 32),
    }
    for name, view in views.items():
        loader = chute.Loader(view, batch_size=3, seed=4, num_workers=2)  # rank, world: dist
        rows = []
        for batch in loader:
            rows += [r.tolist() for r in batch["tokens"]]
            steps: list = [None, None]
            dist.all_gather_object(steps, len(rows))  # lockstep: the same step on both
        seen[name] = rows
    budget = {"batch_size": 16, "batch_tokens": 64, "seed": 4, "num_workers": 1}
    for name, loader in (
        ("batch_tokens", chute.Loader(ds, **budget)),
        ("dataloader", chute.dataloader(ds, **budget, pin_memory=False)),  # worker processes
    ):
        ids = []
        for batch in loader:
            ids += [int(r[0]) // 1000 for r in batch["tokens"] if len(r)]
            dist.barrier()
        seen[name] = {"docs": ids, "steps": len(loader)}
    Path(out, f"rank{rank}.json").write_text(json.dumps(seen))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
