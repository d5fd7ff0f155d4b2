"""chute.windows: windows over a token stream, against the stream built the obvious way, over
random documents (empty ones, ones longer than a window), parts, strides and eos; in the
Loader with resume across world sizes; hostile input."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from _tokens import documents, stream, write_docs
from hypothesis import given, settings
from hypothesis import strategies as st

import chute
from chute import ArgumentError, ArgumentValueError, FormatError, SchemaError

lengths_st = st.lists(st.integers(0, 40), min_size=0, max_size=30)


@settings(max_examples=60, deadline=None)
@given(
    lengths=lengths_st,
    length=st.integers(1, 50),
    stride=st.one_of(st.none(), st.integers(1, 60)),
    part_size=st.one_of(st.none(), st.integers(1, 7)),
    eos=st.one_of(st.none(), st.just(-7)),
    drop_tail=st.booleans(),
)
def test_windows_are_the_stream(lengths, length, stride, part_size, eos, drop_tail):
    docs = documents(lengths)
    with tempfile.TemporaryDirectory() as tmp:
        ds = write_docs(Path(tmp) / "d.chute", docs, part_size)
        w = chute.windows(
            ds,
            "tokens",
            length,
            stride,
            eos=eos,
            drop_tail=drop_tail,
            pad_id=-1,
            document_ids=True,
            positions=True,
        )
        toks, ids, pos = stream(docs, eos)
        step = length if stride is None else stride
        want_n = len(range(0, len(toks) - length + 1, step))  # whole windows
        covered = (want_n - 1) * step + length if want_n else 0
        if not drop_tail and covered < len(toks) and want_n * step < len(toks):
            want_n += 1  # one more window holds the tail
        assert len(w) == want_n
        order = np.random.default_rng(len(lengths)).permutation(len(w))
        batch = w.gather(order)
        for row, i in enumerate(order.tolist()):
            a = i * step
            e = min(a + length, len(toks))
            got = batch["tokens"][row].numpy().astype(np.int64)
            assert (got[: e - a] == toks[a:e]).all()
            assert (got[e - a :] == -1).all()
            assert (batch["document_ids"][row][: e - a].numpy() == ids[a:e]).all()
            assert (batch["document_ids"][row][e - a :].numpy() == -1).all()
            assert (batch["positions"][row][: e - a].numpy() == pos[a:e]).all()
        if stride is None and len(w):  # every token in exactly one window
            seen = Counter(batch["tokens"][batch["document_ids"] >= 0].tolist())
            want = Counter(toks[: min(len(toks), len(w) * length)].tolist())
            assert seen == want


def test_positions_restart_at_each_document(tmp_path):
    docs = documents([3, 0, 5, 1])
    ds = write_docs(tmp_path / "d.chute", docs)
    w = chute.windows(ds, "tokens", 9, positions=True, document_ids=True)
    (b,) = [w[0]]
    assert b["positions"].tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 0]
    assert b["document_ids"].tolist() == [0, 0, 0, 2, 2, 2, 2, 2, 3]
    assert w.schema["tokens"] == chute.fields.Tensor((9,), "int32")


def test_flat_field_and_prechunked_rows(tmp_path):
    tokens = np.arange(1000, dtype=np.uint16)
    ds = chute.open(chute.write(tmp_path / "flat.chute", {"tokens": tokens}))
    w = chute.windows(ds, "tokens", 65)
    assert len(w) == 1000 // 65
    assert w[3]["tokens"].tolist() == list(range(195, 260))
    rows = chute.open(chute.write(tmp_path / "rows.chute", {"tokens": tokens.reshape(100, 10)}))
    w2 = chute.windows(rows, "tokens", 65, stride=64)
    assert w2[2]["tokens"].tolist() == list(range(128, 193))
    with pytest.raises(ArgumentValueError, match="flat stream"):
        chute.windows(ds, "tokens", 8, positions=True)


def test_loader_shards_and_resumes_across_world_sizes(tmp_path):
    docs = documents(np.random.default_rng(1).integers(0, 90, 120).tolist())
    ds = write_docs(tmp_path / "d.chute", docs, part_size=13)
    w = chute.windows(ds, "tokens", 33, document_ids=True)
    whole = chute.Loader(w, batch_size=4, seed=3, num_workers=0, world_size=1, rank=0)
    want = [b["tokens"] for b in whole]
    assert sum(len(b) for b in want) == len(w)
    # two ranks take 5 steps, then three ranks finish the epoch: the same windows in order
    two = [
        chute.Loader(w, batch_size=2, seed=3, rank=r, world_size=2, num_workers=1) for r in (0, 1)
    ]
    its = [iter(lo) for lo in two]
    got = []
    for _ in range(5):
        for it in its:
            got.append(next(it)["tokens"])
    state = two[0].state_dict()
    del its
    three = []
    for r in range(3):
        lo = chute.Loader(w, batch_size=2, seed=3, rank=r, world_size=3, num_workers=2)
        lo.load_state_dict(state)
        three.append([b["tokens"] for b in lo])
    assert len({len(t) for t in three}) == 1  # equal steps on every rank
    rest = [b for step in zip(*three, strict=True) for b in step]
    flat_got = torch.cat(got + rest)[: len(w)]
    assert torch.equal(flat_got, torch.cat(want))


def test_dataloader_and_mix_read_windows(tmp_path):
    docs = documents([50] * 20)
    a = chute.windows(write_docs(tmp_path / "a.chute", docs), "tokens", 10)
    b = chute.windows(write_docs(tmp_path / "b.chute", docs[:4]), "tokens", 10)
    dl = chute.dataloader(a, batch_size=8, num_workers=0)
    assert sum(len(x["tokens"]) for x in dl) == len(a)
    m = chute.mix({"a": a, "b": b}, weights={"a": 0.5, "b": 0.5})
    batch = m.gather(np.arange(len(m)))
    assert batch["tokens"].shape == (len(m), 10)
    assert (batch["source"] == 1).sum() == m.counts["b"]


def test_hostile_input(tmp_path):
    docs = documents([5, 6, 7, 8])
    ds = write_docs(tmp_path / "d.chute", docs)
    for bad in (0, -3):
        with pytest.raises(ArgumentValueError, match="length"):
            chute.windows(ds, "tokens", bad)
    with pytest.raises(ArgumentValueError, match="stride"):
        chute.windows(ds, "tokens", 4, 0)
    with pytest.raises(ArgumentError, match="length"):
        chute.windows(ds, "tokens", 2.5)  # type: ignore[arg-type]
    with pytest.raises(SchemaError, match="'nope'"):
        chute.windows(ds, "nope", 4)
    floats = chute.open(chute.write(tmp_path / "f.chute", {"x": [np.ones(3, np.float32)] * 2}))
    with pytest.raises(SchemaError, match=r"field 'x'.*integers"):
        chute.windows(floats, "x", 2)
    u16 = write_docs(tmp_path / "u.chute", documents([3], dtype="uint16"))
    with pytest.raises(ArgumentValueError, match="eos=70000"):
        chute.windows(u16, "tokens", 2, eos=70000)
    with pytest.raises(ArgumentError, match="chute Dataset"):
        chute.windows(torch.utils.data.Subset(ds, [0, 1]), "tokens", 4)
    with pytest.raises(chute.SampleIndexError):
        chute.windows(ds, "tokens", 4).gather([99])
    # offsets that run backwards (first and last intact, so open() passes): named
    offsets = tmp_path / "d.chute" / "tokens.offsets.npy"
    arr = np.load(offsets)
    arr[2] = 1  # 0, 5, 1, 18, 26
    np.save(offsets, arr)
    bad = chute.open(tmp_path / "d.chute")
    w = chute.windows(bad, "tokens", 4, positions=True)
    with pytest.raises(FormatError, match=r"field 'tokens'.*sample 1 run backwards"):
        w.gather([0])


def test_dtype_casts_while_copying(tmp_path):
    docs = documents([5, 9, 3], dtype="uint16")
    ds = write_docs(tmp_path / "d.chute", docs)
    for eos in (None, 65535):
        raw = chute.windows(ds, "tokens", 4, eos=eos, drop_tail=False)
        wide = chute.windows(ds, "tokens", 4, eos=eos, drop_tail=False, dtype="int64")
        assert wide.schema["tokens"] == chute.fields.Tensor((4,), "int64")
        got = wide.gather(np.arange(len(wide)))["tokens"]
        assert got.dtype == torch.int64
        assert torch.equal(got, raw.gather(np.arange(len(raw)))["tokens"].long())
    rows = chute.pack(ds, "tokens", 8, dtype=np.int32)
    assert rows[0]["tokens"].dtype == torch.int32
    with pytest.raises(ArgumentValueError, match=r"dtype='int8'.*field 'tokens' \(uint16\)"):
        chute.windows(ds, "tokens", 4, dtype="int8")
    with pytest.raises(ArgumentValueError, match="dtype='float32'"):
        chute.pack(ds, "tokens", 4, dtype="float32")
