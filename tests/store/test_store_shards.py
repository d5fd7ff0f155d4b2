"""WebDataset shards in a bucket (a real S3-protocol server, moto): converted through the
store, one shard downloaded at a time, the same dataset as from local shards."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("obstore")
pytest.importorskip("moto")
pytest.importorskip("simplejpeg")

from _s3server import BUCKET
from image._image_files import jpeg

import chute
from chute.store import Store


def make_shards(folder: Path, n_shards: int = 3, per: int = 4) -> list[Path]:
    folder.mkdir()
    paths = []
    for s in range(n_shards):
        path = folder / f"train-{s:03d}.tar"
        with tarfile.open(path, "w") as tar:
            for i in range(s * per, (s + 1) * per):
                for ext, data in (("jpg", jpeg(8, 10, seed=i)), ("cls", str(i).encode())):
                    info = tarfile.TarInfo(f"{i:05d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        paths.append(path)
    return paths


def test_shards_in_a_bucket(tmp_path: Path, s3, request) -> None:
    base = f"s3://{BUCKET}/{request.node.name}"
    paths = make_shards(tmp_path / "local")
    store = Store(base)
    for p in paths:
        store.put_file(p, p.name)
    store.put_bytes("notes.txt", b"not a shard")
    local = chute.open(chute.convert(tmp_path / "local", tmp_path / "l.chute", progress=False))
    for i, src in enumerate([f"{base}/train-{{000..002}}.tar", f"{base}/train-*.tar", f"{base}/"]):
        ds = chute.open(chute.convert(src, tmp_path / f"r{i}.chute", progress=False))
        assert len(ds) == len(local) == 12
        a, b = ds.gather(list(range(12))), local.gather(list(range(12)))
        assert [bytes(a["jpg"][k].numpy()) for k in range(12)] == [
            bytes(b["jpg"][k].numpy()) for k in range(12)
        ]
        assert [ds[k]["__key__"] for k in range(12)] == [local[k]["__key__"] for k in range(12)]
    with pytest.raises(chute.DatasetNotFoundError):
        chute.convert(f"{base}/train-{{000..003}}.tar", tmp_path / "x.chute", progress=False)
    assert not (tmp_path / "x.chute").exists()
    with pytest.raises(chute.SourceError, match=r"from a URL chute converts WebDataset"):
        chute.convert(f"{base}/data.parquet", tmp_path / "x.chute", progress=False)
