"""chute.dataloader(batch_tokens=, max_length=) in real worker processes: the same batches as
Loader(batch_tokens=), each within the budget, equal steps on every rank, resume exact with
another world size; and the order's prepare hook given each plan's indices once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import chute
from chute.order.by_tokens import BatchByTokens

N = 300


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(3)
    lengths = np.minimum(rng.lognormal(3.5, 1.1, N).astype(int), 900)
    path = tmp_path_factory.mktemp("tok") / "d.chute"
    with chute.Writer(
        path, {"tokens": chute.Ragged("int32"), "y": chute.fields.Tensor((), "int64")}
    ) as w:
        for i, n in enumerate(lengths):
            w.append({"tokens": np.full(n, i, np.int32), "y": i})
    return path, lengths


def ys(batches: list[dict]) -> list[list[int]]:
    return [b["y"].tolist() for b in batches]


@pytest.mark.slow  # worker processes
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_worker_processes_give_the_loaders_token_batches(docs, context):
    path, lengths = docs
    ds = chute.open(path)
    options = {"batch_size": 32, "batch_tokens": 1024, "max_length": 256, "seed": 2}
    dl = chute.dataloader(
        ds, **options, pad=-1, num_workers=2, multiprocessing_context=context, pin_memory=False
    )
    got = list(dl)
    want = ys(list(chute.Loader(ds, **options, pad=-1, num_workers=0)))
    assert ys(got) == want and len(got) == len(dl)
    assert sorted(y for b in want for y in b) == list(range(N))
    for b in got:
        assert b["tokens"].numel() <= 1024 or len(b["y"]) == 1
        assert b["tokens"].shape[1] <= 256
        kept = np.minimum(lengths[b["y"].numpy()], 256)
        assert (b["tokens_lengths"].numpy() == kept).all()


@pytest.mark.slow  # worker processes
def test_resume_with_another_world_size_in_lockstep(docs):
    path, _ = docs
    ds = chute.open(path)
    options = {"batch_size": 16, "batch_tokens": 512, "seed": 5, "pin_memory": False}
    dl = chute.dataloader(ds, **options, num_workers=2, rank=0, world_size=1)
    it = iter(dl)
    first = [next(it)["y"].tolist() for _ in range(4)]
    state = dl.state_dict()
    assert state["consumed"] == 4  # batches received, not those the workers prefetched
    del it
    ranks = []
    for r in range(3):
        part = chute.dataloader(ds, **options, num_workers=1, rank=r, world_size=3)
        part.load_state_dict(state)
        steps = part.remaining()
        ranks.append(ys(list(part)))
        assert len(ranks[-1]) == steps
    assert len({len(r) for r in ranks}) == 1  # equal steps on every rank
    rest = [y for step in zip(*ranks, strict=True) for b in step for y in b]
    seen = [y for b in first for y in b] + rest
    assert set(seen) == set(range(N))
    assert len(seen) - N < 3 * max(map(len, first + ranks[0]))  # only the last step wraps


def test_refused_as_in_the_loader(docs, tmp_path):
    path, _ = docs
    ds = chute.open(path)
    with pytest.raises(chute.ArgumentValueError, match="block_size"):
        chute.dataloader(ds, 4, batch_tokens=10, block_size=2, num_workers=0)
    flat = chute.open(chute.write(tmp_path / "f.chute", {"x": np.arange(10)}))
    with pytest.raises(chute.SchemaError, match=r"dataloader\(batch_tokens=\).*no Ragged"):
        chute.dataloader(flat, 4, batch_tokens=10, num_workers=0)


def test_prepare_gets_each_plans_indices_once():
    order = BatchByTokens(np.arange(40) % 7, 12, 4, seed=1, rank=1, world_size=2)
    calls: list[tuple[np.ndarray, int]] = []
    order.prepare = lambda idx, epoch: calls.append((idx, epoch))
    order.set_epoch(3)
    batches = list(order.batches())
    assert len(calls) == 1 and calls[0][1] == 3
    np.testing.assert_array_equal(calls[0][0], np.concatenate(batches))


@pytest.mark.slow  # worker processes
def test_worker_processes_batch_packed_rows_by_their_length(docs):
    path, _ = docs
    rows = chute.pack(chute.open(path, fields=["tokens"]), "tokens", 128, labels="next")
    options = {"batch_tokens": 1000, "seed": 4, "pad": {"cu_seqlens": -1}}
    dl = chute.dataloader(rows, 16, **options, num_workers=2, pin_memory=False)
    got, want = list(dl), list(chute.Loader(rows, 16, **options, num_workers=0))
    assert len(got) == len(want) == len(dl)
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
        assert a["tokens"].shape[0] <= 1000 // 128 and a["tokens"].shape[1] == 128
    assert sum(len(b["tokens"]) for b in got) == len(rows)
