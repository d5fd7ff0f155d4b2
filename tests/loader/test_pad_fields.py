"""``pad=`` per field in both loaders, threads and worker processes: every padded position holds
its field's value (``{"tokens": pad_id, "labels": -100, "loss_mask": 0}``, as Hugging Face's
DataCollatorForSeq2Seq pads), 0 for a field the mapping does not name; with ``pad_to=`` and
``max_length=``; over packed and windowed SFT rows carrying a loss mask and labels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import chute

PAD_ID, IGNORE = 50256, -100
PAD = {"tokens": PAD_ID, "labels": IGNORE, "loss_mask": 0}
N = 23


def sft_documents(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Chat-like documents: a prompt (loss mask 0) then an answer (loss mask 1); ``labels``
    the next token where the mask is 1, else -100; ``doc`` the document, on every token."""
    rng = np.random.default_rng(seed)
    docs = []
    for d in range(n):
        prompt, answer = int(rng.integers(1, 7)), int(rng.integers(0, 6))
        tokens = rng.integers(10, 30000, prompt + answer).astype(np.int32)
        mask = np.r_[np.zeros(prompt), np.ones(answer)].astype(np.uint8)
        labels = np.full(len(tokens), IGNORE, np.int64)
        labels[:-1] = np.where(mask[1:] == 1, tokens[1:], IGNORE)
        docs.append(
            {"tokens": tokens, "loss_mask": mask, "labels": labels, "doc": np.full(len(tokens), d)}
        )
    return docs


@pytest.fixture(scope="module")
def sft(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, np.ndarray]]]:
    docs = sft_documents(N)
    path = tmp_path_factory.mktemp("sft") / "sft.chute"
    schema = {
        "tokens": chute.Ragged("int32"),
        "loss_mask": chute.Ragged("uint8"),
        "labels": chute.Ragged("int64"),
        "doc": chute.Ragged("int64"),
        "y": chute.fields.Tensor((), "int64"),
    }
    with chute.Writer(path, schema, part_size=7) as w:  # several parts
        for i, d in enumerate(docs):
            w.append({**d, "y": i})
    return path, docs


def padded(docs: list[dict[str, np.ndarray]], ys: list[int], width: int | None = None) -> dict:
    """The batch of documents ``ys`` padded the obvious way: each field to the longest (or
    ``width``) with its value in ``PAD``, 0 for ``doc``."""
    longest = max(len(docs[y]["tokens"]) for y in ys) if width is None else width
    out = {}
    for name in ("tokens", "loss_mask", "labels", "doc"):
        rows = [list(docs[y][name]) for y in ys]
        fill = PAD.get(name, 0)
        out[name] = [r + [fill] * (longest - len(r)) for r in rows]
    return out


def check(batches: list[dict[str, Any]], docs, width: int | None = None, cut: int | None = None):
    seen = []
    cut_docs = docs if cut is None else [{k: v[:cut] for k, v in d.items()} for d in docs]
    for b in batches:
        ys = b["y"].tolist()
        want = padded(cut_docs, ys, width)
        for name, rows in want.items():
            assert b[name].tolist() == rows, name
            lengths = [len(cut_docs[y]["tokens"]) for y in ys]
            assert b[f"{name}_lengths"].tolist() == lengths
        assert b["labels"].dtype == torch.int64 and b["loss_mask"].dtype == torch.uint8
        seen += ys
    assert sorted(seen) == list(range(N))


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_pads_each_field_with_its_value(sft, workers):
    path, docs = sft
    loader = chute.Loader(chute.open(path), 4, pad=PAD, num_workers=workers, seed=3)
    check(list(loader), docs)


@pytest.mark.parametrize("workers", [0, 2])
def test_pad_to_and_max_length_fill_each_field_with_its_value(sft, workers):
    path, docs = sft
    ds = chute.open(path)
    check(list(chute.Loader(ds, 4, pad=PAD, pad_to=12, num_workers=workers)), docs, width=12)
    cut = chute.Loader(ds, 4, pad=PAD, max_length=3, pad_multiple=5, num_workers=workers)
    check(list(cut), docs, width=5, cut=3)


def test_dataloader_in_the_main_process(sft):
    path, docs = sft
    dl = chute.dataloader(chute.open(path), 4, pad=PAD, num_workers=0, pin_memory=False)
    check(list(dl), docs)


@pytest.mark.slow  # worker processes
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_worker_processes(sft, context):
    path, docs = sft
    options = {"pad": PAD, "pad_multiple": 4, "max_length": 9, "seed": 1, "pin_memory": False}
    dl = chute.dataloader(
        chute.open(path), 4, **options, num_workers=2, multiprocessing_context=context
    )
    batches = list(dl)
    for b in batches:
        ys = b["y"].tolist()
        width = b["tokens"].shape[1]
        assert width % 4 == 0
        cut = [{k: v[:9] for k, v in docs[y].items()} for y in ys]
        want = padded(cut, list(range(len(ys))), width)
        for name, rows in want.items():
            assert b[name].tolist() == rows, name
    assert sorted(y for b in batches for y in b["y"].tolist()) == list(range(N))


def test_one_number_still_pads_every_field(sft):
    path, docs = sft
    (b,) = list(chute.Loader(chute.open(path), N, pad=7, shuffle=False, num_workers=0))
    for name in ("tokens", "loss_mask", "labels", "doc"):
        for y in range(N):
            n = len(docs[y][name])
            assert b[name][y, :n].tolist() == docs[y][name].tolist()
            assert (b[name][y, n:] == 7).all()


def test_packed_sft_rows_pad_their_cu_seqlens_with_its_value(sft):
    path, _ = sft
    ds = chute.open(path, fields=["tokens", "loss_mask"])
    rows = chute.pack(ds, ["tokens", "loss_mask"], 16, pad_id=PAD_ID, labels="next")
    pad = {**PAD, "cu_seqlens": -1}
    got = list(chute.Loader(rows, 4, pad=pad, shuffle=False, num_workers=2))
    raw = list(chute.Loader(rows, 4, shuffle=False, num_workers=0))
    for b, r in zip(got, raw, strict=True):
        for name in ("tokens", "loss_mask", "labels", "position_ids"):  # fixed: as they are
            assert torch.equal(b[name], r[name])
        assert b["tokens"].shape[1] == 16 and (b["labels"][b["tokens"] == PAD_ID] == IGNORE).all()
        cu, lengths = b["cu_seqlens"], b["cu_seqlens_lengths"]
        for i, row in enumerate(r["cu_seqlens"]):
            n = len(row)
            assert int(lengths[i]) == n and cu[i, :n].tolist() == row.tolist()
            assert (cu[i, n:] == -1).all()
    dl = chute.dataloader(rows, 4, pad=pad, shuffle=False, num_workers=0, pin_memory=False)
    for b, w in zip(dl, got, strict=True):
        assert all(torch.equal(b[k], w[k]) for k in w)


def test_windowed_sft_rows_take_a_mapping_and_pad_nothing(sft):
    path, _ = sft
    ds = chute.open(path, fields=["tokens", "loss_mask"])
    rows = chute.windows(ds, ["tokens", "loss_mask"], 8, eos=PAD_ID, labels="next")
    got = list(chute.Loader(rows, 4, pad=PAD, shuffle=False, num_workers=0))
    raw = list(chute.Loader(rows, 4, shuffle=False, num_workers=0))
    for b, r in zip(got, raw, strict=True):
        assert b.keys() == r.keys() and all(torch.equal(b[k], r[k]) for k in r)
