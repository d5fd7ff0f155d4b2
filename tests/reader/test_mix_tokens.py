"""chute.mix(by="tokens"): weights hold for tokens (within a document's worth per source),
counts stay exact; source_field= renames the source field."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from _tokens import documents, write_docs
from hypothesis import given, settings
from hypothesis import strategies as st

import chute
from chute import ArgumentValueError, SchemaError


@settings(max_examples=30, deadline=None)
@given(
    a=st.lists(st.integers(1, 80), min_size=1, max_size=40),
    b=st.lists(st.integers(1, 80), min_size=1, max_size=40),
    wa=st.integers(1, 9),
    size=st.integers(50, 400),
)
def test_token_weights_hold_within_a_document(a, b, wa, size):
    with tempfile.TemporaryDirectory() as tmp:
        da = write_docs(Path(tmp) / "a.chute", documents(a))
        db = write_docs(Path(tmp) / "b.chute", documents(b))
        weights = {"a": wa / 10, "b": 1 - wa / 10}
        m = chute.mix({"a": da, "b": db}, weights=weights, epoch_size=size, by="tokens")
        planned = {n: m.counts[n] * np.mean(x) for n, x in (("a", a), ("b", b))}
        total = sum(planned.values())
        for name in ("a", "b"):  # the tokens planned: the weight within a document's worth
            assert abs(planned[name] - weights[name] * total) <= max(a + b) + 1e-6
        assert sum(m.counts.values()) == size
        got = m.gather(np.arange(len(m)), epoch=1)["source"].numpy()
        assert (got == 0).sum() == m.counts["a"]  # counts exact


def test_a_code_weight_of_0_3_gives_0_3_of_the_tokens(tmp_path):
    web = write_docs(tmp_path / "w.chute", documents([40] * 3000))
    code = write_docs(tmp_path / "c.chute", documents([900] * 300))
    sources = {"web": web, "code": code}
    weights = {"web": 0.7, "code": 0.3}

    def code_share(m: chute.Mix) -> float:
        b = m.gather(np.arange(len(m)))
        lengths = np.diff(b["tokens"].offsets.numpy())
        return lengths[b["source"].numpy() == 1].sum() / lengths.sum()

    assert code_share(chute.mix(sources, weights=weights)) > 0.85  # by documents
    by_tokens = chute.mix(sources, weights=weights, by="tokens")
    total = by_tokens.counts["web"] * 40 + by_tokens.counts["code"] * 900
    assert abs(code_share(by_tokens) - 0.3) <= 900 / total  # within one document's worth


def test_source_field(tmp_path):
    with chute.Writer(tmp_path / "x.chute") as w:
        w.append({"source": 3, "y": 1})
    ds = chute.open(tmp_path / "x.chute")
    with pytest.raises(SchemaError, match="source_field="):
        chute.mix({"a": ds, "b": ds})
    m = chute.mix({"a": ds, "b": ds}, source_field="origin")
    got = m.gather([0, 1])
    assert got["source"].tolist() == [3, 3] and sorted(got["origin"].tolist()) == [0, 1]
    assert set(m[0]) == {"source", "y", "origin"}
    with pytest.raises(ArgumentValueError, match="by="):
        chute.mix({"a": ds}, by="tokens")
    with pytest.raises(ArgumentValueError, match="by="):
        chute.mix({"a": ds}, weights={"a": 1}, by="bytes")
