"""chute.mix: exact counts per source per epoch (weights, repeat), across epochs and ranks;
determinism; resume with another world size; Loader and chute.dataloader over real datasets."""

from __future__ import annotations

import math
import pickle
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import chute
from chute import ArgumentError, ArgumentValueError, SchemaError

SIZES = (1, 2, 5, 13, 40, 97)  # the pool of sources the property tests draw from
BASE = 1000  # sample i of pool source k has id k * BASE + i


def _write(path, k: int, n: int, extra: bool = False, xdtype=np.int64):
    ids = np.arange(n, dtype=np.int64) + k * BASE
    arrays = {
        "id": ids.astype(xdtype),
        "vec": np.stack([ids, -ids], axis=1).astype(np.float32),
        "tok": [np.arange(i % 5, dtype=np.int32) + int(i) for i in ids],
        "name": [f"s{k}-{i}" for i in range(n)],
    }
    schema = {
        "id": chute.fields.Tensor((), np.dtype(xdtype).name),
        "vec": chute.fields.Tensor((2,), "float32"),
        "tok": chute.Ragged("int32"),
        "name": chute.String(),
    }
    if extra:
        arrays["url"] = [f"http://{i}" for i in range(n)]
        schema["url"] = chute.String()
    return chute.open(chute.write(path, arrays, schema=schema))


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    root = tmp_path_factory.mktemp("pool")
    return {f"s{k}": _write(root / f"s{k}.chute", k, n) for k, n in enumerate(SIZES)}


@pytest.fixture(scope="module")
def fixed_pool(tmp_path_factory):
    """Two sources with fixed-shape fields only (the Loader then gathers groups of batches)."""
    root = tmp_path_factory.mktemp("fixed")
    out = {}
    for k, n in ((0, 300), (1, 50)):
        ids = np.arange(n, dtype=np.int64) + k * BASE
        out[f"f{k}"] = chute.open(chute.write(root / f"f{k}.chute", {"id": ids}))
    return out


def per_source(m: chute.Mix, epoch: int) -> Counter:
    src, _ = m.locate(np.arange(len(m)), epoch)
    return Counter(m.sources[s] for s in src.tolist())


def quota_ok(counts: list[int], weights: list[float], n: int) -> None:
    """Largest remainder: each count is its quota's floor or ceiling, summing to n, and no
    source rounded down has a larger remainder than one rounded up (ties: the first given)."""
    w = [Fraction(x) for x in weights]
    quotas = [n * x / sum(w) for x in w]
    assert sum(counts) == n
    ups, downs = [], []
    for i, (c, q) in enumerate(zip(counts, quotas, strict=True)):
        assert c in (math.floor(q), math.ceil(q))
        (ups if c > q else downs).append((q - math.floor(q), i))
    if ups and downs:
        low_up = min(ups, key=lambda t: (t[0], -t[1]))
        assert all(r < low_up[0] or (r == low_up[0] and i > low_up[1]) for r, i in downs)


names = st.lists(
    st.sampled_from([f"s{k}" for k in range(len(SIZES))]), min_size=1, max_size=4, unique=True
)


@settings(max_examples=80, deadline=None)
@given(names, st.data(), st.integers(0, 2**32), st.integers(0, 4))
def test_weights_give_exact_counts_every_epoch(pool, picked, data, seed, epoch):
    weights = {n: data.draw(st.floats(0, 10), label=n) for n in picked}
    assume(any(w > 0 for w in weights.values()))
    size = data.draw(st.none() | st.integers(1, 400), label="epoch_size")
    m = chute.mix({n: pool[n] for n in picked}, weights=weights, epoch_size=size, seed=seed)
    counts = [m.counts[n] for n in picked]
    quota_ok(counts, [weights[n] for n in picked], len(m))
    if size is None:  # no source read more than once per epoch; one more would break that
        total = sum(Fraction(w) for w in weights.values())
        assert all(m.counts[n] <= len(pool[n]) for n in picked)
        assert any(
            w and (len(m) + 1) * Fraction(w) / total > len(pool[n]) for n, w in weights.items()
        )
    else:
        assert len(m) == size
    assert per_source(m, epoch) == Counter({n: c for n, c in m.counts.items() if c})
    _, idx = m.locate(np.arange(len(m)), epoch)
    assert idx.dtype == np.int64


