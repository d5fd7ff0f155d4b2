"""The speed guard: the ratios that must not fall, measured side by side in one process.

    python benchmarks/regress.py [--rounds 3] [--max-rounds 7] [--quick] [--skip images]
        [--json benchmarks/results/regress.json]

Each row is a ratio of two things measured in the same round (or a cost against its budget),
so a busy machine slows both sides alike. Rounds are interleaved; a row whose median is under
its floor gets more rounds (up to ``--max-rounds``). Verdicts: ``ok`` (the median meets the
floor), ``noise`` (the median misses it but the best round meets it: within the run-to-run
noise of a shared machine), ``FAIL`` (no round met it). Exits 1 when a row FAILs. Never a unit
test: run it before resolving anything that touches a hot path, and keep its table in
docs/benchmarks.md.

Rows (batch 256, hot page cache; each side's first epoch untimed, so that what is compared
is the steady state of a training run):

* ``Loader k threads / bare loop``: ``chute.Loader(ds, 256, shuffle=..., num_workers=k)`` over
  ``for idx in chute.Order(...).batches(): ds.gather(idx)`` (one thread, the same order), on
  CIFAR-like samples (uint8 3x32x32 + int64 label) shuffled and not, ImageNet-like samples
  (uint8 3x224x224 + label) and ragged token documents (int32, lognormal lengths, mean ~600
  tokens: a language-model corpus);
* ``token windows: Loader dtype=int64 / .long() in the step``: uint16 token windows
  (``chute.windows(..., length=1025)``, batches of 64) cast to int64 by ``chute.Loader(...,
  dtype={"ids": torch.int64}, num_workers=2)`` over the same Loader handing out uint16 and the
  consumer calling ``.long()`` with torch's default intra-op threads (the threads' fight of
  docs/tuning.md);
* ``order us / batch``: the shuffled Order's plan per batch of 256 at n = 10**6 and 10**9
  (``benchmarks/order.py``; this thread's CPU time, so that the machine's load does not
  count), against a budget of 5 us;
* ``ds[i] / numpy memmap``: ``ds[i]`` of a 2-field sample (numeric: CIFAR-like; string,
  bytes or ragged int32, each with an int64 label) over the same sample read with plain numpy
  from ``np.load(mmap_mode="r")`` maps of the same files (copied out; for a variable-size
  field its two offsets, then its values), the same 20k random indices;
* ``dataloader / Loader``: ``chute.dataloader(ds, 256, num_workers=2,
  persistent_workers=True)`` (processes) over the thread Loader with 2 threads, CIFAR-like,
  shuffled (``benchmarks/dataloader_procs.py``'s ``measure_dataloader_ratio``): the workers
  make their own shares of the order and lend the batches through shared memory
  (``chute/loader/streams.py``), no message per batch;
* ``per-sample dataloader / DataLoader``: ``chute.dataloader(..., sample_transform=tokenize)``
  over a plain torch ``DataLoader`` of a Python list doing the same per-sample tokenizing,
  20k short documents, 2 workers each (``measure_per_sample_ratio`` there);
* ``images Loader / bare decode``: ``chute.Loader(decode={"image": [RandomResizedCrop(160),
  RandomHorizontalFlip()]})`` over the bare decode + crop + resize loop of
  ``benchmarks/images.py``, 2 threads each, on ``--images`` photos (needs simplejpeg and
  scikit-image; skipped with the reason otherwise);
* ``windows eos / flat``: ``chute.Loader(chute.windows(ds, length=1025, eos=EOT))`` over the
  same Loader of plain windows, batches of 64 windows, 1 thread, on the token documents
  (nanoGPT's EOT-separated stream against the plain one; compiled with numba, so skipped with
  the reason when numba is not installed: numpy's fallback is about half as fast);
* ``... % of decode``: the heaviest batch augmentations (a full ``ColorJitter``,
  ``GaussianBlur(9)``, ``RandAugment(2, 9)``) on a decoded batch of 256 photos against the
  decode itself (``benchmarks/augment_cost.py``), one thread each, against a budget of 20%.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import RESULTS, table, write_json
from dataloader_procs import documents, measure_dataloader_ratio, measure_per_sample_ratio

import chute

BS = 256
CAST_BS = 64  # windows of 1025 tokens: a batch torch's intra-op threads split
COLUMNS = [
    ("row", "row", "s"),
    ("median", "median", ".3g"),
    ("best", "best", ".3g"),
    ("limit", "limit", "s"),
    ("rounds", "rounds", "d"),
    ("verdict", "verdict", "s"),
]


@dataclass
class Row:
    """One guarded figure: ``measure()`` gives one round's value; ``floor`` (higher is better)
    or ``ceiling`` (a cost: lower is better)."""

    name: str
    measure: Callable[[], float]
    floor: float | None = None
    ceiling: float | None = None
    values: list[float] = field(default_factory=list)

    def median(self) -> float:
        return statistics.median(self.values)

    def best(self) -> float:
        return max(self.values) if self.floor is not None else min(self.values)

    def meets(self, value: float) -> bool:
        if self.floor is not None:
            return value >= self.floor
        assert self.ceiling is not None
        return value <= self.ceiling

    def verdict(self) -> str:
        if self.meets(self.median()):
            return "ok"
        return "noise" if self.meets(self.best()) else "FAIL"

    def report(self) -> dict[str, Any]:
        limit = f">= {self.floor}" if self.floor is not None else f"<= {self.ceiling}"
        return {
            "row": self.name,
            "median": self.median(),
            "best": self.best(),
            "limit": limit,
            "rounds": len(self.values),
            "verdict": self.verdict(),
            "values": self.values,
        }


# ------------------------------------------------------------------ what is timed


def rate(run: Callable[[int], Iterable[Any]], samples: int, epoch_size: int) -> float:
    """Samples/s of ``run(epoch)`` (an iterable of batches) in the steady state: one epoch
    untimed (threads, workers and buffers started), then whole epochs until ``samples``."""
    for _ in run(0):
        pass
    epochs = max(1, math.ceil(samples / epoch_size))
    t = time.perf_counter()
    for e in range(1, epochs + 1):
        for _ in run(e):
            pass
    return epochs * epoch_size / (time.perf_counter() - t)


def bare_loop(ds: Any, shuffle: bool) -> Callable[[int], Iterable[Any]]:
    def run(epoch: int) -> Iterable[Any]:
        order = chute.Order(len(ds), BS, shuffle=shuffle, seed=0)
        order.set_epoch(epoch)
        return (ds.gather(idx) for idx in order.batches())

    return run


def loader_epochs(loader: Any) -> Callable[[int], Iterable[Any]]:
    def run(epoch: int) -> Iterable[Any]:
        loader.set_epoch(epoch)
        return loader

    return run


def ratio(
    top: Callable[[int], Iterable[Any]],
    bottom: Callable[[int], Iterable[Any]],
    samples: int,
    n: int,
) -> Callable[[], float]:
    """One round: ``top``'s rate over ``bottom``'s, measured one after the other."""
    return lambda: rate(top, samples, n) / rate(bottom, samples, n)


# ------------------------------------------------------------------ the data


def cifar_like(folder: Path, n: int) -> chute.Dataset:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (n, 3, 32, 32), dtype=np.uint8)
    chute.write(folder / "cifar", {"image": x, "label": rng.integers(0, 10, n)})
    return chute.open(folder / "cifar")


def imagenet_like(folder: Path, n: int) -> chute.Dataset:
    rng = np.random.default_rng(1)
    with chute.Writer(folder / "imagenet") as w:
        for a in range(0, n, 256):
            b = min(n, a + 256)
            w.extend(
                {
                    "image": rng.integers(0, 255, (b - a, 3, 224, 224), dtype=np.uint8),
                    "label": rng.integers(0, 1000, b - a),
                }
            )
    return chute.open(folder / "imagenet")


def token_docs(folder: Path, n: int, dtype: str = "int32") -> chute.Dataset:
    rng = np.random.default_rng(2)
    lengths = np.minimum(rng.lognormal(5.9, 1.0, n).astype(np.int64) + 1, 8192)  # mean ~600
    path = folder / f"tokens-{dtype}"
    with chute.Writer(path, schema={"ids": chute.Ragged(dtype)}) as w:
        for k in lengths.tolist():
            w.append({"ids": rng.integers(0, 50_000, k, dtype=np.int32).astype(dtype)})
    return chute.open(path)


# ------------------------------------------------------------------ the rows


def loader_rows(
    name: str, ds: Any, shuffle: bool, samples: int, floors: tuple[float, float] = (0.85, 1.4)
) -> list[Row]:
    """Loader with 1 and 2 threads over the bare loop; ``floors``: the two rows' floors."""
    bare = bare_loop(ds, shuffle)
    rows = []
    for threads, floor in zip((1, 2), floors, strict=True):
        loader = chute.Loader(ds, BS, shuffle=shuffle, seed=0, num_workers=threads)
        rows.append(
            Row(
                f"{name}: Loader {threads} thread{'s' * (threads > 1)} / bare loop",
                ratio(loader_epochs(loader), bare, samples, len(ds)),
                floor=floor,
            )
        )
    return rows


