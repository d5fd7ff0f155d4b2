"""chute.sources.webdataset: real .tar shards made with tarfile, hostile members included."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("simplejpeg")
from image._image_files import jpeg

import chute
from chute import SourceError
from chute.sources.webdataset import WebDatasetSource


def add(tar: tarfile.TarFile, name: str, data: bytes, kind: bytes = tarfile.REGTYPE, **kw) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, len(data) if kind == tarfile.REGTYPE else 0
    for k, v in kw.items():
        setattr(info, k, v)
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def sample(i: int) -> dict[str, bytes]:
    return {
        "jpg": jpeg(12 + i % 3, 16, seed=i),
        "cls": str(i % 5).encode(),
        "txt": f"caption {i} ✓".encode(),
        "json": json.dumps({"i": i}).encode(),
        "seg.png": _png(i),
    }


def _png(i: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((4, 6, 3), i, np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def shard(path: Path, keys: range, extra: dict[str, list] | None = None, gz: bool = False) -> Path:
    with tarfile.open(path, "w:gz" if gz else "w") as tar:
        for i in keys:
            for ext, data in sample(i).items():
                add(tar, f"d/{i:05d}.{ext}", data)
            for name, data, kind in (extra or {}).get(i, []):
                add(tar, name, data, kind)
    return path


def test_shards_round_trip_byte_for_byte(tmp_path: Path) -> None:
    folder = tmp_path / "shards"
    folder.mkdir()
    shard(folder / "s-000.tar", range(0, 4))
    shard(folder / "s-001.tar", range(4, 7), gz=False)
    shard(folder / "s-002.tar.gz", range(7, 9), gz=True)
    for src in (folder, f"{folder}/s-{{000..001}}.tar", f"{folder}/s-*.tar*"):
        dst = chute.convert(src, tmp_path / "w.chute", progress=False, overwrite=True)
        ds = chute.open(dst)
        n = 7 if "{" in str(src) else 9
        assert ds.schema == {
            "jpg": chute.fields.Image(),
            "cls": chute.fields.Tensor((), "int64"),
            "txt": chute.String(),
            "json": chute.String(),
            "seg_png": chute.fields.Image(),
            "__key__": chute.String(),
        }
        assert len(ds) == n
        images = ds.gather(np.arange(n))["jpg"]
        for i in range(n):
            s, ref = ds[i], sample(i)
            assert bytes(images[i].numpy()) == ref["jpg"]  # stored as is
            assert int(s["cls"]) == i % 5 and s["txt"] == ref["txt"].decode()
            assert json.loads(s["json"]) == {"i": i} and s["__key__"] == f"d/{i:05d}"
            assert s["seg_png"].shape == (3, 4, 6) and int(s["seg_png"][0, 0, 0]) == i


def test_fields_pick_and_rename(tmp_path: Path) -> None:
    path = shard(tmp_path / "a.tar", range(3))
    ds = chute.open(
        chute.convert(path, tmp_path / "p.chute", {"jpg": "image", "cls": "label"}, progress=False)
    )
    assert ds.schema == {"image": chute.fields.Image(), "label": chute.fields.Tensor((), "int64")}
    keyed = chute.convert(path, tmp_path / "k.chute", {"cls": "y", "__key__": "id"}, progress=False)
    assert [chute.open(keyed)[i]["id"] for i in range(3)] == ["d/00000", "d/00001", "d/00002"]
    assert ds.metadata["extra_members"] == {"txt": 3, "json": 3, "seg.png": 3}


def test_hostile_members_are_ignored_and_counted(tmp_path: Path) -> None:
    hostile = {
        1: [
            ("../../etc/evil.txt", b"x", tarfile.REGTYPE),
            ("/abs/x.txt", b"x", tarfile.REGTYPE),
            ("d/00001.lnk", b"", tarfile.SYMTYPE),
            ("d/00001.hard", b"", tarfile.LNKTYPE),
            ("d/.hidden.txt", b"x", tarfile.REGTYPE),
            ("d/README", b"x", tarfile.REGTYPE),
            ("d/fifo.txt", b"", tarfile.FIFOTYPE),
        ]
    }
    path = shard(tmp_path / "h.tar", range(3), hostile)
    ds = chute.open(chute.convert(path, tmp_path / "h.chute", progress=False))
    assert len(ds) == 3
    assert ds.metadata["ignored_members"] == {
        "unsafe path": 2,
        "link": 2,
        "hidden": 1,
        "no extension": 1,
        "special file": 1,
    }
    assert not (tmp_path.parent / "etc").exists()  # nothing is ever extracted


def test_bad_samples_are_named_or_skipped(tmp_path: Path) -> None:
    path = tmp_path / "bad.tar"
    with tarfile.open(path, "w") as tar:
        for i in range(6):
            s = sample(i)
            if i == 1:
                s["jpg"] = s["jpg"][: len(s["jpg"]) // 3]  # truncated JPEG
            if i == 2:
                del s["cls"]  # a missing member
            if i == 3:
                s["cls"] = b"cat"  # not an integer
            if i == 4:
                s["txt"] = b"\xff\xfe"  # not UTF-8
            for ext, data in s.items():
                add(tar, f"{i:05d}.{ext}", data)
    with pytest.raises(SourceError, match=r"bad\.tar: 00001\.jpg: .*on_error='skip'"):
        chute.convert(path, tmp_path / "o.chute", progress=False)
    assert not (tmp_path / "o.chute").exists()
    with pytest.raises(SourceError, match=r"bad\.tar: sample '00002' has no \.cls member"):
        list(WebDatasetSource(path, ["cls"]).batches())
    with tarfile.open(tmp_path / "cls.tar", "w") as tar:
        add(tar, "0.cls", b" 7\n")
        add(tar, "1.cls", b"cat")
    with pytest.raises(SourceError, match=r"cls\.tar: 1\.cls: 'cat' is not an integer"):
        list(WebDatasetSource(tmp_path / "cls.tar").batches())
    ds = chute.open(chute.convert(path, tmp_path / "s.chute", progress=False, on_error="skip"))
    assert [ds[i]["__key__"] for i in range(len(ds))] == ["00000", "00005"]
    skipped = ds.metadata["skipped"]
    assert [s["key"] for s in skipped] == ["00001", "00002", "00003", "00004"]
    assert "not UTF-8" in skipped[3]["reason"] and "no .cls member" in skipped[1]["reason"]


def test_truncated_shard_and_big_member(tmp_path: Path) -> None:
    path = shard(tmp_path / "t.tar", range(4))
    data = path.read_bytes()
    (tmp_path / "cut.tar").write_bytes(data[: len(data) // 2 + 100])
    with pytest.raises(SourceError, match=r"cut\.tar: not a readable tar shard after member d/"):
        chute.convert(tmp_path / "cut.tar", tmp_path / "o.chute", progress=False)
    with pytest.raises(SourceError, match=r"t\.tar: member d/00000\.jpg is \d+ bytes, over the 64"):
        WebDatasetSource(path, max_member_bytes=64)
    with tarfile.open(tmp_path / "dup.tar", "w") as tar:
        add(tar, "a.txt", b"x")
        add(tar, "a.txt", b"y")
    with pytest.raises(SourceError, match=r"dup\.tar: sample 'a' has two \.txt members"):
        chute.convert(tmp_path / "dup.tar", tmp_path / "o.chute", progress=False)
    assert not (tmp_path / "o.chute").exists()


def test_cli_shards(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from chute.cli import main

    folder = tmp_path / "shards"
    folder.mkdir()
    shard(folder / "a.tar", range(3))
    argv = ["convert", str(folder), str(tmp_path / "c.chute"), "-q", "--max-side", "8"]
    assert main([*argv, "--workers", "1", "--on-error", "skip"]) == 0
    ds = chute.open(tmp_path / "c.chute")
    assert (
        ds.schema["jpg"] == chute.fields.Image(8) and ds.gather([0, 1, 2])["jpg"].sizes.max() <= 8
    )
