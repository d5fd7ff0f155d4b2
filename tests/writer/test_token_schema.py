"""The schema traps of token data: an empty first document does not make ids floats, a declared
Ragged field stays Ragged when every document has one length (and pad= gives its lengths),
appending keeps it Ragged, and such shards mix with ragged ones."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import chute


@pytest.mark.parametrize("first", [[], np.zeros(0), np.zeros(0, np.int16), torch.zeros(0)])
def test_an_empty_first_document_does_not_decide_the_dtype(tmp_path, first):
    with chute.Writer(tmp_path / "a.chute") as w:
        w.append({"ids": first, "y": 0})
        w.append({"ids": [], "y": 1})
        w.append({"ids": [7, 8, 9], "y": 2})
        w.append({"ids": np.array([5], np.int64), "y": 3})
    ds = chute.open(tmp_path / "a.chute")
    assert ds.schema["ids"] == chute.Ragged("int64")
    batch = ds.gather([0, 1, 2, 3], pad=-1)
    assert batch["ids"].tolist() == [[-1, -1, -1], [-1, -1, -1], [7, 8, 9], [5, -1, -1]]
    assert batch["ids_lengths"].tolist() == [0, 0, 3, 1]


def test_from_iterable_and_extend_with_an_empty_first_row(tmp_path):
    rows = ({"ids": list(range(i % 4))} for i in range(10))  # an HF column whose row 0 is []
    ds = chute.open(chute.from_iterable(rows, tmp_path / "b.chute", progress=False))
    assert ds.schema["ids"] == chute.Ragged("int64")
    assert ds[3]["ids"].tolist() == [0, 1, 2]
    with chute.Writer(tmp_path / "c.chute") as w:
        w.extend({"ids": [[], [1.5, 2.5]]})  # floats decide float
    assert chute.open(tmp_path / "c.chute").schema["ids"] == chute.Ragged("float64")


def test_all_empty_documents_keep_a_field(tmp_path):
    with chute.Writer(tmp_path / "e.chute") as w:
        w.append({"ids": []})
        w.append({"ids": []})
    ds = chute.open(tmp_path / "e.chute")
    assert len(ds) == 2 and ds[1]["ids"].numel() == 0


def test_declared_ragged_stays_ragged_with_equal_lengths(tmp_path):
    docs = [np.arange(4, dtype=np.int32) + i for i in range(6)]
    schema = {"ids": chute.Ragged("int32")}
    with chute.Writer(tmp_path / "eq.chute", schema) as w:
        for d in docs:
            w.append({"ids": d})
    ds = chute.open(tmp_path / "eq.chute")
    assert ds.schema["ids"] == chute.Ragged("int32")
    batch = ds.gather([0, 5], pad=0)
    assert batch["ids_lengths"].tolist() == [4, 4]
    loader = chute.Loader(ds, batch_size=3, pad=0, num_workers=0, shuffle=False)
    assert all(b["ids_lengths"].tolist() == [4, 4, 4] for b in loader)
    # appending keeps the dataset's Ragged field, whatever the new documents' lengths
    with chute.Writer(tmp_path / "eq.chute", append=True) as w:
        w.append({"ids": np.arange(2, dtype=np.int32)})
    assert chute.open(tmp_path / "eq.chute").schema["ids"] == chute.Ragged("int32")
    # and it mixes with a ragged shard
    with chute.Writer(tmp_path / "rag.chute", schema) as w:
        for n in (1, 5, 2):
            w.append({"ids": np.arange(n, dtype=np.int32)})
    m = chute.mix({"eq": ds, "rag": chute.open(tmp_path / "rag.chute")})
    got = m.gather(np.arange(len(m)), pad=0)
    assert sorted(got["ids_lengths"].tolist()) == [1, 2, 4, 4, 4, 4, 4, 4, 5]


def test_an_int_never_goes_into_a_float_field(tmp_path):
    with chute.Writer(tmp_path / "i.chute") as w:
        w.append({"ids": []})
        w.append({"ids": [1, 2]})
        w.append({"ids": [3]})
    ds = chute.open(tmp_path / "i.chute")
    assert ds.schema["ids"].dtype == "int64"
    with (
        pytest.raises(chute.SchemaError, match=r"field 'ids', sample 3"),
        chute.Writer(tmp_path / "j.chute", {"ids": chute.Ragged("int32")}) as w,
    ):
        w.append({"ids": []})
        w.append({"ids": [1]})
        w.append({"ids": np.zeros(0, np.float32)})  # empty: fits
        w.append({"ids": [0.5]})