def cast_row(docs: chute.Dataset) -> Row:
    """uint16 token windows as int64: ``dtype=`` in the Loader over ``.long()`` in the
    consumer, torch's default intra-op threads there (docs/tuning.md)."""
    w = chute.windows(docs, "ids", length=1025)
    in_step = chute.Loader(w, CAST_BS, seed=0, num_workers=2)
    cast = chute.Loader(w, CAST_BS, seed=0, num_workers=2, dtype={"ids": torch.int64})

    def long_in_step(epoch: int) -> Iterable[Any]:
        in_step.set_epoch(epoch)
        return (b["ids"].long() for b in in_step)

    # On the 2-core box (load average 3.3) the step's .long() (65,600 tokens: torch splits it
    # over its threads) fell to 10-460 M tokens/s while the loader's threads ran, dtype= gave
    # 310-620 M: 5 rounds 11.6, 0.58, 49.6, 49.0, 49.6 (the 0.58 a round without the
    # collapse; docs/tuning.md). On a quiet box (load 0.5-1.2) there is no collapse and
    # dtype= (int64 batches: 4x the bytes to gather and hand over) measured 0.80 median, 1.0
    # best: the floor keeps dtype= within 2x of the cast in the step where nothing competes.
    return Row(
        "token windows: Loader dtype=int64 / .long() in the step, 2 threads",
        ratio(loader_epochs(cast), long_in_step, len(w), len(w)),
        floor=0.5,
    )