@settings(max_examples=60, deadline=None)
@given(names, st.data(), st.integers(0, 2**32))
def test_repeat_counts_and_every_sample_before_any_repeats(pool, picked, data, seed):
    reps = {
        n: data.draw(st.sampled_from([0, 0.5, 1, 1.5, 2, 3]) | st.floats(0, 4), label=n)
        for n in picked
    }
    want = {n: math.floor(len(pool[n]) * Fraction(r) + Fraction(1, 2)) for n, r in reps.items()}
    assume(sum(want.values()) > 0)
    m = chute.mix({n: pool[n] for n in picked}, repeat=reps, seed=seed)
    assert m.counts == want and len(m) == sum(want.values())
    seen = {n: Counter() for n in picked}
    for epoch in range(4):
        batch = m.gather(np.arange(len(m)), epoch=epoch)
        got = Counter(m.sources[s] for s in batch["source"].tolist())
        assert got == Counter({n: c for n, c in want.items() if c})
        for s, i in zip(batch["source"].tolist(), batch["id"].tolist(), strict=True):
            seen[m.sources[s]][i] += 1
        for n in picked:  # cumulatively: every sample used k or k+1 times, never more apart
            if want[n]:
                uses = [seen[n][_id(n, i)] for i in range(len(pool[n]))]
                assert max(uses) - min(uses) <= 1
        if all(float(r).is_integer() for r in reps.values()) and epoch == 0:
            for n in picked:  # an integer repeat r: each sample exactly r times per epoch
                assert set(seen[n].values()) <= {int(reps[n])}


def _id(name: str, i: int) -> int:
    return int(name[1:]) * BASE + i


def test_default_epoch_size_reads_the_scarcest_source_once(pool):
    m = chute.mix({"s3": pool["s3"], "s4": pool["s4"]}, weights={"s3": 0.7, "s4": 0.3})
    # s3 (13 samples) at 0.7 runs out first: 13 / 0.7 = 18.57 -> 18 samples per epoch
    assert len(m) == 18 and m.counts == {"s3": 13, "s4": 5}
    m = chute.mix({"s3": pool["s3"], "s4": pool["s4"]})  # neither: each read once
    assert m.counts == {"s3": 13, "s4": 40}
    m = chute.mix({"s3": pool["s3"], "s4": pool["s4"]}, repeat={"s3": 3, "s4": 0.5})
    assert m.counts == {"s3": 39, "s4": 20}


def test_gather_matches_samples_and_sources(pool):
    m = chute.mix(
        {"a": pool["s4"], "b": pool["s5"], "c": pool["s2"]},
        weights={"a": 2, "b": 1, "c": 1},
        epoch_size=101,
        seed=5,
    )
    assert m.sources == ("a", "b", "c")
    m.set_epoch(2)
    pos = np.random.default_rng(0).permutation(len(m))[:37]
    batch = m.gather(pos)
    assert list(batch) == ["id", "vec", "tok", "name", "source"]
    assert batch["source"].dtype == torch.int64 and batch["id"].dtype == torch.int64
    for j, p in enumerate(pos.tolist()):
        one = m[p]
        src = m.sources[int(batch["source"][j])]
        k = {"a": 4, "b": 5, "c": 2}[src]
        assert int(one["source"]) == int(batch["source"][j])
        assert int(batch["id"][j]) // BASE == k  # the id says which pool source it came from
        assert int(one["id"]) == int(batch["id"][j])
        assert torch.equal(batch["vec"][j], one["vec"])
        assert torch.equal(batch["tok"][j], one["tok"])
        assert batch["name"][j] == one["name"] == f"s{k}-{int(one['id']) - k * BASE}"
    padded = m.gather(pos, pad=-1)
    lengths = padded["tok_lengths"]
    assert lengths.tolist() == [len(batch["tok"][j]) for j in range(len(pos))]
    for j in range(len(pos)):
        assert torch.equal(padded["tok"][j, : lengths[j]], batch["tok"][j])
    out = m.empty_batch(64)
    assert set(out) == {"id", "vec", "source"}
    got = m.gather(pos, out=out)
    assert got["id"].data_ptr() == out["id"].data_ptr() and torch.equal(got["id"], batch["id"])
    assert torch.equal(got["source"], batch["source"])
    assert m.gather(np.zeros(0, np.int64))["tok"].offsets.tolist() == [0]


