"""chute.from_shards: one dataset from N worker processes, shards in order, schemas of the
shards reconciled (equal-length documents stay Ragged, an all-empty field takes the others'
dtype), a failing shard leaves nothing behind."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

import chute
from chute import SchemaError

# shard -> the lengths of its documents; token t of document d of shard s is s*1000+d*10+t
SHARDS = {0: [3, 1, 4], 1: [2, 2, 2, 2], 2: [0, 5], 3: [], 4: [0, 0]}


def docs(shard: int):
    for d, n in enumerate(SHARDS[shard]):
        yield {"tokens": [shard * 1000 + d * 10 + t for t in range(n)], "shard": shard}


def floats(shard: int):
    yield {"tokens": np.zeros(2, np.float32 if shard else np.int32), "shard": shard}


def broken(shard: int):
    yield {"tokens": [1], "shard": shard}
    if shard == 2:
        raise RuntimeError("tokenizer failed on shard 2")


def expected() -> list[list[int]]:
    return [
        [s * 1000 + d * 10 + t for t in range(n)] for s in SHARDS for d, n in enumerate(SHARDS[s])
    ]


@pytest.mark.parametrize("context", [None, "spawn"])
def test_shards_become_one_dataset_in_order(tmp_path, context):
    mp = None if context is None else multiprocessing.get_context(context)
    out = chute.from_shards(
        list(SHARDS),
        docs,
        tmp_path / "d.chute",
        num_workers=2,
        progress=False,
        multiprocessing_context=mp,
    )
    ds = chute.open(out)
    assert ds.schema["tokens"] == chute.Ragged("int64")  # shard 1 alone would be a Tensor
    assert [p.name for p in ds.parts] == [f"part-{i:05d}" for i in range(4)]  # shard 3: none
    got = ds.gather(np.arange(len(ds)), pad=-1)
    lengths = got["tokens_lengths"].tolist()
    assert [row[:n] for row, n in zip(got["tokens"].tolist(), lengths, strict=True)] == expected()
    assert got["shard"].tolist() == [s for s in SHARDS for _ in SHARDS[s]]
    chute.verify(out)


def test_declared_schema(tmp_path):
    schema = {"tokens": chute.Ragged("int32"), "shard": chute.fields.Tensor((), "int64")}
    ds = chute.open(
        chute.from_shards([1, 3, 2], docs, tmp_path / "d.chute", schema, progress=False)
    )
    assert dict(ds.schema) == schema and len(ds) == 4 + 0 + 2
    assert ds[5]["tokens"].tolist() == [2010, 2011, 2012, 2013, 2014]


def test_a_failing_shard_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="shard 2"):
        chute.from_shards([0, 1, 2], broken, tmp_path / "d.chute", progress=False)
    assert not (tmp_path / "d.chute").exists()
    assert list(tmp_path.iterdir()) == []  # no staging folder either


def test_shards_that_disagree(tmp_path):
    with pytest.raises(SchemaError, match=r"field 'tokens' differs between the shards"):
        chute.from_shards([0, 1], floats, tmp_path / "d.chute", progress=False)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SchemaError, match="no samples"):
        chute.from_shards([3], docs, tmp_path / "e.chute", progress=False)
