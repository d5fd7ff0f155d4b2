"""chute.pack with aligned per-token fields (SFT): a chat-template-like corpus packed with its
loss mask, labels made shifted or not, checked row by row against a pure-Python packer built
from the rows' pieces; mismatched lengths and bad arguments refused."""

from __future__ import annotations

import itertools
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from _chat import IGNORE, chat_documents, reference_row, write_chat
from hypothesis import given, settings
from hypothesis import strategies as st

import chute

PAD = -1
FIELDS = ["tokens", "loss_mask", "doc", "at"]


def check_rows(rows: chute.reader.pack.Pack, docs, labels, use_mask) -> Counter:
    """Every row equals the reference row of its pieces (found from the carried ``doc`` and
    ``at`` fields between its cu_seqlens); returns the pieces seen."""
    batch = rows.gather(np.arange(len(rows)))
    seen: Counter = Counter()
    for r in range(len(rows)):
        cu = batch["cu_seqlens"][r].tolist()
        pieces = []
        for a, e in itertools.pairwise(cu):
            if int(batch["tokens"][r, a]) == PAD:  # the padding: the last sequence
                assert e == rows.length and (batch["doc"][r, a:e] == -1).all()
                continue
            d, s = int(batch["doc"][r, a]), int(batch["at"][r, a])
            pieces.append((d, s, e - a))
        seen.update(pieces)
        want = reference_row(docs, pieces, rows.length, PAD, labels, use_mask, {"doc": -1})
        for k, v in want.items():
            if k == "labels" and not labels:
                assert "labels" not in batch
                continue
            assert batch[k][r].tolist() == v, (k, r, pieces)
    return seen


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(0, 25),
    seed=st.integers(0, 10_000),
    length=st.integers(1, 60),
    part_size=st.one_of(st.none(), st.integers(1, 7)),
    truncate=st.booleans(),
    labels=st.sampled_from([None, "next", "same"]),
    use_mask=st.booleans(),
)
def test_chat_corpus_packs_exactly(n, seed, length, part_size, truncate, labels, use_mask):
    docs = chat_documents(n, seed)
    with tempfile.TemporaryDirectory() as tmp:
        ds = write_chat(Path(tmp) / "chat.chute", docs, part_size)
        rows = chute.pack(
            ds,
            FIELDS,
            length,
            truncate=truncate,
            seed=seed % 3,
            pad_id=PAD,
            fill={"doc": -1},
            labels=labels,
            label_mask="loss_mask" if labels and use_mask else None,
        )
        seen = check_rows(rows, docs, labels, bool(labels and use_mask))
        want: Counter = Counter()
        for d, doc in enumerate(docs):
            m = len(doc["tokens"])
            for s in [0] if truncate and m else range(0, m, length):
                want[d, s, min(m - s, length)] += 1
        assert seen == want
        if len(rows):  # the aligned fields in the loaders' out= buffers too
            out = rows.empty_batch(len(rows))
            assert set(out) == set(FIELDS) | {"position_ids"} | ({"labels"} if labels else set())
            got = rows.gather(np.arange(len(rows)), out=out)
            assert torch.equal(got["loss_mask"], rows.gather(np.arange(len(rows)))["loss_mask"])


def test_sft_training_batch(tmp_path):
    """What an SFT step reads: the loss counts the assistant's tokens, nothing else."""
    docs = chat_documents(40, 1, longest=30)
    ds = write_chat(tmp_path / "chat.chute", docs, 9)
    assert max(len(d["tokens"]) for d in docs) <= 256  # no document is split
    rows = chute.pack(ds, ["tokens", "loss_mask"], 256, labels="next", label_mask="loss_mask")
    assert rows.schema["loss_mask"] == chute.fields.Tensor((256,), "uint8")
    assert rows.schema["labels"] == chute.fields.Tensor((256,), "int64")
    trained = 0
    for batch in chute.Loader(rows, batch_size=4, seed=0, num_workers=2):
        lab, mask, tok = batch["labels"], batch["loss_mask"], batch["tokens"]
        hit = lab != IGNORE
        assert (mask[:, 1:][hit[:, :-1]] == 1).all()  # every target is an assistant token
        assert torch.equal(lab[:, :-1][hit[:, :-1]], tok[:, 1:][hit[:, :-1]].long())
        trained += int(hit.sum())
    # each assistant token is a target once
    assert trained == sum(sum(d["loss_mask"][1:]) for d in docs)
    dl = chute.dataloader(rows, batch_size=4, num_workers=2, shuffle=False)
    got = torch.cat([b["labels"] for b in dl])
    assert torch.equal(got, rows.gather(np.arange(len(rows)))["labels"])


def test_same_labels_match_hugging_face_flattening(tmp_path):
    """labels='same' with a shift inside the model trains each pair within a document once,
    never across two: DataCollatorWithFlattening's convention."""
    docs = chat_documents(30, 2)
    assert max(len(d["tokens"]) for d in docs) <= 128  # no document is split
    rows = chute.pack(write_chat(tmp_path / "c.chute", docs, None), "tokens", 128, labels="same")
    batch = rows.gather(np.arange(len(rows)))
    shifted = batch["labels"][:, 1:]  # what the model compares logits[:, :-1] with
    pairs = int((shifted != IGNORE).sum())
    assert pairs == sum(max(0, len(d["tokens"]) - 1) for d in docs)
    cu, _ = rows.flat_cu_seqlens(batch["cu_seqlens"])
    flat = batch["labels"].reshape(-1)
    assert (flat[cu[:-1].long()] == IGNORE).all()  # every sequence's first label
