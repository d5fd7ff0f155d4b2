"""chute through torch DataLoader worker processes (``chute.dataloader``), side by side with
what it must keep up with, in one run:

- raw arrays (CIFAR-like: uint8 3x32x32 + an int64 label, shuffled): ``chute.dataloader(ds,
  256, num_workers=2)`` against the thread ``chute.Loader`` with as many threads
  (:func:`measure_dataloader_ratio`, which ``benchmarks/regress.py`` can import);
- per-sample Python (short documents in a String field, tokenized per sample):
  ``chute.dataloader(..., sample_transform=tokenize)`` against a plain torch ``DataLoader``
  over a Python list of the same documents doing the same (:func:`measure_per_sample_ratio`).

Each prints samples/s and the ratio, and all go to one JSON file. ``--epochs N`` adds time and
peak PSS per epoch over several epochs with persistent workers (:func:`run_dataloader_procs`).

    python benchmarks/dataloader_procs.py [--samples 50000] [--docs 20000] [--workers 2]
        [--seconds 1.5] [--rounds 3] [--epochs 0] [--json benchmarks/results/dataloader_procs.json]

(run from anywhere: ``_common`` is found next to this file, as for the other benchmarks).

Peak PSS is that of this process and all its children (the workers), sampled every 20 ms, above
what the tree used before the loader was made; PSS splits pages shared between processes (the
page cache of the mapped files), so it does not count them once per worker. Flat per-epoch
peaks mean the workers' memory does not grow with the epochs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import EPOCH_COLUMNS, RESULTS, TreeMemory, peak_pss, table, write_json

import chute
from chute.loader.dataloader import dataloader

MB = 1e6

NAME = "chute.dataloader (worker processes, batched __getitems__)"


def run_dataloader_procs(
    path: str | Path,
    batch_size: int,
    num_workers: int,
    epochs: int = 3,
    seed: int = 0,
    multiprocessing_context: str | None = None,
) -> dict[str, Any]:
    """Iterate the chute dataset at ``path`` for ``epochs`` epochs through ``chute.dataloader``
    (persistent workers); per epoch: seconds, samples/s, MB/s, peak PSS and anonymous PSS (MB)."""
    ds = chute.open(path)
    row_bytes = ds.nbytes / max(1, len(ds))
    before = TreeMemory().sample()
    dl = dataloader(
        ds,
        batch_size,
        seed=seed,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        multiprocessing_context=multiprocessing_context,
    )
    rows = []
    for epoch in range(epochs):
        dl.set_epoch(epoch)
        with peak_pss() as mem:
            t0 = time.perf_counter()
            samples = 0
            for batch in dl:
                samples += len(next(iter(batch.values())))
            seconds = time.perf_counter() - t0
        rows.append(
            {
                "epoch": epoch,
                "seconds": seconds,
                "samples_per_s": samples / seconds,
                "mb_per_s": samples * row_bytes / seconds / MB,
                "peak_pss_mb": (mem.peak - before[0]) / MB,
                "peak_anon_mb": (mem.peak_anon - before[1]) / MB,
            }
        )
    del dl
    return {
        "name": NAME,
        "dataset_mb": ds.nbytes / MB,
        "batch_size": batch_size,
        "workers": num_workers,
        "context": multiprocessing_context or "default",
        "epochs": rows,
    }


def _rates(makes: dict[str, Any], seconds: float, rounds: int) -> dict[str, float]:
    """Samples/s of each iterable ``makes[name]()`` returns (made once, then re-iterated,
    epochs, for ``seconds`` after one warm-up batch: the workers start), best of ``rounds``.
    The contenders take turns round by round, so that a change in the machine's load (other
    jobs) reaches all of them alike."""
    loaders = {}
    for name, make in makes.items():
        loaders[name] = make()
        next(iter(loaders[name]))
    best = dict.fromkeys(makes, 0.0)
    for _ in range(rounds):
        for name, loader in loaders.items():
            samples = 0
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                for batch in loader:
                    samples += _batch_len(batch)
                    if time.perf_counter() - t0 >= seconds:
                        break
            best[name] = max(best[name], samples / (time.perf_counter() - t0))
    return best


def _batch_len(batch: Any) -> int:
    first = next(iter(batch.values()))
    return len(first)


def measure_dataloader_ratio(
    ds_or_path: Any,
    batch_size: int = 256,
    workers: int = 2,
    seconds: float = 1.5,
    rounds: int = 3,
    multiprocessing_context: str | None = None,
) -> dict[str, Any]:
    """Samples/s of ``chute.dataloader(ds, batch_size, num_workers=workers)`` (persistent
    workers, shuffled) and of the thread ``chute.Loader`` with as many threads, on the same
    dataset (a chute Dataset or its path) in this run, and their ratio ``dataloader / Loader``
    (the figure that must not fall). Each runs for ``seconds`` a round, taking turns, best of
    ``rounds``."""
    ds = chute.open(ds_or_path) if isinstance(ds_or_path, (str, Path)) else ds_or_path
    got = _rates(
        {
            "loader": lambda: chute.Loader(ds, batch_size, num_workers=workers),
            "procs": lambda: dataloader(
                ds,
                batch_size,
                num_workers=workers,
                persistent_workers=True,
                multiprocessing_context=multiprocessing_context,
            ),
        },
        seconds,
        rounds,
    )
    loader, procs = got["loader"], got["procs"]
    return {
        "what": "raw arrays",
        "samples": len(ds),
        "batch_size": batch_size,
        "workers": workers,
        "baseline": f"chute.Loader, {workers} threads",
        "baseline_per_s": loader,
        "chute_per_s": procs,
        "ratio": procs / loader,
    }


SEQ = 32  # tokens per document after tokenizing (truncated or padded)


def tokenize(sample: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A per-sample tokenizer as a language-model user writes one: words to ids, fixed length.
    Module level: spawned workers import it."""
    ids = [zlib.crc32(w.encode()) % 32_000 for w in sample["text"].split()][:SEQ]
    ids += [0] * (SEQ - len(ids))
    return {"ids": torch.tensor(ids), "length": min(SEQ, len(sample["text"].split()))}


