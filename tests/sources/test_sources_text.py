"""chute.sources.jsonl / csv: real JSON Lines and CSV files (plain, gzip, zstd), manifests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyarrow")
from image._image_files import jpeg

import chute
from chute import SourceError
from chute.sources.jsonl import JsonlSource

ROWS = [
    {"id": 0, "tokens": [], "text": "first", "meta": {"lang": "en"}},
    {"id": 1, "tokens": [5, 6, 7], "text": "ünïcode", "meta": {"lang": "de"}},
    {"id": 2, "tokens": [8], "text": "", "meta": {"lang": "fr"}},
]


def write_jsonl(path: Path, rows: list, compress: str = "") -> Path:
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    if compress == "gz":
        data = gzip.compress(data)
    elif compress == "zst":
        zstd = pytest.importorskip("zstandard")
        data = zstd.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("compress", ["", "gz", "zst"])
def test_jsonl_round_trip_schema_from_types(tmp_path: Path, compress: str) -> None:
    path = write_jsonl(tmp_path / f"d.jsonl{'.' + compress if compress else ''}", ROWS, compress)
    ds = chute.open(chute.convert(path, tmp_path / "d.chute", progress=False))
    assert ds.schema == {
        "id": chute.fields.Tensor((), "int64"),
        "tokens": chute.Ragged("int64"),  # the first row's empty list is no float64
        "text": chute.String(),
        "meta/lang": chute.String(),
    }
    for i, row in enumerate(ROWS):
        s = ds[i]
        assert int(s["id"]) == row["id"] and s["tokens"].tolist() == row["tokens"]
        assert s["text"] == row["text"] and s["meta/lang"] == row["meta"]["lang"]


def test_jsonl_missing_key_names_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"a": 1, "url": "x"}\n\n{"a": 2}\n{"a": 3, "url": "z"}\n')
    with pytest.raises(SourceError, match=r"m\.jsonl: line 3: column 'url' is null \(or missing\)"):
        chute.convert(path, tmp_path / "o.chute", progress=False)
    ds = chute.open(chute.convert(path, tmp_path / "o.chute", progress=False, nulls="fill"))
    assert [ds[i]["url"] for i in range(3)] == ["x", "", "z"]
    assert ds.metadata["nulls"] == {"url": 1}


def test_jsonl_bad_lines_are_named(tmp_path: Path) -> None:
    cases = {
        "not JSON": ('{"a": 1}\n{"a": 2\n', r"line 2: not JSON"),
        "not an object": ('{"a": 1}\n[1, 2]\n', r"line 2: a JSON list, not an object"),
    }
    for name, (text, pattern) in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.jsonl"
        path.write_text(text)
        with pytest.raises(SourceError, match=pattern):
            chute.convert(path, tmp_path / "o.chute", progress=False)
    # later blocks: a key or a type the first block did not show
    head = "".join(json.dumps({"a": i}) + "\n" for i in range(200))
    late = tmp_path / "late.jsonl"
    late.write_text(head + '{"a": 1, "url": "u"}\n')
    with pytest.raises(SourceError, match=r"line 201: key 'url' is not among the keys.*types="):
        list(JsonlSource(late, batch_bytes=512).batches())
    ok = JsonlSource(late, batch_bytes=512, types={"url": "string"}, nulls="fill")
    assert sum(len(b["a"]) for b in ok.batches()) == 201
    picked = JsonlSource(late, ["a"], batch_bytes=512)  # keys not picked are ignored
    assert sum(len(b["a"]) for b in picked.batches()) == 201
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(head + '{"a": "text"}\n')
    with pytest.raises(SourceError, match=r"wrong\.jsonl: line 201: .*'a': 'int64'"):
        list(JsonlSource(wrong, batch_bytes=512).batches())
    assert not (tmp_path / "o.chute").exists()


def test_jsonl_bounded_blocks_keep_line_numbers(tmp_path: Path) -> None:
    rows = [{"i": i, "t": [i] * (i % 4)} for i in range(3000)]
    path = write_jsonl(tmp_path / "big.jsonl", rows)
    src = JsonlSource(path, batch_bytes=4096)
    got = list(src.batches())
    assert len(got) > 10
    assert np.concatenate([b["i"] for b in got]).tolist() == list(range(3000))
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(path.read_bytes() + b'{"i": null, "t": []}\n')
    with pytest.raises(SourceError, match=r"broken\.jsonl: line 3001: column 'i' is null"):
        list(JsonlSource(broken, batch_bytes=4096).batches())


def test_csv_round_trip_nulls_and_tsv(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text('id,score,text\n1,0.5,"a, quoted\nnewline"\n2,,plain\n3,1.5,\n')
    with pytest.raises(SourceError, match=r"a\.csv: row 1: column 'score' is null"):
        chute.convert(tmp_path / "a.csv", tmp_path / "o.chute", progress=False)
    ds = chute.open(
        chute.convert(tmp_path / "a.csv", tmp_path / "a.chute", nulls="fill", progress=False)
    )
    assert ds.schema == {
        "id": chute.fields.Tensor((), "int64"),
        "score": chute.fields.Tensor((), "float64"),
        "text": chute.String(),
    }
    assert [ds[i]["text"] for i in range(3)] == ["a, quoted\nnewline", "plain", ""]
    assert np.isnan(float(ds[1]["score"])) and float(ds[2]["score"]) == 1.5
    (tmp_path / "b.tsv.gz").write_bytes(gzip.compress(b"x\ty\n1\tp\n2\tq\n"))
    ds = chute.open(chute.convert(tmp_path / "b.tsv.gz", tmp_path / "b.chute", progress=False))
    assert [(int(ds[i]["x"]), ds[i]["y"]) for i in range(2)] == [(1, "p"), (2, "q")]


def test_csv_bad_cell_and_header_are_named(tmp_path: Path) -> None:
    rows = "".join(f"{i},t{i}\n" for i in range(20000))
    (tmp_path / "c.csv").write_text("n,t\n" + rows + "oops,t\n")
    with pytest.raises(SourceError, match=r"c\.csv: rows \d+\+ .*invalid value 'oops'.*types="):
        chute.convert(tmp_path / "c.csv", tmp_path / "o.chute", progress=False, batch_bytes=1 << 16)
    ds = chute.open(
        chute.convert(
            tmp_path / "c.csv", tmp_path / "o.chute", types={"n": "string"}, progress=False
        )
    )
    assert ds.schema["n"] == chute.String() and ds[20000]["n"] == "oops"
    folder = tmp_path / "parts"
    folder.mkdir()
    (folder / "a.csv").write_text("n,t\n1,a\n")
    (folder / "b.csv").write_text("n,u\n2,b\n")
    with pytest.raises(SourceError, match=r"b\.csv: its header \['n', 'u'\] differs"):
        chute.convert(folder, tmp_path / "p.chute", progress=False)


def test_csv_manifest_of_images(tmp_path: Path) -> None:
    pics = {f"img/{i}.jpg": jpeg(10 + i, 12, seed=i) for i in range(3)}
    for rel, data in pics.items():
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    (tmp_path / "img" / "bad.jpg").write_bytes(b"\xff\xd8\xff not a jpeg")
    lines = [f"{rel},{i}" for i, rel in enumerate(pics)]
    (tmp_path / "m.csv").write_text("path,label\n" + "\n".join(lines) + "\nimg/bad.jpg,9\n")
    with pytest.raises(SourceError, match=r"m\.csv: row 3: column 'path' \(.*bad\.jpg\).*on_error"):
        chute.convert(tmp_path / "m.csv", tmp_path / "o.chute", images=["path"], progress=False)
    dst = chute.convert(
        tmp_path / "m.csv",
        tmp_path / "m.chute",
        {"path": "image", "label": "label"},
        images=["image"],
        on_error="skip",
        progress=False,
    )
    ds = chute.open(dst)
    assert ds.schema == {"image": chute.fields.Image(), "label": chute.fields.Tensor((), "int64")}
    got = ds.gather([0, 1, 2])["image"]
    assert [bytes(got[i].numpy()) for i in range(3)] == list(pics.values())  # as they are
    assert [s["row"] for s in ds.metadata["skipped"]] == [f"{tmp_path / 'm.csv'}: row 3"]
    (tmp_path / "esc.csv").write_text("path\n../outside.jpg\n")
    with pytest.raises(SourceError, match=r"row 0: column 'path': '\.\./outside\.jpg' leads out"):
        chute.convert(tmp_path / "esc.csv", tmp_path / "e.chute", images=["path"], progress=False)


def test_cli_manifest_and_types(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from chute.cli import main

    (tmp_path / "imgs").mkdir()
    pics = [jpeg(10, 12, seed=i) for i in range(2)]
    for i, data in enumerate(pics):
        (tmp_path / "imgs" / f"{i}.jpg").write_bytes(data)
    (tmp_path / "m.csv").write_text("file,id\n0.jpg,007\n1.jpg,008\n")
    dst = tmp_path / "m.chute"
    argv = ["convert", str(tmp_path / "m.csv"), str(dst), "-q", "--images", "file"]
    assert main([*argv, "--image-root", str(tmp_path / "imgs"), "--types", "id=string"]) == 0
    ds = chute.open(dst)
    assert ds.schema == {"file": chute.fields.Image(), "id": chute.String()}
    assert [ds[i]["id"] for i in range(2)] == ["007", "008"]
    assert [bytes(ds.gather([i])["file"][0].numpy()) for i in range(2)] == pics
    assert main([*argv, "--overwrite", "--types", "id"]) == 1
    assert "--types 'id': write column=type" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 1  # paths relative to the CSV's folder: not there
    assert "0.jpg" in capsys.readouterr().err
