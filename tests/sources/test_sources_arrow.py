"""chute.sources.arrow / hf: real Parquet, Arrow IPC / Feather files and datasets folders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.feather as feather  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402
from image._image_files import jpeg  # noqa: E402

import chute  # noqa: E402
from chute import ArgumentError, SourceError  # noqa: E402
from chute.sources.parquet import ParquetSource  # noqa: E402

TOKENS = [[], [1, 2, 3], [4], [5, 6], [], [7, 8, 9, 10], [11], [12, 13]]


def table(n: int = 8) -> pa.Table:
    return pa.table(
        {
            "tokens": pa.array(TOKENS[:n], pa.list_(pa.int32())),
            "text": [f"doc {i} é" for i in range(n)],
            "score": pa.array(np.arange(n) / 4, pa.float32()),
            "flag": [i % 2 == 0 for i in range(n)],
            "emb": pa.array([[i, -i] for i in range(n)], pa.list_(pa.float16(), 2)),
            "boxes": pa.array(
                [[[i, i + 1, 2, 3]] * (i % 3) for i in range(n)],
                pa.list_(pa.list_(pa.int16(), 4)),
            ),
            "meta": pa.array([{"lang": "en", "n": i} for i in range(n)]),
            "raw": pa.array([bytes([i]) * i for i in range(n)], pa.binary()),
        }
    )


def check_round_trip(ds: chute.Dataset, t: pa.Table) -> None:
    rows = t.to_pylist()
    assert len(ds) == len(rows)
    for i, row in enumerate(rows):
        s = ds[i]
        assert s["tokens"].dtype == torch.int32 and s["tokens"].tolist() == row["tokens"]
        assert s["text"] == row["text"]
        assert float(s["score"]) == row["score"] and bool(s["flag"]) == row["flag"]
        assert s["emb"].dtype == torch.float16 and s["emb"].tolist() == row["emb"]
        assert s["boxes"].reshape(-1, 4).tolist() == row["boxes"]
        assert s["meta/lang"] == "en" and int(s["meta/n"]) == i
        assert bytes(s["raw"].numpy()) == row["raw"]


def test_parquet_schema_from_types_and_exact_round_trip(tmp_path: Path) -> None:
    t = table()
    pq.write_table(t, tmp_path / "a.parquet", row_group_size=3)  # 3 row groups
    ds = chute.open(chute.convert(tmp_path / "a.parquet", tmp_path / "a.chute", progress=False))
    assert ds.schema == {
        "tokens": chute.Ragged("int32"),  # the empty first list changes nothing
        "text": chute.String(),
        "score": chute.fields.Tensor((), "float32"),
        "flag": chute.fields.Tensor((), "bool"),
        "emb": chute.fields.Tensor((2,), "float16"),
        "boxes": chute.Ragged("int16", (4,)),
        "meta/lang": chute.String(),
        "meta/n": chute.fields.Tensor((), "int64"),
        "raw": chute.Bytes(),
    }
    check_round_trip(ds, t)


def test_reads_in_bounded_batches(tmp_path: Path) -> None:
    n = 5000
    t = pa.table({"x": np.arange(n, dtype=np.int64), "t": [[i] * (i % 7) for i in range(n)]})
    pq.write_table(t, tmp_path / "big.parquet", row_group_size=1000)
    src = ParquetSource(tmp_path / "big.parquet", batch_bytes=4096)
    sizes = [len(b["x"]) for b in src.batches()]
    assert sum(sizes) == n and max(sizes) <= 4096 // 8 and len(sizes) > 10
    assert np.concatenate([b["x"] for b in src.batches()]).tolist() == list(range(n))


def test_nulls_error_names_file_row_and_column_or_are_filled(tmp_path: Path) -> None:
    t = pa.table(
        {
            "tokens": pa.array([[1], None, []], pa.list_(pa.int64())),
            "text": ["a", "b", None],
            "x": pa.array([1.5, None, 2.0], pa.float64()),
            "k": pa.array([None, 3, 4], pa.int32()),
            "emb": pa.array([[1, 2], None, [3, 4]], pa.list_(pa.int8(), 2)),
        }
    )
    pq.write_table(t, tmp_path / "n.parquet", row_group_size=2)
    with pytest.raises(
        SourceError, match=r"n\.parquet: row 1: column 'tokens' is null.*nulls='fill'"
    ):
        chute.convert(tmp_path / "n.parquet", tmp_path / "e.chute", progress=False)
    with pytest.raises(SourceError, match=r"n\.parquet: row 2: column 'text' is null"):
        chute.convert(tmp_path / "n.parquet", tmp_path / "e.chute", ["text"], progress=False)
    assert not (tmp_path / "e.chute").exists()
    dst = chute.convert(tmp_path / "n.parquet", tmp_path / "f.chute", progress=False, nulls="fill")
    ds = chute.open(dst)
    assert [ds[i]["tokens"].tolist() for i in range(3)] == [[1], [], []]
    assert [ds[i]["text"] for i in range(3)] == ["a", "b", ""]
    assert float(ds[0]["x"]) == 1.5 and np.isnan(float(ds[1]["x"]))
    assert [int(ds[i]["k"]) for i in range(3)] == [0, 3, 4]
    assert [ds[i]["emb"].tolist() for i in range(3)] == [[1, 2], [0, 0], [3, 4]]
    assert ds.metadata["nulls"] == {"tokens": 1, "text": 1, "x": 1, "k": 1, "emb": 1}


def test_null_inside_a_list_is_named(tmp_path: Path) -> None:
    t = pa.table({"t": pa.array([[1, 2], [3], [4, None]], pa.list_(pa.int64()))})
    pq.write_table(t, tmp_path / "in.parquet")
    with pytest.raises(SourceError, match=r"in\.parquet: row 2: column 't' holds a null inside"):
        chute.convert(tmp_path / "in.parquet", tmp_path / "o.chute", progress=False, nulls="fill")


def test_fields_schema_and_unsupported_types(tmp_path: Path) -> None:
    pic = jpeg(20, 30, seed=3)
    t = pa.table(
        {
            "jpg": pa.array([pic, pic], pa.binary()),
            "tags": pa.array([["a"], ["b", "c"]]),
            "meta": pa.array([{"lang": "en"}, {"lang": "fr"}]),
        }
    )
    pq.write_table(t, tmp_path / "u.parquet")
    with pytest.raises(SourceError, match=r"column 'tags': Arrow type list<\w+: string>.*fields="):
        chute.convert(tmp_path / "u.parquet", tmp_path / "o.chute", progress=False)
    dst = chute.convert(
        tmp_path / "u.parquet",
        tmp_path / "o.chute",
        {"jpg": "image", "meta/lang": "lang"},
        progress=False,
        schema={"image": chute.fields.Image()},
    )
    ds = chute.open(dst)
    assert ds.schema == {"image": chute.fields.Image(), "lang": chute.String()}
    assert bytes(ds.gather([1])["image"][0].numpy()) == pic  # the JPEG stored as is
    assert ds[1]["lang"] == "fr"
    with pytest.raises(SourceError, match=r"schema= names \['nope'\]"):
        chute.convert(tmp_path / "u.parquet", tmp_path / "p.chute", ["jpg"], schema={"nope": 1})
    with pytest.raises(ArgumentError, match=r"\['allow_empty'\] do not apply to Parquet"):
        chute.convert(tmp_path / "u.parquet", tmp_path / "p.chute", allow_empty=True)


def test_folder_glob_and_brace_patterns_of_files(tmp_path: Path) -> None:
    t = table()
    folder = tmp_path / "parts"
    folder.mkdir()
    for i in range(3):
        pq.write_table(t.slice(i * 3, 3), folder / f"part-{i}.parquet")
    (folder / "README.md").write_text("not data")
    for src in (folder, f"{folder}/*.parquet", f"{folder}/part-{{0..2}}.parquet"):
        dst = chute.convert(src, tmp_path / "p.chute", progress=False, overwrite=True)
        check_round_trip(chute.open(dst), t)
    with pytest.raises(chute.DatasetNotFoundError, match=r"part-3\.parquet: does not exist"):
        chute.convert(f"{folder}/part-{{0..3}}.parquet", tmp_path / "q.chute")
    pq.write_table(pa.table({"x": [1]}), folder / "part-9.parquet")
    with pytest.raises(SourceError, match=r"part-9\.parquet: its columns differ from .*part-0"):
        chute.convert(folder, tmp_path / "q.chute", progress=False)


def test_corrupt_parquet_is_named(tmp_path: Path) -> None:
    pq.write_table(table(), tmp_path / "c.parquet")
    data = (tmp_path / "c.parquet").read_bytes()
    (tmp_path / "c.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(SourceError, match=r"c\.parquet: cannot be read as Parquet"):
        chute.convert(tmp_path / "c.parquet", tmp_path / "o.chute", progress=False)


@pytest.mark.parametrize("kind", ["feather", "stream"])
def test_arrow_ipc_file_and_stream(tmp_path: Path, kind: str) -> None:
    t = table()
    path = tmp_path / "t.arrow"
    if kind == "feather":
        feather.write_feather(t, path, chunksize=3)
    else:
        with pa.ipc.new_stream(path, t.schema) as w:
            for rb in t.to_batches(max_chunksize=3):
                w.write_batch(rb)
    check_round_trip(chute.open(chute.convert(path, tmp_path / "a.chute", progress=False)), t)


def hf_folder(root: Path, t: pa.Table, features: dict, files: list[str] | None = None) -> Path:
    """A folder as ``datasets.Dataset.save_to_disk`` writes it: Arrow stream files with the
    features in the schema metadata, ``state.json`` and ``dataset_info.json``."""
    root.mkdir(parents=True)
    meta = {b"huggingface": json.dumps({"info": {"features": features}}).encode()}
    t = t.replace_schema_metadata(meta)
    name = "data-00000-of-00001.arrow"
    with pa.ipc.new_stream(root / name, t.schema) as w:
        w.write_table(t)
    state = {"_data_files": [{"filename": f} for f in files or [name]], "_fingerprint": "x"}
    (root / "state.json").write_text(json.dumps(state))
    (root / "dataset_info.json").write_text(json.dumps({"features": features}))
    return root


def image_table() -> tuple[pa.Table, list[bytes], dict]:
    pics = [jpeg(16 + i, 24, seed=i) for i in range(3)]
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    t = pa.table(
        {
            "image": pa.array(
                [{"bytes": p, "path": f"{i}.jpg"} for i, p in enumerate(pics)], image_type
            ),
            "label": pa.array([1, 0, 1], pa.int64()),
            "text": ["a", "b", "c"],
        }
    )
    features = {
        "image": {"_type": "Image"},
        "label": {"names": ["cat", "dog"], "_type": "ClassLabel"},
        "text": {"dtype": "string", "_type": "Value"},
    }
    return t, pics, features


def test_hf_save_to_disk_folder_image_and_class_label(tmp_path: Path) -> None:
    t, pics, features = image_table()
    root = hf_folder(tmp_path / "hf", t, features)
    ds = chute.open(chute.convert(root, tmp_path / "h.chute", progress=False))
    assert ds.schema == {
        "image": chute.fields.Image(),
        "label": chute.fields.Tensor((), "int64"),
        "text": chute.String(),
    }
    assert ds.metadata["class_names"] == {"label": ["cat", "dog"]}
    images = ds.gather([0, 1, 2])["image"]
    assert [bytes(images[i].numpy()) for i in range(3)] == pics  # byte for byte
    assert images.sizes.tolist() == [[16, 24], [17, 24], [18, 24]]
    assert [int(ds[i]["label"]) for i in range(3)] == [1, 0, 1]


def test_hf_folder_hostile_and_wrong_inputs(tmp_path: Path) -> None:
    t, _, features = image_table()
    bad = hf_folder(tmp_path / "esc", t, features, files=["../outside.arrow"])
    with pytest.raises(SourceError, match=r"'\.\./outside\.arrow' is not a plain name"):
        chute.convert(bad, tmp_path / "o.chute", progress=False)
    link = hf_folder(tmp_path / "link", t, features, files=["x.arrow"])
    (tmp_path / "elsewhere.arrow").write_bytes((link / "data-00000-of-00001.arrow").read_bytes())
    (link / "x.arrow").symlink_to(tmp_path / "elsewhere.arrow")
    with pytest.raises(SourceError, match=r"x\.arrow: listed in state\.json but not a file in"):
        chute.convert(link, tmp_path / "o.chute", progress=False)
    paths = t.set_column(
        0,
        "image",
        pa.array(
            [
                {"bytes": b"\xff\xd8\xff", "path": None},
                {"bytes": None, "path": "/etc/passwd"},
                {"bytes": b"x", "path": None},
            ],
            t.schema.field("image").type,
        ),
    )
    only_paths = hf_folder(tmp_path / "paths", paths, features)
    with pytest.raises(SourceError, match=r"row 1: column 'image' holds a file path, not"):
        chute.convert(only_paths, tmp_path / "o.chute", progress=False)
    (tmp_path / "dd").mkdir()
    (tmp_path / "dd" / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))
    with pytest.raises(SourceError, match=r"a DatasetDict with splits \['train', 'test'\]"):
        chute.convert(tmp_path / "dd", tmp_path / "o.chute", progress=False)
    assert not (tmp_path / "o.chute").exists()


def test_hf_dataset_object(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    _, pics, _ = image_table()
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "label": datasets.ClassLabel(names=["cat", "dog"]),
            "text": datasets.Value("string"),
        }
    )
    hfds = datasets.Dataset.from_dict(
        {
            "image": [{"bytes": p, "path": None} for p in pics],
            "label": [1, 0, 1],
            "text": list("abc"),
        },
        features=features,
    )
    ds = chute.open(chute.convert(hfds.select([2, 0]), tmp_path / "d.chute", progress=False))
    assert ds.metadata["class_names"] == {"label": ["cat", "dog"]}
    images = ds.gather([0, 1])["image"]
    assert [bytes(images[i].numpy()) for i in range(2)] == [pics[2], pics[0]]
    hfds.save_to_disk(str(tmp_path / "saved"))
    ds = chute.open(chute.convert(tmp_path / "saved", tmp_path / "s.chute", progress=False))
    assert [ds[i]["text"] for i in range(3)] == ["a", "b", "c"]


def test_cli_nulls_fill(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from chute.cli import main

    pq.write_table(pa.table({"x": pa.array([1, None], pa.int32())}), tmp_path / "n.parquet")
    assert main(["convert", str(tmp_path / "n.parquet"), str(tmp_path / "a.chute"), "-q"]) == 1
    assert "row 1: column 'x' is null" in capsys.readouterr().err
    argv = ["convert", str(tmp_path / "n.parquet"), str(tmp_path / "a.chute"), "-q"]
    assert main([*argv, "--nulls", "fill", "--workers", "2"]) == 0
    assert chute.open(tmp_path / "a.chute").metadata["nulls"] == {"x": 1}
