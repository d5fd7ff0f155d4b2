"""Hostile sources to convert from: WebDataset shards, datasets folders, tables, manifests.

A converter reads files that came from elsewhere (a downloaded shard set, a shared Hub
folder). Each case here ends in a clean dataset or a ``chute.ChuteError`` naming the file:
never another exception, a file written or read outside the source, a pickle loaded, or a
partial dataset left at the destination.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from _reliability import fuzz, outcome_of, record
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

import chute

pa = pytest.importorskip("pyarrow")
pytest.importorskip("simplejpeg")
from image._image_files import jpeg  # noqa: E402

FUZZ = fuzz(HealthCheck.function_scoped_fixture)
KINDS = {
    "file": tarfile.REGTYPE,
    "symlink": tarfile.SYMTYPE,
    "hardlink": tarfile.LNKTYPE,
    "fifo": tarfile.FIFOTYPE,
    "chardev": tarfile.CHRTYPE,
    "dir": tarfile.DIRTYPE,
}
NAMES = st.sampled_from(
    [
        "0.jpg", "0.cls", "1.jpg", "1.cls", "1.txt", "../../escape.jpg", "/etc/passwd.txt",
        "a/../../x.cls", ".hidden.jpg", "noext", "d/2.jpg", "d/2.cls", "0.jpg", "3.weird.ext",
        "2.pickle",
    ]
)  # fmt: skip


def _member(tar: tarfile.TarFile, name: str, kind: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.type = KINDS[kind]
    if kind in ("symlink", "hardlink"):
        info.linkname = "/etc/passwd"
    info.size = len(data) if kind == "file" else 0
    tar.addfile(info, io.BytesIO(data) if kind == "file" else None)


PICTURE = jpeg(8, 8)
PAYLOADS = st.sampled_from([PICTURE, PICTURE[:40], b"7", b"cat", b"\xff\xfe", b"", b"x" * 300])
MEMBERS = st.lists(st.tuples(NAMES, st.sampled_from(list(KINDS)), PAYLOADS), max_size=12)


def test_hostile_tar_shards(tmp_path: Path, record_property) -> None:
    outcomes: Counter[str] = Counter()
    outside = tmp_path.parent / "escape.jpg"

    @FUZZ
    @given(members=MEMBERS, cut=st.one_of(st.none(), st.integers(0, 4000)), skip=st.booleans())
    def case(members, cut, skip):
        shard = tmp_path / "s.tar"
        with tarfile.open(shard, "w") as tar:
            for name, kind, data in members:
                _member(tar, name, kind, data)
        if cut is not None:
            shard.write_bytes(shard.read_bytes()[:cut])
        dst = tmp_path / "o.chute"
        on_error = "skip" if skip else "raise"

        def convert():
            chute.convert(shard, dst, progress=False, overwrite=True, on_error=on_error)
            ds = chute.open(dst)
            for i in range(len(ds)):
                ds[i]

        outcomes[outcome_of(convert)] += 1
        assert not outside.exists()

    case()
    assert outcomes["ok"] and outcomes["SourceError"]
    record(
        record_property,
        "hostile WebDataset shard",
        "tar members with '..' / absolute / hidden names, symlinks and hard links to "
        "/etc/passwd, FIFOs, devices, duplicates, truncated JPEGs, bad labels, non-UTF-8 text, "
        "pickles; the shard cut at random; on_error raise or skip",
        sum(outcomes.values()),
        outcomes,
    )


def _hf_folder(root: Path, files: list[str]) -> Path:
    root.mkdir()
    t = pa.table({"x": [1, 2, 3]})
    with pa.ipc.new_stream(root / "data-00000-of-00001.arrow", t.schema) as w:
        w.write_table(t)
    (root / "state.json").write_text(json.dumps({"_data_files": [{"filename": f} for f in files]}))
    (root / "dataset_info.json").write_text(json.dumps({"features": {}}))
    return root


def test_hostile_datasets_folders(tmp_path: Path, record_property) -> None:
    secret = tmp_path / "secret.arrow"
    secret.write_bytes(b"not yours")
    bad_names = [
        "../secret.arrow", str(secret), "sub/../data-00000-of-00001.arrow", "", ".",
        "..", "link.arrow", "missing.arrow", "\\\\server\\share.arrow",
    ]  # fmt: skip
    outcomes: Counter[str] = Counter()
    for i, name in enumerate(bad_names):
        root = _hf_folder(tmp_path / f"hf{i}", [name])
        (root / "link.arrow").symlink_to(secret)
        outcome = outcome_of(lambda r=root: chute.convert(r, tmp_path / "o.chute", progress=False))
        assert outcome == "SourceError", name
        outcomes[outcome] += 1
    for i, state in enumerate(["{", "[]", '{"_data_files": 3}', '{"_data_files": [7]}']):
        root = _hf_folder(tmp_path / f"state{i}", ["data-00000-of-00001.arrow"])
        (root / "state.json").write_text(state)
        outcome = outcome_of(lambda r=root: chute.convert(r, tmp_path / "o.chute", progress=False))
        assert outcome == "SourceError", state
        outcomes[outcome] += 1
    assert not (tmp_path / "o.chute").exists()
    record(
        record_property,
        "hostile datasets folder",
        "state.json naming files with '..', absolute paths, symlinks out, '\\', empty, "
        "missing; state.json not JSON / of the wrong shape",
        sum(outcomes.values()),
        "all refused: SourceError naming the file; nothing outside the folder read",
    )


def _tables(tmp_path: Path) -> dict[str, bytes]:
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    t = pa.table(
        {
            "tokens": pa.array([[1, 2], [], [3]] * 20, pa.list_(pa.int32())),
            "text": ["a", "b", "c"] * 20,
            "x": pa.array(np.arange(60, dtype=np.float32)),
        }
    )
    pq.write_table(t, tmp_path / "t.parquet", row_group_size=16)
    feather.write_feather(t, tmp_path / "t.arrow", chunksize=16)
    rows = "".join(json.dumps(r) + "\n" for r in t.to_pylist())
    (tmp_path / "t.jsonl").write_text(rows)
    (tmp_path / "t.csv").write_text("a,b\n" + "".join(f"{i},t{i}\n" for i in range(60)))
    return {p: (tmp_path / p).read_bytes() for p in ("t.parquet", "t.arrow", "t.jsonl", "t.csv")}


def test_damaged_tables(tmp_path: Path, record_property) -> None:
    originals = _tables(tmp_path)
    rng = np.random.default_rng(0)
    outcomes: Counter[str] = Counter()
    cases = 0
    for name, data in originals.items():
        damaged = [data[:cut] for cut in rng.integers(0, len(data), 10)]
        for _ in range(15):
            flipped = bytearray(data)
            flipped[int(rng.integers(len(data)))] ^= 1 << int(rng.integers(8))
            damaged.append(bytes(flipped))
        for content in damaged:
            path = tmp_path / "case" / name
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(content)
            dst = tmp_path / "o.chute"
            outcome = outcome_of(
                lambda p=path, d=dst: chute.convert(
                    p, d, progress=False, overwrite=True, nulls="fill"
                )
            )
            outcomes[f"{name.split('.')[1]} {outcome}"] += 1
            cases += 1
    record(
        record_property,
        "damaged table file",
        "Parquet, Arrow IPC, JSONL and CSV files cut at 10 random points and with 15 random "
        "bit flips each",
        cases,
        outcomes,
    )


def test_manifest_paths_leaving_the_root(tmp_path: Path, record_property) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "ok.jpg").write_bytes(PICTURE)
    (tmp_path / "outside.jpg").write_bytes(PICTURE)
    (tmp_path / "root" / "link.jpg").symlink_to(tmp_path / "outside.jpg")
    paths = ["../outside.jpg", str(tmp_path / "outside.jpg"), "link.jpg", "sub/../../outside.jpg"]
    for p in paths:
        (tmp_path / "root" / "m.csv").write_text(f"path\nok.jpg\n{p}\n")
        with pytest.raises(chute.SourceError, match="leads out of"):
            chute.convert(
                tmp_path / "root" / "m.csv", tmp_path / "o.chute", images=["path"], progress=False
            )
    assert not (tmp_path / "o.chute").exists()
    record(
        record_property,
        "image manifest path leaving its root",
        "a CSV column of image paths with '..', an absolute path, a symlink out",
        len(paths),
        "all refused: SourceError naming the row and the path; no file outside read",
    )
