"""Hostile arguments and data for the token views' aligned fields and per-epoch windows: a
document whose aligned field has another length than its tokens, fields that cannot be
aligned, bad labels / fill / epoch arguments: each refused with a chute error naming the
field, the document or the argument."""

from __future__ import annotations

import numpy as np
import pytest
from _chat import IGNORE, chat_documents, write_chat
from _reliability import recorded

import chute
from chute import ArgumentError, ArgumentValueError, SchemaError
from chute.reader.window_order import epoch_offset

_row = recorded(
    {
        "test_mismatched_lengths_and_bad_arguments": (
            "token views: aligned fields",
            "a loss mask one value longer than its document's tokens (in the second part); "
            "a missing field, a field named twice, an empty list, a fixed-shape field beside "
            "Ragged tokens, unknown labels=, label_mask= without labels, fill= that does not fit",
            "SchemaError naming the field, the document and both lengths (pack: at "
            "construction; windows: when the part is first read); ArgumentError / "
            "ArgumentValueError naming the argument",
        ),
        "test_per_epoch_arguments_refused": (
            "token views: per-epoch windows",
            "random_offset with drop_tail=False, shuffle_documents on a flat stream, a "
            "negative epoch",
            "ArgumentValueError naming the argument",
        ),
    }
)


def test_mismatched_lengths_and_bad_arguments(tmp_path):
    schema = {"tokens": chute.Ragged("int32"), "mask": chute.Ragged("uint8")}
    with chute.Writer(tmp_path / "bad.chute", schema, part_size=2) as w:
        for n, m in ((3, 3), (4, 4), (5, 5), (2, 3)):
            w.append({"tokens": np.arange(n, dtype=np.int32), "mask": np.ones(m, np.uint8)})
    bad = chute.open(tmp_path / "bad.chute")
    with pytest.raises(SchemaError, match=r"field 'mask' of document 3 has 3 values.*'tokens' 2"):
        chute.pack(bad, ["tokens", "mask"], 8)
    w = chute.windows(bad, ["tokens", "mask"], 2)
    w.gather([0])  # part 0 is aligned
    with pytest.raises(SchemaError, match="field 'mask' of document 3"):
        w.gather(np.arange(len(w)))
    docs = chat_documents(4, 0)
    ds = write_chat(tmp_path / "c.chute", docs, None)
    with pytest.raises(SchemaError, match="'nope'"):
        chute.pack(ds, ["tokens", "nope"], 8)
    with pytest.raises(ArgumentValueError, match="twice"):
        chute.pack(ds, ["tokens", "tokens"], 8)
    with pytest.raises(ArgumentError, match="list of them"):
        chute.pack(ds, [], 8)
    with pytest.raises(ArgumentValueError, match="labels="):
        chute.pack(ds, "tokens", 8, labels="shifted")
    with pytest.raises(ArgumentValueError, match="label_mask='loss_mask'"):
        chute.pack(ds, "tokens", 8, labels="next", label_mask="loss_mask")
    with pytest.raises(ArgumentValueError, match=r"fill\['loss_mask'\]=300"):
        chute.pack(ds, ["tokens", "loss_mask"], 8, fill={"loss_mask": 300})
    with pytest.raises(ArgumentValueError, match="not aligned fields"):
        chute.pack(ds, ["tokens", "loss_mask"], 8, fill={"doc": 1})
    flat = chute.write(tmp_path / "f.chute", {"tokens": np.arange(10), "x": np.ones(10)})
    schema = {"tokens": chute.Ragged("int32"), "loss_mask": chute.fields.Tensor((3,), "uint8")}
    with chute.Writer(tmp_path / "m.chute", schema) as w:
        w.append({"tokens": np.arange(3, dtype=np.int32), "loss_mask": np.ones(3, np.uint8)})
    with pytest.raises(SchemaError, match=r"field 'loss_mask'.*Ragged field with one value"):
        chute.pack(chute.open(tmp_path / "m.chute"), ["tokens", "loss_mask"], 8)
    w2 = chute.windows(chute.open(flat), ["tokens", "x"], 4)  # a flat stream carries flat fields
    assert w2[1]["x"].tolist() == [1.0] * 4


def test_per_epoch_arguments_refused(tmp_path):
    ds = write_chat(tmp_path / "c.chute", chat_documents(5, 0), None)
    with pytest.raises(ArgumentValueError, match="drop_tail=True"):
        chute.windows(ds, "tokens", 8, random_offset=True, drop_tail=False)
    flat = chute.open(chute.write(tmp_path / "f.chute", {"tokens": np.arange(100)}))
    with pytest.raises(ArgumentValueError, match="shuffle_documents"):
        chute.windows(flat, "tokens", 8, shuffle_documents=True)
    w = chute.windows(flat, "tokens", 8, random_offset=True, labels="next", seed=3)
    b = w.at_epoch(5)[0]
    o = epoch_offset(3, 5, 8)
    assert b["tokens"].tolist() == list(range(o, o + 8))
    assert b["labels"].tolist() == [*range(o + 1, o + 8), IGNORE]
    with pytest.raises(ArgumentValueError, match="epoch"):
        w.set_epoch(-1)
