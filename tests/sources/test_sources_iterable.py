"""from_iterable: generators of dicts / tuples / single values, inferred ragged, failures."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

import chute
from chute.errors import SchemaError, SourceError


def test_dict_samples_nested_and_ragged(tmp_path):
    def gen():
        for i in range(50):
            yield {
                "tokens": np.arange(i % 7),
                "label": i,
                "meta": {"name": f"n{i}", "raw": b"%d" % i},
            }

    out = chute.from_iterable(gen(), tmp_path / "o.chute", batch_size=8, progress=False)
    with chute.open(out) as ds:
        assert ds.schema["tokens"] == chute.Ragged("int64")
        assert ds.schema["meta/name"] == chute.String()
        assert ds.schema["meta/raw"] == chute.Bytes()
        for i in (0, 13, 49):
            s = ds[i]
            np.testing.assert_array_equal(s["tokens"].numpy(), np.arange(i % 7))
            assert int(s["label"]) == i and s["meta/name"] == f"n{i}"
            assert bytes(s["meta/raw"].numpy()) == b"%d" % i


def test_tuples_with_names_and_pil_images(tmp_path):
    images = [Image.fromarray(np.full((4 + i % 3, 5, 3), i, np.uint8)) for i in range(10)]
    out = chute.from_iterable(
        zip(images, range(10), strict=True),
        tmp_path / "o.chute",
        names=("image", "y"),
        progress=False,
    )
    with chute.open(out) as ds:
        assert ds.schema["image"] == chute.Ragged("uint8", (5, 3))
        np.testing.assert_array_equal(ds[4]["image"].numpy(), np.asarray(images[4]))
        assert int(ds[9]["y"]) == 9


def test_single_values_and_schema(tmp_path):
    schema = {"0": chute.fields.Tensor((2,), "float32")}
    out = chute.from_iterable(
        (np.full(2, i, np.float32) for i in range(5)), tmp_path / "o.chute", schema, progress=False
    )
    with chute.open(out) as ds:
        assert ds.schema == schema and float(ds[3]["0"][1]) == 3.0


def test_generator_failing_midway_leaves_nothing(tmp_path):
    def gen():
        for i in range(100):
            if i == 60:
                raise RuntimeError("decode failed at 60")
            yield {"x": np.zeros(3)}

    with pytest.raises(RuntimeError, match="decode failed at 60"):
        chute.from_iterable(gen(), tmp_path / "o.chute", batch_size=16, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_pick_and_rename_fields(tmp_path):
    samples = [{"a": i, "b": -i, "c": str(i)} for i in range(6)]
    out = chute.from_iterable(samples, tmp_path / "o.chute", fields={"b": "neg"}, progress=False)
    with chute.open(out) as ds:
        assert list(ds.schema) == ["neg"] and int(ds[5]["neg"]) == -5
    with pytest.raises(SourceError, match=r"sample 0: no field 'z'"):
        chute.from_iterable(samples, tmp_path / "p.chute", fields=["z"], progress=False)
    samples[3] = {"a": 1}
    with pytest.raises(SourceError, match=r"sample 3: no field 'b'; has \['a'\]"):
        chute.from_iterable(samples, tmp_path / "q.chute", fields=["a", "b"], progress=False)
    with pytest.raises(SourceError, match=r"sample 0: 2 values but names=\['x'\]"):
        chute.from_iterable([(1, 2)], tmp_path / "r.chute", names=["x"], progress=False)


def test_empty_iterable_needs_a_schema(tmp_path):
    with pytest.raises(SchemaError, match="pass schema="):
        chute.from_iterable([], tmp_path / "o.chute", progress=False)
    out = chute.from_iterable(
        [], tmp_path / "o.chute", {"x": chute.fields.Tensor()}, progress=False
    )
    with chute.open(out) as ds:
        assert len(ds) == 0


def test_dict_of_lists_converts_as_chute_write_does(tmp_path):
    cols = {"tokens": [[5], [1, 2], [3, 4, 6]], "text": ["a", "b", "c"], "x": np.arange(3)}
    ds = chute.open(chute.convert(cols, tmp_path / "c.chute", progress=False, batch_size=2))
    ref = chute.open(chute.write(tmp_path / "w.chute", cols))
    assert ds.schema == ref.schema and ds.schema["tokens"] == chute.Ragged("int64")
    assert [ds[i]["tokens"].tolist() for i in range(3)] == [[5], [1, 2], [3, 4, 6]]
    with pytest.raises(chute.SourceError, match=r"same length; got \{'a': 2, 'b': 1\}"):
        chute.convert({"a": [1, 2], "b": [1]}, tmp_path / "x.chute", progress=False)


def test_pil_images_warn_unless_declared_image(tmp_path, recwarn):
    pics = [Image.fromarray(np.full((6, 8, 3), i, np.uint8)) for i in range(3)]
    with pytest.warns(UserWarning, match=r"field 'img' holds PIL images.*chute\.fields\.Image\(\)"):
        chute.from_iterable(({"img": p} for p in pics), tmp_path / "a.chute", progress=False)
    recwarn.clear()
    schema = {"img": chute.fields.Image()}
    dst = chute.from_iterable(
        ({"img": p} for p in pics), tmp_path / "b.chute", schema, progress=False
    )
    assert not [w for w in recwarn if "PIL" in str(w.message)]
    assert chute.open(dst).schema == schema