def order_row(n: int) -> Row:
    def run() -> float:
        order = chute.Order(n, BS, seed=0)
        batches = 4000
        t = time.thread_time()
        handed = order.batches()
        plan = order.plan()
        for j, _ in zip(range(batches), handed, strict=False):
            plan[j]
        return (time.thread_time() - t) / batches * 1e6

    return Row(f"order us / batch, n={n:.0e} (CPU)", run, ceiling=5.0)


def two_fields(folder: Path, n: int) -> dict[str, chute.Dataset]:
    """2-field datasets whose ``ds[i]`` is timed: a string, bytes or ragged field, and a
    label (the numeric one is CIFAR-like, made apart)."""
    rng = np.random.default_rng(3)
    label = chute.fields.Tensor((), "int64")
    sizes = rng.integers(1, 400, n).tolist()
    fields: dict[str, tuple[Any, Any]] = {
        "string": (
            [f"doc {i} " * (k // 6 + 1) for i, k in enumerate(sizes)],
            chute.fields.String(),
        ),
        "bytes": ([bytes(rng.integers(0, 255, k, np.uint8)) for k in sizes], chute.fields.Bytes()),
        "ragged": (
            [rng.integers(0, 50_000, k, np.int32) for k in sizes],
            chute.fields.Ragged("int32"),
        ),
    }
    out = {}
    for kind, (values, f) in fields.items():
        data = {"x": values, "label": rng.integers(0, 10, n)}
        chute.write(folder / kind, data, schema={"x": f, "label": label})
        out[kind] = chute.open(folder / kind)
    return out


def numpy_reader(ds: chute.Dataset) -> Callable[[int], list[Any]]:
    """Sample ``i`` of one-part dataset ``ds`` read with plain numpy from ``np.load`` maps of
    its files, copied out as ``ds[i]`` copies: the floor a ``ds[i]`` is measured against."""
    (part,) = ds.parts
    maps = {
        name: {
            r: np.load(part.folder / fn, mmap_mode="r").view(np.ndarray)
            for r, fn in f.files(name).items()
        }
        for name, f in ds.schema.items()
    }
    fixed = [m["data"] for m in maps.values() if "data" in m]
    var = [(m["values"], m["offsets"]) for m in maps.values() if "values" in m]
    text = any(isinstance(f, chute.fields.String) for f in ds.schema.values())

    def read(i: int) -> list[Any]:
        got: list[Any] = [np.array(data[i]) for data in fixed]
        for values, offsets in var:
            a, b = offsets[i : i + 2].tolist()
            got.append(values[a:b].tobytes().decode() if text else np.array(values[a:b]))
        return got

    return read


def getitem_row(kind: str, ds: chute.Dataset, ceiling: float) -> Row:
    read = numpy_reader(ds)

    def run() -> float:
        idx = np.random.default_rng(0).integers(0, len(ds), 20_000).tolist()
        took = []
        for get in (ds.__getitem__, read):
            t = time.perf_counter()
            for i in idx:
                get(i)
            took.append(time.perf_counter() - t)
        return took[0] / took[1]

    return Row(f"ds[i] / numpy memmap, 2 fields: {kind}", run, ceiling=ceiling)


def dataloader_row(ds: chute.Dataset) -> Row:
    def run() -> float:
        return float(measure_dataloader_ratio(ds, BS, workers=2, rounds=1)["ratio"])

    # No message per batch (chute/loader/streams.py): medians 0.74-0.87 on a 2-core box at
    # load 1.6-3.1 (single rounds 0.48-1.29); the floor is the target, 0.6 (docs/benchmarks.md).
    return Row("dataloader 2 procs / Loader 2 threads", run, floor=0.6)


def per_sample_row(folder: Path, n: int) -> Row:
    docs = documents(n)

    def run() -> float:
        return float(measure_per_sample_ratio(docs, folder / "text.chute", rounds=1)["ratio"])

    return Row("per-sample dataloader / DataLoader", run, floor=1.2)


def windows_eos_row(ds: chute.Dataset) -> Row | str:
    """The eos windows row, or why it is skipped."""
    try:
        import numba  # noqa: F401
    except ImportError as exc:
        return f"windows eos row skipped: {exc} (pip install 'chute[image]')"
    batch = 64
    plain = chute.windows(ds, "ids", 1025)
    eos = chute.windows(ds, "ids", 1025, eos=50256)
    top, bottom = (
        loader_epochs(chute.Loader(w, batch, seed=0, num_workers=1)) for w in (eos, plain)
    )

    def run() -> float:  # samples/s each over its own epoch (eos adds a token a document)
        return rate(top, 10 * len(eos), len(eos)) / rate(bottom, 10 * len(plain), len(plain))

    # the target of docs/tokens.md; a run on 2 shared cores (load average 1.8-2.0) gave a
    # median of 0.78 (best 0.81) over 5 rounds, the documents here being short (~4 eos a window)
    return Row("windows eos / flat, Loader 1 thread", run, floor=0.7)


def images_row(folder: Path, n: int) -> Row | str:
    """The images row, or why it is skipped."""
    try:
        import simplejpeg  # noqa: F401
        from _photos import photo_folder
        from images import run_bare
    except ImportError as exc:
        return f"images row skipped: {exc} (pip install 'chute[image]' scikit-image)"
    root = photo_folder(folder / "photos", n)
    path = chute.from_image_folder(root, folder / "photos.chute", progress=False)
    ds = chute.open(path)
    enc = ds.gather(np.arange(len(ds)))["image"]
    data = [bytes(memoryview(x.numpy())) for x in enc.tolist()]
    hw = enc.sizes.numpy().astype(np.int64)
    ops = [chute.RandomResizedCrop(160), chute.RandomHorizontalFlip()]
    loader = chute.Loader(ds, BS, num_workers=2, decode={"image": ops})
    top, bare = loader_epochs(loader), lambda e: run_bare(data, hw, 160, 2)
    return Row("images Loader / bare decode, 2 threads", ratio(top, bare, n, n), floor=0.85)


def augment_rows() -> list[Row] | str:
    """The augmentation cost rows, or why they are skipped."""
    try:
        import simplejpeg  # noqa: F401
        from augment_cost import Batch
    except ImportError as exc:
        return f"augmentation rows skipped: {exc} (pip install 'chute[image]' scikit-image)"
    batch = Batch(BS, 160)
    ops = {
        "ColorJitter(.4, .4, .4, .1)": chute.ColorJitter(0.4, 0.4, 0.4, 0.1),
        "GaussianBlur(9)": chute.GaussianBlur(9),
        "RandAugment(2, 9)": chute.RandAugment(2, 9),
    }
    return [
        Row(f"{name} % of decode", lambda op=op: batch.cost_pct(op, 3), ceiling=20)
        for name, op in ops.items()
    ]


# ------------------------------------------------------------------ the run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-rounds", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="a quarter of the data: a smoke run")
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--skip", nargs="*", default=[], help="row name fragments to leave out")
    ap.add_argument("--json", type=Path, default=RESULTS / "regress.json")
    args = ap.parse_args()
    scale = 0.25 if args.quick else 1.0
    load = [os.getloadavg()[0]]
    notes = []
    with tempfile.TemporaryDirectory(prefix="chute-regress-") as tmp:
        folder = Path(tmp)
        n_small, n_large, n_docs = (int(scale * k) for k in (200_000, 3_000, 30_000))
        cifar = cifar_like(folder, n_small)
        tokens = token_docs(folder, n_docs)
        rows = [
            *loader_rows("CIFAR-like shuffled", cifar, True, 2 * n_small),
            # in order the bare loop copies contiguous rows: a second thread adds less
            *loader_rows("CIFAR-like in order", cifar, False, 2 * n_small, (0.85, 1.0)),
            *loader_rows("ImageNet-like shuffled", imagenet_like(folder, n_large), True, n_large),
            # ten epochs a side (an epoch is ~25 ms: two were within a shared box's time slices)
            *loader_rows("token docs shuffled", tokens, True, 10 * n_docs, (0.9, 1.3)),
            cast_row(token_docs(folder, n_docs, "uint16")),
            order_row(10**6),
            order_row(10**9),
            getitem_row("numeric", cifar, 2.5),
            *(
                getitem_row(kind, ds, 3.0 if kind == "string" else 3.5)
                for kind, ds in two_fields(folder, n_small // 10).items()
            ),
            dataloader_row(cifar),
            per_sample_row(folder, int(scale * 20_000)),
        ]
        extras = (
            windows_eos_row(tokens),
            images_row(folder, max(BS, int(scale * args.images))),
            augment_rows(),
        )
        for extra in extras:
            if isinstance(extra, str):
                notes.append(extra)
            else:
                rows.extend(extra if isinstance(extra, list) else [extra])
        rows = [r for r in rows if not any(s in r.name for s in args.skip)]
        for k in range(args.max_rounds):
            todo = [r for r in rows if k < args.rounds or r.verdict() != "ok"]
            if not todo:
                break
            for r in todo:
                r.values.append(r.measure())
                print(f"round {k + 1}: {r.name}: {r.values[-1]:.3g}", file=sys.stderr, flush=True)
            load.append(os.getloadavg()[0])
    report = [r.report() for r in rows]
    print(table(report, COLUMNS))
    for note in notes:
        print(note)
    cores = os.cpu_count()
    print(f"load average during the run: {min(load):.1f}-{max(load):.1f} ({cores} cores)")
    print(f"wrote {write_json(args.json, {'rows': report, 'load': load, 'notes': notes})}")
    sys.exit(1 if any(r["verdict"] == "FAIL" for r in report) else 0)


if __name__ == "__main__":
    main()
