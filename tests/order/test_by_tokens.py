"""Batches by a token budget (chute/order/by_tokens.py, Loader(batch_tokens=, max_length=)):
every sample once per epoch, each batch within the budget, equal steps on every rank, resume
exact across world sizes, the batches a pure function of (seed, epoch)."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import chute
from chute import ArgumentValueError, SchemaError
from chute.order.by_tokens import BatchByTokens

lengths_st = st.lists(st.integers(0, 60), max_size=120).map(np.array)


def run(order: BatchByTokens, steps: int | None = None) -> list[np.ndarray]:
    it = order.batches()
    out = []
    for b in it:
        out.append(b)
        if steps is not None and len(out) == steps:
            break
    return out


@settings(max_examples=80, deadline=None)
@given(
    lengths=lengths_st,
    budget=st.integers(1, 200),
    most=st.integers(1, 20),
    window=st.integers(1, 50),
    seed=st.integers(0, 5),
    epoch=st.integers(0, 3),
)
def test_every_sample_once_within_the_budget(lengths, budget, most, window, seed, epoch):
    order = BatchByTokens(lengths, budget, most, seed=seed, window=window)
    order.set_epoch(epoch)
    batches = run(order)
    assert Counter(np.concatenate(batches or [np.zeros(0, int)]).tolist()) == Counter(
        range(len(lengths))
    )
    for b in batches:
        width = max(1, int(np.max(lengths[b])))
        assert len(b) <= most
        assert len(b) == 1 or len(b) * width <= budget
    again = BatchByTokens(lengths, budget, most, seed=seed, window=window)
    assert all(
        np.array_equal(a, b) for a, b in zip(again.epoch_batches(epoch), batches, strict=True)
    )


@settings(max_examples=60, deadline=None)
@given(
    lengths=lengths_st,
    budget=st.integers(1, 200),
    worlds=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    k=st.integers(0, 10),
    drop_last=st.booleans(),
)
def test_equal_steps_and_resume_across_world_sizes(lengths, budget, worlds, k, drop_last):
    w1, w2 = worlds
    whole = BatchByTokens(lengths, budget, 8, seed=1, drop_last=drop_last).epoch_batches(0)
    first = [
        BatchByTokens(lengths, budget, 8, seed=1, rank=r, world_size=w1, drop_last=drop_last)
        for r in range(w1)
    ]
    steps = min(k, len(first[0]))
    seen = [run(o, steps) if steps else [] for o in first]
    state = first[0].state_dict()
    assert all(o.state_dict() == state for o in first)
    second = [
        BatchByTokens(lengths, budget, 8, seed=1, rank=r, world_size=w2, drop_last=drop_last)
        for r in range(w2)
    ]
    for o in second:
        o.load_state_dict(state)
    rest = [run(o) for o in second]
    assert len({len(r) for r in rest}) <= 1  # every rank the same number of steps
    stream = [b for step in zip(*seen, strict=True) for b in step]
    stream += [b for step in zip(*rest, strict=True) for b in step]
    g = len(whole)
    got = [tuple(b.tolist()) for b in stream]
    want = [tuple(b.tolist()) for b in whole]
    if drop_last:
        assert got == want[: len(got)]
    else:  # every batch, then the padding: the epoch's first batches again
        assert got[:g] == want and all(x in want for x in got[g:])
        assert len(got) - g < w1 + w2


def test_loader_batch_tokens_and_max_length(tmp_path):
    rng = np.random.default_rng(0)
    lengths = np.minimum(rng.lognormal(4, 1.2, 600).astype(int), 3000)
    with chute.Writer(
        tmp_path / "d.chute",
        {"tokens": chute.Ragged("int32"), "y": chute.fields.Tensor((), "int64")},
    ) as w:
        for i, n in enumerate(lengths):
            w.append({"tokens": np.full(n, i, np.int32), "y": i})
    ds = chute.open(tmp_path / "d.chute")
    loader = chute.Loader(
        ds, batch_size=64, batch_tokens=2048, max_length=512, pad=-1, num_workers=2
    )
    seen, tokens, padded = [], 0, 0
    for b in loader:
        assert b["tokens"].numel() <= 2048 and b["tokens"].shape[1] <= 512
        assert (b["tokens_lengths"] == np.minimum(lengths[b["y"].numpy()], 512)).all()
        seen += b["y"].tolist()
        tokens += int(b["tokens_lengths"].sum())
        padded += b["tokens"].numel()
    assert sorted(seen) == list(range(600))
    assert 1 - tokens / padded < 0.1  # 600 samples: lengths sparse; ~0.4% at 20 k
    assert len(loader) == len(loader.order.epoch_batches(0))
    # resume mid-epoch with two ranks
    it = iter(loader)
    first = [next(it)["y"] for _ in range(3)]
    state = loader.state_dict()
    del it
    ranks = []
    for r in range(2):
        lo = chute.Loader(
            ds,
            batch_size=64,
            batch_tokens=2048,
            max_length=512,
            rank=r,
            world_size=2,
            num_workers=1,
        )
        lo.load_state_dict(state)
        ranks.append([b["y"].tolist() for b in lo])
    assert len(ranks[0]) == len(ranks[1])
    rest = [y for step in zip(*ranks, strict=True) for b in step for y in b]
    assert set(np.concatenate([f.numpy() for f in first]).tolist() + rest) == set(range(600))


def test_refused(tmp_path):
    flat = chute.open(chute.write(tmp_path / "f.chute", {"x": np.arange(10)}))
    with pytest.raises(SchemaError, match="no Ragged field"):
        chute.Loader(flat, batch_size=4, batch_tokens=10)
    ds = chute.open(chute.write(tmp_path / "r.chute", {"t": [np.arange(i) for i in range(5)]}))
    with pytest.raises(ArgumentValueError, match="block_size"):
        chute.Loader(ds, batch_size=4, batch_tokens=10, block_size=2)
    with pytest.raises(ArgumentValueError, match="batch_tokens"):
        chute.Loader(ds, batch_size=4, batch_tokens=0)
    with pytest.raises(ArgumentValueError, match="max_length"):
        chute.Loader(ds, batch_size=4, max_length=0)
    offsets = tmp_path / "r.chute" / "t.offsets.npy"
    arr = np.load(offsets)
    arr[3] = 0  # 0, 0, 1, 0, 6, 10: runs backwards at sample 2
    np.save(offsets, arr)
    with pytest.raises(chute.FormatError, match=r"field 't'.*sample 2 run backwards"):
        chute.Loader(chute.open(tmp_path / "r.chute"), batch_size=4, batch_tokens=10)
    order = BatchByTokens(np.arange(5), 10, 4)
    with pytest.raises(ArgumentValueError, match="batch_tokens=10 but this one"):
        BatchByTokens(np.arange(5), 11, 4).load_state_dict(order.state_dict())


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "int32", "bfloat16"])
def test_max_length_and_pad_for_every_token_dtype(tmp_path, dtype):
    docs = [np.arange(n) % 60000 for n in (5, 0, 12, 3)]
    with chute.Writer(tmp_path / "d.chute", {"tokens": chute.Ragged(dtype)}) as w:
        for d in docs:
            w.append({"tokens": torch.tensor(d).to(getattr(torch, dtype))})
    ds = chute.open(tmp_path / "d.chute")
    loader = chute.Loader(ds, batch_size=4, max_length=4, pad=7, shuffle=False, num_workers=0)
    (batch,) = list(loader)
    assert batch["tokens"].dtype == getattr(torch, dtype)
    assert batch["tokens_lengths"].tolist() == [4, 0, 4, 3]
    assert batch["tokens"].float().tolist() == [
        [0, 1, 2, 3],
        [7, 7, 7, 7],
        [0, 1, 2, 3],
        [0, 1, 2, 7],
    ]
    (raw,) = list(chute.Loader(ds, batch_size=4, max_length=4, shuffle=False, num_workers=0))
    assert raw["tokens"].offsets.tolist() == [0, 4, 4, 8, 11]


def same_batch(a: dict, b: dict) -> bool:
    """Two batches of packed rows hold the same tensors (cu_seqlens: its values and offsets)."""
    return a.keys() == b.keys() and all(
        torch.equal(a[k].values, b[k].values) and torch.equal(a[k].offsets, b[k].offsets)
        if isinstance(a[k], chute.RaggedBatch)
        else torch.equal(a[k], b[k])
        for k in a
    )


@settings(max_examples=25, deadline=None)
@given(
    docs=st.lists(st.integers(0, 30), min_size=1, max_size=50),
    row=st.integers(4, 24),
    budget=st.integers(1, 120),
    most=st.integers(1, 8),
    world=st.integers(1, 3),
    k=st.integers(0, 6),
    seed=st.integers(0, 3),
)
def test_packed_rows_count_their_length_every_row_once_and_resume(
    docs, row, budget, most, world, k, seed
):
    with tempfile.TemporaryDirectory() as d:
        with chute.Writer(Path(d) / "p", {"tokens": chute.Ragged("int32")}) as w:
            for i, n in enumerate(docs):
                w.append({"tokens": np.arange(n, dtype=np.int32) + 100 * i})
        rows = chute.pack(chute.open(Path(d) / "p"), "tokens", row)
        options = {"batch_tokens": budget, "seed": seed, "num_workers": 0, "pin_memory": False}
        want = BatchByTokens(np.full(len(rows), row), budget, most, seed=seed).epoch_batches(0)
        got = list(chute.Loader(rows, most, **options))
        assert len(got) == len(want)
        assert sorted(np.concatenate([*want, np.zeros(0, int)]).tolist()) == list(range(len(rows)))
        for b, idx in zip(got, want, strict=True):
            assert same_batch(b, rows.gather(idx))  # the rows the order chose, gathered
            assert b["tokens"].shape == (len(idx), row)  # every row costs its whole length
            assert len(idx) <= most and (len(idx) == 1 or len(idx) * row <= budget)
        loader = chute.Loader(rows, most, **options)
        it = iter(loader)
        first = [next(it) for _ in range(min(k, len(got)))]
        state = loader.state_dict()
        del it
        ranks = []
        for r in range(world):
            part = chute.Loader(rows, most, **options, rank=r, world_size=world)
            part.load_state_dict(state)
            ranks.append(list(part))
        assert len({len(x) for x in ranks}) == 1  # equal steps on every rank
        stream = first + [b for step in zip(*ranks, strict=True) for b in step]
        assert all(same_batch(a, b) for a, b in zip(stream[: len(got)], got, strict=True))
        assert len(got) <= len(stream) < len(got) + world


def test_windows_and_a_subset_of_packed_rows_count_their_length(tmp_path):
    tokens = [np.arange(n, dtype=np.int32) for n in np.random.default_rng(1).integers(1, 40, 90)]
    ds = chute.open(chute.write(tmp_path / "d", {"tokens": tokens}))
    windows = chute.windows(ds, "tokens", 16)
    sizes = [len(b["tokens"]) for b in chute.Loader(windows, 8, batch_tokens=50, num_workers=0)]
    # 50 // 16 windows a batch, but the last of the (one) length-sorted window
    assert sorted(sizes)[1:] == [3] * (len(sizes) - 1) and sum(sizes) == len(windows)
    rows = chute.pack(ds, "tokens", 32)
    half = torch.utils.data.Subset(rows, range(0, len(rows), 2))
    batches = list(chute.Loader(half, 8, batch_tokens=100, num_workers=2, shuffle=False))
    assert [len(b["tokens"]) for b in batches][:2] == [3, 3]  # 100 // 32 rows
    assert sum(len(b["tokens"]) for b in batches) == len(half)