def test_pure_function_of_seed_and_epoch(pool):
    def make(seed):
        return chute.mix(
            {"a": pool["s4"], "b": pool["s3"]}, weights={"a": 1, "b": 1}, epoch_size=50, seed=seed
        )

    ids = {
        (s, e): make(s).gather(np.arange(50), epoch=e)["id"].tolist()
        for s in range(3)
        for e in range(3)
    }
    assert len({tuple(v) for v in ids.values()}) == 9
    again = make(1)
    again.set_epoch(7)  # history and the default epoch do not matter
    assert again.gather(np.arange(50), epoch=2)["id"].tolist() == ids[(1, 2)]
    assert again.at_epoch(2).gather(np.arange(50))["id"].tolist() == ids[(1, 2)]
    assert again.epoch == 7


def rank_streams(make_loader, world: int, epoch: int) -> list[list[dict]]:
    out = []
    for r in range(world):
        loader = make_loader(r, world)
        loader.set_epoch(epoch)
        out.append(list(loader))
    return out


def global_stream(per_rank: list[list[dict]], key: str) -> list[int]:
    steps = len(per_rank[0])
    assert {len(b) for b in per_rank} == {steps}  # equal steps on every rank
    return [v for j in range(steps) for r in per_rank for v in r[j][key].tolist()]


@pytest.mark.parametrize("world", [1, 3, 4])
def test_loader_ranks_together_give_the_exact_counts(pool, world):
    m = chute.mix({"a": pool["s4"], "b": pool["s5"]}, weights={"a": 0.3, "b": 0.7}, epoch_size=90)
    for epoch in (0, 1):

        def make(r, w):
            return chute.Loader(m, 8, seed=3, rank=r, world_size=w, num_workers=0)

        per_rank = rank_streams(make, world, epoch)
        sources = global_stream(per_rank, "source")
        ids = global_stream(per_rank, "id")
        assert len(sources) - len(m) < world  # the padding only
        got = Counter(m.sources[s] for s in sources[: len(m)])
        assert got == Counter(m.counts)
        whole = m.gather(np.arange(len(m)), epoch=epoch)
        assert sorted(ids[: len(m)]) == sorted(whole["id"].tolist())


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 12), st.integers(1, 12), st.data())
def test_resume_with_another_world_size_is_exact(pool, world1, world2, bs1, bs2, data):
    m = chute.mix({"a": pool["s3"], "b": pool["s4"]}, repeat={"a": 2, "b": 0.5})
    want = [b["id"].tolist() for b in _epoch(chute.Loader(m, 1, seed=9, num_workers=0), epoch=1)]
    want = [i for b in want for i in b]
    first = [
        chute.Loader(m, bs1, seed=9, rank=r, world_size=world1, num_workers=0)
        for r in range(world1)
    ]
    for ld in first:
        ld.set_epoch(1)
    steps = data.draw(st.integers(0, len(first[0])))
    its = [iter(ld) for ld in first]
    seen = [[next(it) for it in its] for _ in range(steps)]
    state = first[0].state_dict()
    assert all(ld.state_dict() == state for ld in first)
    second = [
        chute.Loader(m, bs2, seed=9, rank=r, world_size=world2, num_workers=0)
        for r in range(world2)
    ]
    for ld in second:
        ld.load_state_dict(state)
        ld.set_epoch(1)
    rest = [list(ld) for ld in second]
    ids = [i for step in seen for b in step for i in b["id"].tolist()]
    if rest[0]:
        ids += global_stream(rest, "id")
    assert ids[: len(m)] == want  # none repeated, none lost, in the same order


