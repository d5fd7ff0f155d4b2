"""Tokenize a text corpus in parallel into one chute dataset, then read it three ways.

    python examples/tokenize_corpus.py [--workers 2] [--documents 4000]

1. Makes a corpus: ``--documents`` lines of generated text (lognormal lengths) in 8 shard
   files, in a temporary folder (no downloads).
2. Trains a small byte-level BPE with Hugging Face ``tokenizers`` on it and saves it.
3. ``chute.from_shards``: each worker process loads the tokenizer once and tokenizes its
   shards; the dataset (field ``tokens``, ``chute.Ragged("uint16")``, one document a sample)
   is committed once, shards in order.
4. Reads it as nanoGPT-style windows (``chute.windows``), as packed rows with
   ``cu_seqlens`` (``chute.pack``) and as token-budget batches (``Loader(batch_tokens=)``),
   printing a batch's shapes and the padding of each.

Needs ``pip install tokenizers``.
"""

from __future__ import annotations

import argparse
import tempfile
from functools import cache
from pathlib import Path

import numpy as np

import chute

TEXT = (  # the words of the generated documents
    "the of and to in is was for on that with as by at from his her an were are which this "
    "be or has had not but its they their one all been new more first also after who two"
)
WORDS = TEXT.split()
EOS = "<|endoftext|>"


def make_corpus(folder: Path, documents: int, shards: int = 8) -> list[Path]:
    """``documents`` lines of generated text, split over ``shards`` files."""
    rng = np.random.default_rng(0)
    lengths = np.minimum(rng.lognormal(3.5, 1.0, documents).astype(int) + 1, 2000)
    paths = [folder / f"shard-{i}.txt" for i in range(shards)]
    for i, path in enumerate(paths):
        lines = [" ".join(rng.choice(WORDS, n)) for n in lengths[i::shards]]  # one document a line
        path.write_text("\n".join(lines) + "\n")
    return paths


def train_tokenizer(paths: list[Path], out: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=[EOS])
    tok.train([str(p) for p in paths], trainer)
    tok.save(str(out))
    return out


@cache
def _tokenizer(path: str):  # once per worker process
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def tokenize(job: tuple[str, str]):
    """The per-shard function run in the workers: one document a line, EOS after each."""
    shard, tokenizer = job
    tok = _tokenizer(tokenizer)
    eos = tok.token_to_id(EOS)
    lines = Path(shard).read_text().splitlines()
    for enc in tok.encode_batch(lines):  # the Rust side batches (and threads) the encoding
        yield {"tokens": np.array([*enc.ids, eos], np.uint16)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--documents", type=int, default=4000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        shards = make_corpus(folder, args.documents)
        tokenizer = train_tokenizer(shards, folder / "tokenizer.json")
        path = chute.from_shards(
            [(str(s), str(tokenizer)) for s in shards],
            tokenize,
            folder / "corpus.chute",
            {"tokens": chute.Ragged("uint16")},
            num_workers=args.workers,
        )
        ds = chute.open(path)
        print(ds, f"{sum(len(ds[i]['tokens']) for i in range(len(ds))):,} tokens")

        windows = chute.windows(ds, "tokens", length=257, document_ids=True)
        batch = next(iter(chute.Loader(windows, batch_size=8)))
        x, y = batch["tokens"][:, :-1], batch["tokens"][:, 1:]
        print(f"windows: {len(windows)} of 257 tokens; x {tuple(x.shape)}, y {tuple(y.shape)}")

        rows = chute.pack(ds, "tokens", length=1024)
        batch = next(iter(chute.Loader(rows, batch_size=4)))
        cu, longest = rows.flat_cu_seqlens(batch["cu_seqlens"])
        print(
            f"pack: {len(rows)} rows of 1024, {rows.padding:.2%} padding; a batch's "
            f"cu_seqlens {tuple(cu.shape)}, longest sequence {longest}"
        )

        loader = chute.Loader(ds, batch_size=256, batch_tokens=8192, pad=0)
        real = padded = 0
        for b in loader:
            real += int(b["tokens_lengths"].sum())
            padded += b["tokens"].numel()
        print(f"batch_tokens=8192: {len(loader)} batches, {1 - real / padded:.2%} padding")


if __name__ == "__main__":
    main()
