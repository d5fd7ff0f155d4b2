"""chute.pack: every document (or piece of one) in exactly one row, cu_seqlens and
position_ids consistent with the rows, long documents split or truncated, the plan a pure
function of the seed; in the Loader with resume across world sizes; hostile input."""

from __future__ import annotations

import itertools
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from _tokens import documents, write_docs
from hypothesis import given, settings
from hypothesis import strategies as st

import chute
from chute import ArgumentValueError, FormatError

PAD = -1


def pieces_of(batch: dict, length: int) -> Counter:
    """The (document, start, length) pieces in a batch of rows (token t of document d is
    d * 1000 + t), checking the rows: cu_seqlens from 0 to ``length``, each sequence one
    piece of one document with position_ids 0, 1, ...; only the last may be padding."""
    got: Counter = Counter()
    for r in range(len(batch["tokens"])):
        cu = batch["cu_seqlens"][r].tolist()
        assert cu[0] == 0 and cu[-1] == length and all(a < b for a, b in itertools.pairwise(cu))
        toks = batch["tokens"][r].numpy().astype(np.int64)
        pos = batch["position_ids"][r].numpy()
        for k, (a, e) in enumerate(itertools.pairwise(cu)):
            if toks[a] == PAD:  # the padding: last, and all of it
                assert k == len(cu) - 2 and (toks[a:e] == PAD).all() and (pos[a:e] == 0).all()
                continue
            doc, start = divmod(int(toks[a]), 1000)
            assert (toks[a:e] == toks[a] + np.arange(e - a)).all()
            assert (pos[a:e] == np.arange(e - a)).all()
            got[doc, start, e - a] += 1
    return got


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 30), max_size=40),
    length=st.integers(1, 25),
    part_size=st.one_of(st.none(), st.integers(1, 9)),
    truncate=st.booleans(),
    window=st.integers(1, 50),
    seed=st.integers(0, 3),
)
def test_every_document_once(lengths, length, part_size, truncate, window, seed):
    docs = documents(lengths)
    with tempfile.TemporaryDirectory() as tmp:
        ds = write_docs(Path(tmp) / "d.chute", docs, part_size)
        rows = chute.pack(
            ds, "tokens", length, truncate=truncate, seed=seed, window=window, pad_id=PAD
        )
        order = np.random.default_rng(seed).permutation(len(rows))
        batch = rows.gather(order)
        want: Counter = Counter()
        for d, n in enumerate(lengths):
            starts = [0] if truncate and n else range(0, n, length)
            for s in starts:
                want[d, s, min(n - s, length)] += 1
        assert pieces_of(batch, length) == want
        assert rows.tokens == sum(n for (_, _, n) in want.elements())
        assert rows.dropped_tokens == (sum(max(0, n - length) for n in lengths) if truncate else 0)
        if len(rows):
            assert rows.padding == pytest.approx(1 - rows.tokens / (len(rows) * length))
        again = chute.pack(
            ds, "tokens", length, truncate=truncate, seed=seed, window=window, pad_id=PAD
        )
        assert torch.equal(again.gather(order)["tokens"], rows.gather(order)["tokens"])
        cu, longest = rows.flat_cu_seqlens(batch["cu_seqlens"])
        assert cu.dtype == torch.int32 and int(cu[-1]) == len(rows) * length
        assert (cu[1:] > cu[:-1]).all() and longest <= length


def test_little_padding_on_lognormal_documents(tmp_path):
    rng = np.random.default_rng(0)
    lengths = np.minimum(rng.lognormal(5.5, 1.2, 3000).astype(int), 20000)
    with chute.Writer(tmp_path / "d.chute", {"tokens": chute.Ragged("int32")}) as w:
        for n in lengths:
            w.append({"tokens": np.zeros(n, np.int32)})
    rows = chute.pack(chute.open(tmp_path / "d.chute"), "tokens", 2048)
    assert rows.padding < 0.05
    assert rows.tokens == lengths.sum()


def test_loader_resume_across_world_sizes_and_pad(tmp_path):
    docs = documents(np.random.default_rng(2).integers(0, 60, 80).tolist())
    rows = chute.pack(write_docs(tmp_path / "d.chute", docs, part_size=11), "tokens", 40)
    whole = [b["tokens"] for b in chute.Loader(rows, batch_size=3, seed=5, num_workers=0)]
    one = chute.Loader(rows, batch_size=3, seed=5, num_workers=1, rank=0, world_size=1)
    it = iter(one)
    got = [next(it)["tokens"] for _ in range(4)]
    state = one.state_dict()
    del it
    ranks = []
    for r in range(2):
        lo = chute.Loader(rows, batch_size=3, seed=5, rank=r, world_size=2, num_workers=2, pad=0)
        lo.load_state_dict(state)
        ranks.append(list(lo))
    assert len(ranks[0]) == len(ranks[1])  # equal steps
    rest = [b["tokens"] for step in zip(*ranks, strict=True) for b in step]
    assert torch.equal(torch.cat(got + rest)[: len(rows)], torch.cat(whole))
    b = ranks[0][0]
    assert b["cu_seqlens"].shape[0] == 3 and b["cu_seqlens_lengths"].shape == (3,)


def test_hostile_input(tmp_path):
    ds = write_docs(tmp_path / "d.chute", documents([3, 4, 5]))
    with pytest.raises(ArgumentValueError, match="length"):
        chute.pack(ds, "tokens", 0)
    flat = chute.open(chute.write(tmp_path / "f.chute", {"tokens": np.arange(10)}))
    with pytest.raises(ArgumentValueError, match="flat stream"):
        chute.pack(flat, "tokens", 4)
    offsets = tmp_path / "d.chute" / "tokens.offsets.npy"
    arr = np.load(offsets)
    arr[1] = 9  # 0, 9, 7, 12
    np.save(offsets, arr)
    with pytest.raises(FormatError, match=r"field 'tokens'.*sample 1 run backwards"):
        chute.pack(chute.open(tmp_path / "d.chute"), "tokens", 4)


def test_worker_processes_read_rows_and_windows(tmp_path):
    docs = documents(np.random.default_rng(3).integers(0, 40, 50).tolist())
    ds = write_docs(tmp_path / "d.chute", docs, part_size=9)
    for view in (chute.pack(ds, "tokens", 32), chute.windows(ds, "tokens", 10, positions=True)):
        dl = chute.dataloader(view, batch_size=4, num_workers=2, shuffle=False)
        got = torch.cat([b["tokens"] for b in dl])
        assert torch.equal(got, view.gather(np.arange(len(view)))["tokens"])
