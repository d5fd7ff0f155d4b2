"""Hostile values and crafted datasets that used to be read or written wrongly without an
error: field names that name a part folder, two manifest entries that are one file, String
bytes that are not UTF-8, EncodedImages whose sizes lie. Each is a chute error now."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _reliability import record

import chute
from chute.errors import FormatError, SchemaError

pytest.importorskip("simplejpeg")


@pytest.mark.parametrize("name", ["part-00001/x", "part-00001", "PART-00001/x", "part-123456/y"])
def test_field_names_that_name_a_part_folder_are_refused(
    tmp_path: Path, name: str, record_property
) -> None:
    path = chute.write(tmp_path / "d.chute", {"x": np.arange(4)}, part_size=2)
    with pytest.raises(SchemaError, match="like a part folder"):
        chute.write(tmp_path / "e.chute", {name: np.arange(4)})
    with pytest.raises(SchemaError, match="like a part folder"):
        chute.Writer(tmp_path / "f.chute", {name: chute.Tensor((), "int64")})
    # a crafted manifest with such a field in the root part: refused at open
    other = chute.write(tmp_path / "g.chute", {"x": np.arange(2)})
    obj = json.loads((other / "chute.json").read_text())
    obj["fields"][name] = obj["fields"]["x"]
    obj["parts"][0]["files"][f"{name}.npy"] = obj["parts"][0]["files"]["x.npy"]
    (other / "chute.json").write_text(json.dumps(obj))
    with pytest.raises(FormatError, match="like a part folder"):
        chute.open(other)
    with chute.open(path) as ds:
        assert ds[3]["x"] == 3
    record(
        record_property,
        "field name naming a part folder",
        f"{name!r} in write(), Writer(), and a crafted root-part manifest entry",
        3,
        "SchemaError at write, FormatError at open; part 1's files untouched",
    )


def test_fields_that_differ_in_case_are_refused(tmp_path: Path, record_property) -> None:
    with pytest.raises(SchemaError, match="differ only in case"):
        chute.write(tmp_path / "d.chute", {"x": np.arange(3), "X": np.arange(3)})
    path = chute.write(tmp_path / "e.chute", {"x": np.arange(3), "y": np.arange(3)})
    obj = json.loads((path / "chute.json").read_text())
    obj["fields"] = {"x": obj["fields"]["x"], "X": obj["fields"]["y"]}
    files = obj["parts"][0]["files"]
    obj["parts"][0]["files"] = {"x.npy": files["x.npy"], "X.npy": files["y.npy"]}
    (path / "chute.json").write_text(json.dumps(obj))
    with pytest.raises(FormatError, match="one file on a case-insensitive filesystem"):
        chute.open(path)
    record(
        record_property,
        "two entries, one file",
        "fields 'x' and 'X' (one file on macOS / Windows) in write() and a crafted manifest",
        2,
        "SchemaError at write, FormatError at open",
    )


def test_invalid_utf8_in_a_string_field(tmp_path: Path, record_property) -> None:
    path = chute.write(tmp_path / "d.chute", {"s": ["héllo", "wörld", "ok"]})
    raw = (path / "s.values.npy").read_bytes()
    (path / "s.values.npy").write_bytes(raw.replace("é".encode(), b"\xff\xfe"))
    with chute.open(path) as ds:
        assert ds[1]["s"] == "wörld" and ds[1:3]["s"] == ["wörld", "ok"]
        for read in (lambda: ds[0], lambda: ds[0:2], lambda: ds.gather([2, 0])):
            with pytest.raises(FormatError, match=r"field 's'.*not valid UTF-8"):
                read()
        with pytest.raises(FormatError, match="sample 1 of the batch"):
            ds.gather([2, 0])
    record(
        record_property,
        "invalid UTF-8 in a String field",
        "two bytes of a sample replaced by 0xff 0xfe; ds[i], ds[a:b], gather",
        3,
        "FormatError naming the field and sample (was U+FFFD, silently)",
    )


@pytest.mark.parametrize(
    ("height", "width", "match"),
    [(0, 50, "stored size is 0x50"), (-4, 50, "stored size is -4x50"),
     (41, 50, "header says 40x50"), (40.0, 50, "are ints"), (30000, 30000, "header says"),
     (True, 50, "are ints")],
)  # fmt: skip
def test_encoded_images_whose_sizes_lie_are_refused(
    tmp_path: Path, height: object, width: object, match: str, record_property
) -> None:
    from chute.image import EncodedImage, encode_image

    good = encode_image(np.full((40, 50, 3), 90, np.uint8))
    bad = EncodedImage(good.data, height, width)  # type: ignore[arg-type]
    with pytest.raises(SchemaError, match=rf"field 'image', sample 1: .*{match}"):
        chute.write(tmp_path / "d.chute", {"image": [good, bad]}, schema={"image": chute.Image()})
    assert not (tmp_path / "d.chute").exists()
    record(
        record_property,
        "EncodedImage with a wrong size",
        f"height, width = {height!r}, {width!r} for a 40x50 JPEG",
        1,
        "SchemaError naming field and sample; nothing written",
    )
