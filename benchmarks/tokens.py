"""Language-model data: token windows vs nanoGPT's ``get_batch`` (and LitData's TokensLoader
when it is installed), and the padding of packing vs pad-to-longest vs batch_tokens.

    python benchmarks/tokens.py [--tokens 20_000_000] [--batches 1000] [--batch 12 64]
        [--litdata /path/to/venv/bin/python]

One corpus, made here: documents of lognormal length (capped at 41 k tokens), uint16 token
ids, written once as a chute dataset (a Ragged field, one document a sample) and once as
nanoGPT's flat ``train.bin``. Side by side in one run, each reader for ``--batches`` batches
of ``B x 1024`` tokens after its first, ``B`` 12 (nanoGPT's OpenWebText setting) and 64, on
warm files:

* ``nanoGPT get_batch``: its function as written (a fresh ``np.memmap`` each call, random
  offsets, ``torch.stack`` of int64 copies for ``x`` and ``y``).
* ``LitData TokensLoader``: ``StreamingDataset`` + ``TokensLoader(block_size)`` over the
  stream written by its ``optimize``, in a ``StreamingDataLoader``, in a child process of
  ``--litdata PYTHON`` (an environment that has litdata; default this interpreter); skipped
  (with the reason in the table) when ``litdata`` is not importable there.
* ``chute windows``: ``chute.windows(length=1025)`` in a ``chute.Loader`` with 1 and 2
  threads, ``x, y = w[:, :-1], w[:, 1:]``, uint16 as stored; the ``+ int64`` rows hand the
  tokens out as int64, as nanoGPT does (``windows(dtype="int64")``: cast while copying); the
  ``in order`` row reads without shuffling, which shows what the order's per-batch index
  computation costs.
* ``chute windows eos``: the same with ``eos=50256`` after every document (nanoGPT's
  EOT-separated stream), right after the plain rows of the same batch and threads;
  ``x flat`` is its tokens/s over theirs (compiled with numba when it is installed, else
  numpy's boolean placement: see ``chute/reader/window_fill.py``).

Reported: tokens/s after the first batch (LitData over a tenth of the batches: it is slow
here), the first batch's seconds, the peak PSS of the process tree above the baseline, each
reader's ratio to nanoGPT's, and chute's open time. Then, on the same
documents, batches of about 16 k tokens: ``pad-to-longest`` (``Loader(batch_size=16,
pad=0)``), ``batch_tokens`` (``Loader(batch_size=512, batch_tokens=16384, pad=0)``) and
``chute.pack(length=4096)`` rows (``batch_size=4``): document tokens/s and the share of
padding. Prints tables and writes JSON (``--json``, default benchmarks/results/tokens.json).
Never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import RESULTS, child_json, peak_pss, table, write_json

import chute

BLOCK = 1024
MAX_DOC = 41_000
PAD = 65535  # the packed rows' padding; document tokens are < 50257 (GPT-2's vocabulary)
EOT = 50256  # GPT-2's <|endoftext|>: nanoGPT's separator between documents


def make_corpus(folder: Path, tokens: int, seed: int = 0) -> tuple[Path, Path, np.ndarray]:
    """(chute dataset, nanoGPT train.bin, document lengths) of about ``tokens`` tokens."""
    rng = np.random.default_rng(seed)
    lengths = np.minimum(rng.lognormal(5.5, 1.3, tokens // 300).astype(np.int64), MAX_DOC)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), tokens)) + 1]
    stream = rng.integers(0, 50257, int(lengths.sum()), dtype=np.uint16)
    bin_path = folder / "train.bin"
    stream.tofile(bin_path)
    ds_path = folder / "corpus.chute"
    if not ds_path.exists():
        ends = np.cumsum(lengths)
        with chute.Writer(ds_path, {"tokens": chute.Ragged("uint16")}) as w:
            for a in range(0, len(lengths), 4096):
                b = min(a + 4096, len(lengths))
                starts = ends[a:b] - lengths[a:b]
                w.extend(
                    {
                        "tokens": [
                            stream[s : s + n] for s, n in zip(starts, lengths[a:b], strict=True)
                        ]
                    }
                )
    return ds_path, bin_path, lengths


def measure(name: str, batches: Iterator[Any], count: int, tokens_of: Callable) -> dict:
    """Tokens/s over ``count`` batches of ``batches`` after the first (steady state), the
    first batch's seconds (start-up included), and the peak PSS of the process tree."""
    with peak_pss(interval=0.05) as mem:
        t0 = time.perf_counter()
        tokens_of(next(batches))
        first = time.perf_counter() - t0
        tokens = 0
        t1 = time.perf_counter()
        for k, batch in enumerate(batches):
            tokens += tokens_of(batch)
            if k + 1 == count:
                break
        seconds = time.perf_counter() - t1
    return {
        "reader": name,
        "tokens_per_s": tokens / seconds,
        "first_batch_s": first,
        "peak_pss_mb": (mem.peak - mem.baseline) / 1e6,
        "seconds": seconds,
    }


