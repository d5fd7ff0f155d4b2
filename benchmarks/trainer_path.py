"""The data path a framework builds over a chute dataset: a torch ``DataLoader`` with its own
sampler and collate (as the HF ``Trainer`` makes for ``train_dataset=``), reading each batch
with one ``__getitems__`` gather against one ``ds[i]`` per sample (what it did before chute
datasets had ``__getitems__``).

    python benchmarks/trainer_path.py [--samples 50000] [--batch 64] [--json PATH]

Two datasets: CIFAR-like (uint8 image + label) and text-like (a string + a label, the
Trainer's usual ``input_ids``-free case is a tokenised ragged field: one Ragged int32 + label).
Each row: samples/s of both, side by side in one run, alternately, best of 5; the ratio
(``__getitems__`` / per sample) is what to compare across machines.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import RESULTS, table, write_json
from transformers import default_data_collator

import chute

REPS = 5


class PerSample(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """``ds`` without ``__getitems__``: torch reads it one ``ds[i]`` at a time."""

    def __init__(self, ds: chute.Dataset) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> Any:
        return self.ds[i]


def collate_ragged(samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Pad-to-longest, as a Trainer's ``DataCollatorWithPadding`` does."""
    ids = torch.nn.utils.rnn.pad_sequence([s["tokens"] for s in samples], batch_first=True)
    return {"tokens": ids, "label": torch.stack([s["label"] for s in samples])}


def rate(ds: Any, batch: int, collate: Any) -> float:
    """Samples/s of one shuffled epoch of a DataLoader the way the Trainer builds it."""
    g = torch.Generator().manual_seed(0)
    sampler = torch.utils.data.RandomSampler(ds, generator=g)
    loader = torch.utils.data.DataLoader(ds, batch, sampler=sampler, collate_fn=collate)
    t0 = time.perf_counter()
    n = sum(len(next(iter(b.values()))) for b in loader)
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--json", type=Path, default=RESULTS / "trainer_path.json")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = args.samples
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cifar = Path(tmp, "cifar.chute")
        chute.write(
            cifar,
            {"image": rng.integers(0, 255, (n, 3, 32, 32), np.uint8), "label": np.arange(n) % 10},
        )
        text = Path(tmp, "text.chute")
        schema = {"tokens": chute.Ragged("int32"), "label": chute.fields.Tensor((), "int64")}
        with chute.Writer(text, schema) as w:
            for i, length in enumerate(rng.lognormal(5, 0.6, n).astype(int) + 1):
                w.append({"tokens": rng.integers(0, 50_000, length, np.int32), "label": i % 2})
        for name, path, collate in (
            ("CIFAR-like", cifar, default_data_collator),
            ("tokens + label", text, collate_ragged),
        ):
            ds = chute.open(path)
            best = {"per sample": 0.0, "__getitems__": 0.0}
            for _ in range(REPS):
                for key, view in (("per sample", PerSample(ds)), ("__getitems__", ds)):
                    best[key] = max(best[key], rate(view, args.batch, collate))
            rows.append(
                {
                    "dataset": name,
                    "per sample/s": round(best["per sample"]),
                    "__getitems__/s": round(best["__getitems__"]),
                    "ratio": round(best["__getitems__"] / best["per sample"], 2),
                }
            )
    columns = [
        ("dataset", "dataset", "s"),
        ("per sample/s", "ds[i] per sample/s", ",.0f"),
        ("__getitems__/s", "__getitems__ samples/s", ",.0f"),
        ("ratio", "ratio", ".2f"),
    ]
    print(table(rows, columns))
    print(f"wrote {write_json(args.json, {'batch': args.batch, 'samples': n, 'rows': rows})}")


if __name__ == "__main__":
    main()
