"""The Loader's variable-size values (ragged, bytes, strings): gathered into pooled buffers
reused once nothing refers to them, the batches the same bytes as ``ds.gather``'s, a batch
kept in any form never written over."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chute
from chute.buffers import Values
from chute.columns import segments

N = 300


@pytest.fixture(autouse=True)
def no_thread_leak():
    yield
    assert not [t for t in threading.enumerate() if t.name.startswith("chute-loader")]


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> chute.Dataset:
    """Token documents of 0 to ~4000 tokens (lognormal), bytes and strings beside them."""
    rng = np.random.default_rng(5)
    lengths = np.minimum(rng.lognormal(4.0, 1.2, N).astype(np.int64), 4000)
    path = tmp_path_factory.mktemp("values") / "docs.chute"
    chute.write(
        path,
        {
            "ids": [rng.integers(0, 50_000, k).astype(np.int32) for k in lengths],
            "raw": [rng.bytes(int(k) % 97) for k in lengths],
            "s": [f"doc {i} " * (i % 7) for i in range(N)],
            "y": np.arange(N),
        },
        schema={
            "ids": chute.Ragged("int32"),
            "raw": chute.fields.Bytes(),
            "s": chute.String(),
            "y": chute.fields.Tensor((), "int64"),
        },
    )
    return chute.open(path)


def same(got: dict, want: dict) -> None:
    """Byte for byte: values, offsets, the other fields."""
    for name in ("ids", "raw"):
        assert torch.equal(got[name].values, want[name].values), name
        assert torch.equal(got[name].offsets, want[name].offsets), name
    assert got["s"] == want["s"]
    assert torch.equal(got["y"], want["y"])


@pytest.mark.parametrize(("workers", "reuse_after"), [(0, None), (1, None), (2, None), (2, 1)])
def test_batches_are_what_gather_gives_and_kept_ones_never_change(docs, workers, reuse_after):
    loader = chute.Loader(docs, 16, seed=2, num_workers=workers, reuse_after=reuse_after)
    assert (loader.group > 1) == (workers > 0)  # with threads, batches gathered in groups
    kept = []  # (a copy, what is kept, how)
    for epoch in range(3):
        loader.set_epoch(epoch)
        plan = loader.order.plan()
        for k, batch in enumerate(loader):
            same(batch, docs.gather(plan[k]))
            if epoch == 0 and k % 3 == 0:  # the values, a view of them, a numpy array
                how = k // 3 % 3
                ids = batch["ids"]
                what = [ids, ids.values[1:], ids.values.numpy()][how]
                kept.append((ids.values.numpy()[1 if how == 1 else 0 :].copy(), what, how))
            if workers:
                time.sleep(0.001)  # let the workers run ahead
    for copy, what, how in kept:  # never written over, while another 2 epochs ran
        assert np.array_equal(np.asarray(what.values if how == 0 else what), copy)


@pytest.mark.parametrize(("workers", "reuse_after"), [(0, None), (2, None), (2, 1)])
def test_a_plain_loop_cycles_through_a_few_buffers(docs, workers, reuse_after):
    loader = chute.Loader(docs, 16, seed=3, num_workers=workers, reuse_after=reuse_after)
    seen, pooled, batches = set(), 0, 0
    for epoch in range(4):
        for batch in loader:
            if epoch >= 2:  # the pool's buffers made by then
                values = batch["ids"].values.numpy()  # in a buffer of the first field's pool
                pools = loader._buffers.values.pools[0]
                owner = [b.ctypes.data for b in pools if np.shares_memory(values, b)]
                pooled += bool(owner)
                batches += 1
                seen.add(owner[0] if owner else values.ctypes.data)  # (batches of a group share)
                del values  # (a list of the buffers held here would make them all look in use)
            if workers:
                time.sleep(0.001)
    # A worker that finds every buffer still referenced for a moment (a batch on its way out)
    # makes a new one, and the pool stops tracking its oldest: rare, never a change of data.
    assert pooled >= 0.8 * batches
    assert len(seen) <= loader._buffers.values.cap + 4  # (+ a batch larger than any before)


def test_pool_reuses_an_idle_buffer_and_replaces_one_too_small() -> None:
    pool = Values(cap=2)
    a = pool.take(0, 100)
    assert len(a) == 100 and a.dtype == np.uint8
    b = pool.take(0, 100)  # `a` is in use: another buffer
    assert not np.shares_memory(a, b)
    ptr = a.ctypes.data
    del a
    c = pool.take(0, 120)  # a's buffer is idle and large enough (a quarter more than asked)
    assert c.ctypes.data == ptr
    del c
    d = pool.take(0, 10_000)  # none fits: the idle buffer too small is replaced
    assert len(pool.pools[0]) == 3 and len(d) == 10_000
    del b
    e = pool.take(0, 10)  # then, in use: d; idle: b's
    assert not np.shares_memory(d, e)
    f = [pool.take(0, 50) for _ in range(4)]  # more held than cap: the oldest are not tracked
    assert len(pool.pools[0]) == 3
    assert len({x.ctypes.data for x in f}) == 4
    one = pool.batch()  # a batch's allocator: its k-th output from pool k
    x, y = one(8), one(8)
    assert x.base is pool.pools[0][-1] and y.base is pool.pools[1][1]


def test_outputs_is_per_thread_and_restores_the_allocator() -> None:
    pool = Values(cap=4)
    assert segments.new_output((3, 2), np.int32).base is None  # a new array
    other = []
    with segments.Outputs(pool.batch()):
        got = segments.new_output((3, 2), np.int32)
        assert got.shape == (3, 2) and got.dtype == np.int32
        assert got.base is pool.pools[0][1]
        t = threading.Thread(target=lambda: other.append(segments.new_output((4,), np.int64)))
        t.start()
        t.join()
        with segments.Outputs(lambda n: np.zeros(n, np.uint8)):
            assert not segments.new_output((5,), np.int16).any()
        assert segments.new_output((0, 2), np.int32).base is pool.pools[1][1]
    assert other[0].base is None  # another thread: a new array
    assert segments.new_output((1,), np.int8).base is None


@pytest.mark.parametrize(("workers", "reuse_after"), [(1, None), (2, None), (2, 2)])
def test_grouped_variable_size_batches_are_cut_exactly(tmp_path, workers, reuse_after):
    """Batches gathered in groups (one gather cut into batches) over fields whose dimensions
    vary beyond the first, over several parts, and empty samples: each batch is what
    ``ds.gather`` gives it alone, its offsets from 0."""
    rng = np.random.default_rng(8)
    n = 203
    path = tmp_path / "vary.chute"
    with chute.Writer(
        path,
        schema={"img": chute.Ragged("uint8", (None, 3)), "ids": chute.Ragged("int64")},
        part_size=37,
    ) as w:
        for i in range(n):
            h, wd = rng.integers(0, 5, 2)
            w.append({"img": rng.integers(0, 255, (h, wd, 3), np.uint8), "ids": np.arange(i % 9)})
    ds = chute.open(path)
    loader = chute.Loader(ds, 7, seed=1, num_workers=workers, reuse_after=reuse_after)
    assert loader.group > 1
    for epoch in range(2):
        loader.set_epoch(epoch)
        plan = loader.order.plan()
        got = list(loader) if reuse_after is None else None
        for k, batch in enumerate(got if got is not None else loader):
            want = ds.gather(plan[k])
            for name in ("img", "ids"):
                assert int(batch[name].offsets[0]) == 0
                assert torch.equal(batch[name].values, want[name].values), (epoch, k, name)
                assert torch.equal(batch[name].offsets, want[name].offsets), (epoch, k, name)
            assert torch.equal(batch["img"].shapes, want["img"].shapes)
            assert [t.shape for t in batch["img"]] == [t.shape for t in want["img"]]
        assert k == len(plan) - 1


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batch=st.integers(1, 40),
    workers=st.integers(1, 3),
    drop_last=st.booleans(),
    epoch=st.integers(0, 3),
    group_bytes=st.sampled_from([1, 600, 4000, 8 << 20]),
)
def test_every_grouping_gives_the_batches_gather_gives(
    docs, monkeypatch, batch, workers, drop_last, epoch, group_bytes
):
    """Whatever the batch size and however many batches a work item holds (1 to 32: the
    group's bytes), each batch is ``ds.gather`` of its indices, every field byte for byte."""
    monkeypatch.setattr(chute.loader.loader, "GROUP_BYTES", group_bytes)
    loader = chute.Loader(docs, batch, seed=epoch, num_workers=workers, drop_last=drop_last)
    loader.set_epoch(epoch)
    plan = loader.order.plan()
    got = list(loader)
    assert len(got) == len(plan)
    for k, b in enumerate(got):
        same(b, docs.gather(plan[k]))