def nanogpt(bin_path: Path, batch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """nanoGPT's get_batch('train'), as in its train.py (CPU)."""
    while True:
        data = np.memmap(bin_path, dtype=np.uint16, mode="r")  # recreated: nanoGPT's leak fix
        ix = torch.randint(len(data) - BLOCK, (batch,))
        x = torch.stack([torch.from_numpy((data[i : i + BLOCK]).astype(np.int64)) for i in ix])
        y = torch.stack(
            [torch.from_numpy((data[i + 1 : i + 1 + BLOCK]).astype(np.int64)) for i in ix]
        )
        yield x, y


def chute_windows(
    ds: chute.Dataset,
    batch: int,
    workers: int,
    int64: bool,
    shuffle: bool = True,
    eos: int | None = None,
) -> Iterator[Any]:
    w = chute.windows(ds, "tokens", BLOCK + 1, dtype="int64" if int64 else None, eos=eos)
    loader = chute.Loader(w, batch_size=batch, num_workers=workers, seed=0, shuffle=shuffle)
    while True:
        for b in loader:
            t = b["tokens"]
            yield t[:, :-1], t[:, 1:]


def litdata_row(folder: Path, bin_path: Path, batch: int, count: int, python: str) -> dict:
    """LitData's TokensLoader over the same stream, measured in a child process of interpreter
    ``python`` (LitData may live in an environment of its own: the child sees this one's
    packages first, then its own); a row with ``skipped`` and why when it cannot run."""
    argv = [__file__, "--litdata-child", str(folder), str(bin_path), str(batch), str(count)]
    return {**child_json(python, argv), "reader": f"LitData TokensLoader, {batch}"}


def litdata_child(folder: Path, bin_path: Path, batch: int, count: int) -> dict:
    """In the child: the LitData row, or ``skipped`` with why (litdata not importable)."""
    try:
        from litdata import StreamingDataLoader, StreamingDataset, TokensLoader, optimize
    except ImportError as exc:
        return {"skipped": f"litdata is not installed ({exc.name})"}
    out = folder / "litdata"
    if not out.exists():
        data = np.fromfile(bin_path, np.uint16)
        pieces = np.array_split(data, 8)
        optimize(
            fn=_identity,
            inputs=[torch.from_numpy(p.astype(np.int32)) for p in pieces],
            output_dir=str(out),
            chunk_size=(BLOCK + 1) * 1024,
            item_loader=TokensLoader(),
            num_workers=1,
        )
    ds = StreamingDataset(str(out), item_loader=TokensLoader(block_size=BLOCK + 1), shuffle=True)
    loader = StreamingDataLoader(ds, batch_size=batch, num_workers=1)

    def rows() -> Iterator[Any]:
        while True:
            for t in loader:
                yield t[:, :-1], t[:, 1:]

    return measure("LitData", rows(), count, _xy_tokens)


def _xy_tokens(batch: Any) -> int:
    return int(batch[0].numel())


def _identity(x: Any) -> Any:
    return x


def padding_rows(ds: chute.Dataset, count: int) -> list[dict]:
    """Document tokens/s and the share of padding: pad-to-longest, batch_tokens, pack."""
    rows = []
    cases: list[tuple[str, Any, str]] = [
        ("pad-to-longest (16 docs)", chute.Loader(ds, batch_size=16, pad=0, seed=0), "lengths"),
        (
            "batch_tokens=16384",
            chute.Loader(ds, batch_size=512, batch_tokens=16384, pad=0, seed=0),
            "lengths",
        ),
    ]
    t0 = time.perf_counter()
    packed = chute.pack(ds, "tokens", 4096, pad_id=PAD)
    plan_s = time.perf_counter() - t0
    cases.append(("chute.pack(4096), 4 rows", chute.Loader(packed, batch_size=4, seed=0), "pack"))
    for name, loader, kind in cases:
        real = padded = 0

        def tokens_of(batch: dict, kind: str = kind) -> int:
            nonlocal real, padded
            if kind == "pack":  # padded with PAD, which no document holds
                n = int((batch["tokens"] != PAD).sum())
            else:
                n = int(batch["tokens_lengths"].sum())
            real += n
            padded += batch["tokens"].numel()
            return n

        def forever(loader: Any = loader) -> Iterator[Any]:
            while True:
                yield from loader

        row = measure(name, forever(), count, tokens_of)
        row["padding"] = 1 - real / padded
        rows.append(row)
    rows[-1]["plan_s"] = plan_s
    rows[-1]["plan_padding"] = packed.padding
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=20_000_000)
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--batch", type=int, nargs="+", default=[12, 64], help="windows a batch")
    ap.add_argument("--dir", default=None, help="where the corpus is written (default: a tmp dir)")
    ap.add_argument("--json", default=str(RESULTS / "tokens.json"))
    ap.add_argument(
        "--litdata", default=sys.executable, help="the Python that has litdata (default: this one)"
    )
    ap.add_argument("--litdata-child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.litdata_child:  # the LitData row, in its own process (see litdata_row)
        folder, bin_path, batch, count = args.litdata_child
        print(json.dumps(litdata_child(Path(folder), Path(bin_path), int(batch), int(count))))
        return
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        folder = Path(tmp)
        ds_path, bin_path, lengths = make_corpus(folder, args.tokens)
        for f in folder.rglob("*.npy"):  # warm: every reader reads from the page cache
            f.read_bytes()
        bin_path.read_bytes()
        t0 = time.perf_counter()
        ds = chute.open(ds_path)
        chute.windows(ds, "tokens", BLOCK + 1)
        open_s = time.perf_counter() - t0

        n = args.batches
        rows = []
        for batch in args.batch:
            rows.append(
                measure(f"nanoGPT get_batch, {batch}", nanogpt(bin_path, batch), n, _xy_tokens)
            )
            base = rows[-1]["tokens_per_s"]
            rows.append(litdata_row(folder, bin_path, batch, max(20, n // 10), args.litdata))
            for workers in (1, 2):
                for int64 in (False, True):
                    name = f"chute windows, {batch}, {workers} thread{'s' * (workers > 1)}"
                    name += " + int64" if int64 else ""
                    it = chute_windows(ds, batch, workers, int64)
                    rows.append(measure(name, it, n, _xy_tokens))
                    if not int64:  # the EOT-separated stream, beside the plain one
                        flat = rows[-1]["tokens_per_s"]
                        it = chute_windows(ds, batch, workers, False, eos=EOT)
                        rows.append(measure(f"{name} eos", it, n, _xy_tokens))
                        rows[-1]["x_flat"] = rows[-1]["tokens_per_s"] / flat
            it = chute_windows(ds, batch, 2, False, shuffle=False)  # the order's cost, apart
            rows.append(measure(f"chute windows, {batch}, 2 threads, in order", it, n, _xy_tokens))
            for r in rows:
                if "tokens_per_s" in r and "x_nanogpt" not in r:
                    r["x_nanogpt"] = r["tokens_per_s"] / base
                    r["batch"] = batch
        print(
            f"{len(lengths):,} documents, {int(lengths.sum()):,} tokens; chute.open + "
            f"windows: {open_s * 1e3:.1f} ms; {n} batches of B x {BLOCK} tokens after the first"
        )
        cols = [
            ("reader", "reader", "s"),
            ("tokens_per_s", "tokens/s", ",.0f"),
            ("x_nanogpt", "x nanoGPT", ".2f"),
            ("x_flat", "x flat", ".2f"),
            ("first_batch_s", "first batch s", ".4f"),
            ("peak_pss_mb", "peak PSS MB", ".1f"),
            ("skipped", "skipped", "s"),
        ]
        print(table(rows, cols))
        padding = padding_rows(ds, max(50, n // 3))
        print(
            table(
                padding,
                [
                    ("reader", "batches of ~16 k tokens", "s"),
                    ("tokens_per_s", "doc tokens/s", ",.0f"),
                    ("padding", "padding", ".1%"),
                    ("first_batch_s", "first batch s", ".4f"),
                ],
            )
        )
        print(
            f"pack plan: {padding[-1]['plan_s']:.3f} s, {padding[-1]['plan_padding']:.2%} padding"
        )
        path = write_json(
            args.json,
            {
                "documents": len(lengths),
                "tokens": int(lengths.sum()),
                "open_s": open_s,
                "windows": rows,
                "padding": padding,
                "cpus": os.cpu_count(),
                "load_average": os.getloadavg(),  # the machine is shared: context for the noise
            },
        )
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