def _epoch(loader, epoch):
    loader.set_epoch(epoch)
    return list(loader)


def test_loader_threads_ring_and_groups(pool, fixed_pool):
    m = chute.mix({"a": pool["s5"], "b": pool["s2"]}, weights={"a": 0.5, "b": 0.5})
    for keep in (None, 2):
        loader = chute.Loader(m, 7, seed=1, num_workers=2, reuse_after=keep)
        ids = [i for b in loader for i in b["id"].tolist()]
        whole = m.gather(np.arange(len(m)), epoch=0)["id"].tolist()
        assert sorted(ids) == sorted(whole)
    f = chute.mix(fixed_pool, weights={"f0": 1, "f1": 1})  # 100 per epoch, 50 each
    loader = chute.Loader(f, 4, seed=2, num_workers=2)
    assert loader.group > 1  # several batches gathered at once from the mix
    for epoch in range(2):
        loader.set_epoch(epoch)
        batches = list(loader)
        src = torch.cat([b["source"] for b in batches])
        ids = torch.cat([b["id"] for b in batches])
        assert Counter(src.tolist()) == {0: 50, 1: 50}
        assert torch.equal(ids // BASE, src)
        assert sorted(ids.tolist()) == sorted(f.gather(np.arange(100), epoch=epoch)["id"].tolist())


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_epochs_over_a_mix(tmp_path, workers):
    a = _write(tmp_path / "a.chute", 0, 30)
    b = _write(tmp_path / "b.chute", 1, 10)
    m = chute.mix({"a": a, "b": b}, repeat={"a": 1, "b": 2})
    dl = chute.dataloader(
        m, 8, seed=4, num_workers=workers, persistent_workers=workers > 0, pin_memory=False
    )
    epochs = []
    for epoch in range(2):
        dl.set_epoch(epoch)
        batches = list(dl)
        ids = [i for bt in batches for i in bt["id"].tolist()]
        src = [s for bt in batches for s in bt["source"].tolist()]
        assert Counter(src) == {0: 30, 1: 20}
        expect = [
            i
            for idx in _plan(chute.Order(len(m), 8, seed=4), epoch)
            for i in m.gather(idx, epoch=epoch)["id"].tolist()
        ]
        assert ids == expect  # the workers read the loader's epoch, not the mix's default
        epochs.append(ids)
    assert epochs[0] != epochs[1]
    per_sample = chute.dataloader(
        m, 8, seed=4, num_workers=0, sample_transform=lambda s: s["id"], pin_memory=False
    )
    per_sample.set_epoch(1)
    assert [i for bt in per_sample for i in bt.tolist()] == epochs[1]


def _plan(order, epoch):
    order.set_epoch(epoch)
    return list(order.plan())


def test_loader_over_real_datasets_written_here(tmp_path):
    web = _write(tmp_path / "web.chute", 0, 70)
    code = _write(tmp_path / "code.chute", 1, 30)
    m = chute.mix({"web": web, "code": code}, weights={"web": 0.7, "code": 0.3}, epoch_size=60)
    assert m.counts == {"web": 42, "code": 18}
    loader = chute.Loader(m, 16, num_workers=2, pad=0)
    for epoch in range(3):
        loader.set_epoch(epoch)
        batches = list(loader)
        assert [len(b["id"]) for b in batches] == [16, 16, 16, 12]
        src = torch.cat([b["source"] for b in batches]).tolist()
        assert Counter(src) == {0: 42, 1: 18}
        assert "tok_lengths" in batches[0]
    # 70 web samples at 42 an epoch: epochs 0 and 1 (84) see every web sample at least once
    loader.set_epoch(0)
    seen = {i for e in (0, 1) for b in _epoch(loader, e) for i in b["id"].tolist() if i < BASE}
    assert seen == set(range(70))


def test_sources_with_different_fields(tmp_path):
    a = _write(tmp_path / "a.chute", 0, 5, extra=True)
    b = _write(tmp_path / "b.chute", 1, 5)
    with pytest.raises(SchemaError, match=r"'a' also has \['url'\].*fields="):
        chute.mix({"a": a, "b": b})
    m = chute.mix({"a": a, "b": b}, fields=["id", "name"])
    assert list(m.schema) == ["id", "name", "source"]
    assert list(m.gather([0, 1, 2])) == ["id", "name", "source"]
    with pytest.raises(SchemaError, match=r"source 'b' has no field\(s\) \['url'\]"):
        chute.mix({"a": a, "b": b}, fields=["url"])
    c = _write(tmp_path / "c.chute", 2, 5, xdtype=np.int32)
    with pytest.raises(SchemaError, match=r"field 'id' differs between the sources .*int32"):
        chute.mix({"b": b, "c": c})
    assert list(chute.mix({"b": b, "c": c}, fields=["vec"]).schema) == ["vec", "source"]
    s = chute.open(chute.write(tmp_path / "s.chute", {"source": np.arange(3)}))
    with pytest.raises(SchemaError, match="clash"):
        chute.mix({"s": s, "t": s})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"weights": {"a": 1}, "repeat": {"a": 1, "b": 1}}, "not both"),
        ({"weights": {"a": 1}}, r"missing \['b'\]"),
        ({"weights": {"a": 1, "b": 1, "z": 1}}, r"unknown \['z'\]"),
        ({"weights": {"a": -1, "b": 1}}, ">= 0"),
        ({"weights": {"a": float("nan"), "b": 1}}, "finite"),
        ({"weights": {"a": "x", "b": 1}}, "must be a number"),
        ({"weights": {"a": 0, "b": 0}}, "all 0"),
        ({"repeat": {"a": 1, "b": 1}, "epoch_size": 5}, "epoch_size= goes with weights"),
        ({"repeat": {"a": 0, "b": 0}}, "no samples"),
        ({"weights": [1, 2]}, "takes a dict"),
        ({"weights": {"a": 1, "b": 1}, "epoch_size": 0}, "epoch_size must be >= 1"),
    ],
)
def test_bad_arguments(pool, kwargs, match):
    wrong_type = match in ("must be a number", "takes a dict")
    with pytest.raises(ArgumentError if wrong_type else ArgumentValueError, match=match):
        chute.mix({"a": pool["s0"], "b": pool["s1"]}, **kwargs)