class _Docs(torch.utils.data.Dataset):
    """The plain contender: a Python list of documents, one ``{"text": str}`` per item."""

    def __init__(self, docs: list[str]) -> None:
        self.docs = docs

    def __len__(self) -> int:
        return len(self.docs)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return tokenize({"text": self.docs[i]})


def documents(n: int, seed: int = 0) -> list[str]:
    """``n`` short documents (8-40 words of 2-9 letters)."""
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", np.uint8)
    return [
        " ".join(
            bytes(rng.choice(letters, rng.integers(2, 10))).decode()
            for _ in range(rng.integers(8, 41))
        )
        for _ in range(n)
    ]


def measure_per_sample_ratio(
    docs: list[str],
    path: Path,
    batch_size: int = 64,
    workers: int = 2,
    seconds: float = 1.5,
    rounds: int = 3,
    shuffle: bool = True,
) -> dict[str, Any]:
    """Documents/s of ``chute.dataloader(ds, batch_size, sample_transform=tokenize)`` over a
    chute dataset of ``docs`` (a String field, written at ``path``) and of a plain torch
    ``DataLoader`` over the Python list doing the same tokenizing, same workers, batch size and
    shuffling (both with persistent workers), and their ratio ``chute / plain``. Unshuffled,
    the rate leaves out what computing the shuffled order costs chute's main process."""
    if not path.exists():
        chute.write(path, {"text": docs})
    ds = chute.open(path)

    def plain() -> Iterable[Any]:
        return torch.utils.data.DataLoader(
            _Docs(docs), batch_size, shuffle=shuffle, num_workers=workers, persistent_workers=True
        )

    def ours() -> Iterable[Any]:
        return dataloader(
            ds,
            batch_size,
            shuffle=shuffle,
            num_workers=workers,
            sample_transform=tokenize,
            persistent_workers=True,
            pin_memory=False,
        )

    got = _rates({"plain": plain, "ours": ours}, seconds, rounds)
    plain_rate, ours_rate = got["plain"], got["ours"]
    return {
        "what": "per-sample tokenize" + ("" if shuffle else ", in order"),
        "samples": len(docs),
        "batch_size": batch_size,
        "workers": workers,
        "baseline": "torch DataLoader over a list",
        "baseline_per_s": plain_rate,
        "chute_per_s": ours_rate,
        "ratio": ours_rate / plain_rate,
    }


RATIO_COLUMNS = [
    ("what", "workload", "s"),
    ("samples", "samples", ",d"),
    ("batch_size", "batch", "d"),
    ("workers", "workers", "d"),
    ("baseline", "baseline", "s"),
    ("baseline_per_s", "baseline/s", ",.0f"),
    ("chute_per_s", "chute.dataloader/s", ",.0f"),
    ("ratio", "ratio", ".2f"),
]


def cifar_like(path: Path, n: int, seed: int = 0) -> Path:
    """``n`` CIFAR-like samples: uint8 (3, 32, 32) images and int64 labels."""
    rng = np.random.default_rng(seed)
    with chute.Writer(path) as w:
        for start in range(0, n, 10_000):
            k = min(10_000, n - start)
            w.extend(
                {
                    "image": rng.integers(0, 256, (k, 3, 32, 32), dtype=np.uint8),
                    "label": rng.integers(0, 10, k),
                }
            )
    return path


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=50_000, help="CIFAR-like samples")
    ap.add_argument("--batch-size", type=int, default=256, help="of the raw-array workload")
    ap.add_argument("--docs", type=int, default=20_000, help="documents to tokenize")
    ap.add_argument("--doc-batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=1.5, help="per contender and round")
    ap.add_argument("--rounds", type=int, default=3, help="best of (the contenders alternate)")
    ap.add_argument("--epochs", type=int, default=0, help="also time and PSS per epoch")
    ap.add_argument("--context", choices=["fork", "spawn", "forkserver"], default=None)
    ap.add_argument("--json", type=Path, default=RESULTS / "dataloader_procs.json")
    args = ap.parse_args(argv)
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = cifar_like(Path(tmp) / "cifar.chute", args.samples)
        docs = documents(args.docs)
        rows = [
            measure_dataloader_ratio(
                path, args.batch_size, args.workers, args.seconds, args.rounds, args.context
            ),
            *(
                measure_per_sample_ratio(
                    docs,
                    Path(tmp) / "docs.chute",
                    args.doc_batch_size,
                    args.workers,
                    args.seconds,
                    args.rounds,
                    shuffle,
                )
                for shuffle in (True, False)
            ),
        ]
        result["ratios"] = rows
        print(table(rows, RATIO_COLUMNS))
        if args.epochs:
            epochs = run_dataloader_procs(
                path,
                args.batch_size,
                args.workers,
                args.epochs,
                multiprocessing_context=args.context,
            )
            result["epochs"] = epochs
            print(f"{epochs['name']}: {epochs['workers']} workers ({epochs['context']})")
            print(table(epochs["epochs"], EPOCH_COLUMNS))
    print(f"wrote {write_json(args.json, result)}")
    return result


if __name__ == "__main__":
    main()