def test_empty_source_with_weight_and_other_refusals(tmp_path, pool):
    empty = chute.open(chute.write(tmp_path / "e.chute", {"id": np.zeros(0, np.int64)}))
    one = chute.open(chute.write(tmp_path / "o.chute", {"id": np.arange(4)}))
    with pytest.raises(ArgumentValueError, match="'e' is empty"):
        chute.mix({"e": empty, "o": one}, weights={"e": 1, "o": 1})
    assert chute.mix({"e": empty, "o": one}, weights={"e": 0, "o": 1}).counts == {"e": 0, "o": 4}
    assert chute.mix({"e": empty, "o": one}).counts == {"e": 0, "o": 4}
    with pytest.raises(ArgumentError, match="non-empty dict"):
        chute.mix({})
    m = chute.mix({"o": one})
    with pytest.raises(ArgumentError, match="'m' is a mix"):
        chute.mix({"m": m, "o": one})
    with chute.Writer(tmp_path / "t.chute", {"t": chute.Ragged("int64")}) as w:
        for k in range(1, 9):
            w.append({"t": np.arange(k)})
    shifting = chute.windows(chute.open(tmp_path / "t.chute"), "t", 4, random_offset=True)
    with pytest.raises(ArgumentError, match=r"samples change per epoch.*plain windows"):
        chute.mix({"w": shifting, "o": one})
    train, _ = torch.utils.data.random_split(m, [0.5, 0.5])
    with pytest.raises(ArgumentValueError, match=r"Subset of a chute\.mix"):
        chute.Loader(train, 2)
    with pytest.raises(chute.SampleIndexError):
        m.gather([4])


def test_a_subset_of_a_source_is_a_source(pool):
    train, held = torch.utils.data.random_split(
        pool["s5"], [0.8, 0.2], generator=torch.Generator().manual_seed(0)
    )
    m = chute.mix({"train": train, "other": pool["s2"]}, fields=["id"])
    ids = m.gather(np.arange(len(m)))["id"].tolist()
    assert m.counts == {"train": len(train), "other": 5}
    train_ids = {5 * BASE + i for i in train.indices}
    assert {i for i in ids if i >= 5 * BASE} == train_ids
    assert not {5 * BASE + i for i in held.indices} & set(ids)


def test_a_mix_pickles_small_and_reads_the_same(pool):
    import pickle

    m = chute.mix({"a": pool["s5"], "b": pool["s4"]}, weights={"a": 1, "b": 3}, seed=2)
    blob = pickle.dumps(m.at_epoch(3))
    assert len(blob) < 20_000  # paths and manifests, never per-sample state
    back = pickle.loads(blob)
    assert back.epoch == 3 and back.counts == m.counts
    pos = np.arange(len(m))
    assert back.gather(pos)["id"].tolist() == m.gather(pos, epoch=3)["id"].tolist()
    assert "of 97" in repr(m)


def test_a_loader_locates_each_chunk_once_and_gets_the_same_batches(tmp_path):
    """The loaders hand a mix's ``prepare`` each chunk of positions their order computes;
    the batches are those of a mix that locates every batch on its own."""
    for name, size in (("a", 700), ("b", 300)):
        chute.write(tmp_path / name, {"x": np.arange(size, dtype=np.int64) + 10_000 * len(name)})
    m = chute.mix({"a": chute.open(tmp_path / "a"), "b": chute.open(tmp_path / "b")}, seed=3)
    loader = chute.Loader(m, batch_size=64, seed=1, num_workers=2)
    loader.set_epoch(2)
    got = [(b["source"].tolist(), b["x"].tolist()) for b in loader]
    assert len(m._located) >= 1  # prepared ahead
    fresh = pickle.loads(pickle.dumps(m))  # no caches travel
    assert not fresh._located and not fresh._perms
    order = chute.Order(len(fresh), 64, seed=1)
    order.set_epoch(2)
    want = []
    for idx in order.batches():
        b = fresh.gather(idx, epoch=2)
        want.append((b["source"].tolist(), b["x"].tolist()))
    assert got == want


def test_a_loader_made_after_mix_set_epoch_starts_at_that_epoch(tmp_path):
    for name, size in (("a", 60), ("b", 40)):
        chute.write(tmp_path / name, {"x": np.arange(size, dtype=np.int64)})
    m = chute.mix({"a": chute.open(tmp_path / "a"), "b": chute.open(tmp_path / "b")}, seed=5)
    m.set_epoch(2)
    loader = chute.Loader(m, batch_size=10, shuffle=False, num_workers=0)
    assert loader.state_dict()["epoch"] == 2
    got = torch.cat([b["x"] for b in loader]).tolist()
    assert got == m.gather(np.arange(len(m)), epoch=2)["x"].tolist()
    assert [m[i]["x"].item() for i in range(5)] == got[:5]  # mix[i] reads the same epoch
