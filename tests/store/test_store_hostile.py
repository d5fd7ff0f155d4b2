"""Hostile caches and servers: symlinks planted in the cache folder never send a write or a
read elsewhere; a server's answers (size, length, time) never exceed what the manifest says.
Real files in tmp_path, moto on 127.0.0.1, and small hostile HTTP servers in threads."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("obstore")
pytest.importorskip("moto")

from _s3server import BUCKET, S3Server, s3, s3_server, small_dataset

import chute
from chute.errors import CacheError
from chute.store import RemoteCache, Store
from chute.transfer import upload


@pytest.fixture
def url(s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A small 3-part dataset uploaded to the test server."""
    name = request.node.name.replace("[", "_").replace("]", "")
    url = f"s3://{BUCKET}/{name}/ds.chute"
    upload(small_dataset(tmp_path / "local.chute"), url)
    return url


def cache_for(url: str, tmp_path: Path) -> RemoteCache:
    return RemoteCache(Store(url, retries=1, backoff=0.01), tmp_path / "cache")


def victim(tmp_path: Path) -> Path:
    """A folder of someone else's files that the cache must never touch."""
    folder = tmp_path / "victim"
    folder.mkdir(exist_ok=True)
    for name in ("x.npy", "label.npy", "chute.json", "identity.json", "keep"):
        (folder / name).write_text("precious")
    return folder


def untouched(folder: Path) -> bool:
    return (
        all(f.read_text() == "precious" for f in folder.iterdir())
        and len(list(folder.iterdir())) == 5
    )


# ----------------------------------------------------------------- cache paths


def test_part_folder_symlink_gets_no_download(url: str, tmp_path: Path) -> None:
    cache = cache_for(url, tmp_path)
    cache.open()
    other = victim(tmp_path)
    (cache.folder / "part-00001").symlink_to(other, target_is_directory=True)
    cache.pin_part(0).release()  # other parts work
    with pytest.raises(CacheError, match=r"part-00001.* symlink or not a folder"):
        cache.pin_part(1)
    assert untouched(other)
    with (
        pytest.raises(CacheError, match="part-00001"),
        chute.open(url, cache_dir=tmp_path / "cache") as ds,
    ):
        ds[150]
    assert untouched(other)


@pytest.mark.parametrize(
    "name",
    [
        ".chute-cache",
        ".chute-cache/identity.json",
        ".chute-cache/locks",
        ".chute-cache/inuse",
        ".chute-cache/folder.lock",
        ".chute-cache/version.lock",
    ],
)
def test_symlinks_in_bookkeeping_are_refused(url: str, tmp_path: Path, name: str) -> None:
    cache = cache_for(url, tmp_path)
    cache.folder.mkdir(parents=True)
    (cache.folder / ".chute-cache").mkdir()
    other = victim(tmp_path)
    link = cache.folder / name
    if link.exists():
        link.rmdir()
    target = other / "identity.json" if name.endswith(("json", "lock")) else other
    link.symlink_to(target)
    with pytest.raises(CacheError, match=r"symlink|not a regular file"):
        cache.open()
        cache.pin_part(0)
    assert untouched(other)


def test_symlinks_at_temporary_names_are_never_opened(url: str, tmp_path: Path) -> None:
    cache = cache_for(url, tmp_path)
    cache.open()
    cache.close()
    other = victim(tmp_path)
    pid = os.getpid()
    record = cache.folder / ".chute-cache" / "identity.json"
    record.write_text(json.dumps({"url": url, "manifest_xxh3": "0"}))  # an older version: rebuilt
    (cache.folder / ".chute-cache" / f"identity.json.tmp-{pid}").symlink_to(other / "identity.json")
    cache_for(url, tmp_path).open()
    (cache.folder / "chute.json").unlink()  # rewritten at the next open
    (cache.folder / f"chute.json.tmp-{pid}").symlink_to(other / "chute.json")
    cache_for(url, tmp_path).open()
    assert untouched(other)
    assert json.loads(record.read_text())["url"] == url
    assert json.loads((cache.folder / "chute.json").read_text())["parts"]


def test_symlink_file_in_the_cache_is_not_read(url: str, tmp_path: Path) -> None:
    """A link in place of a cached file (to a file of the right size) is not used."""
    cache = cache_for(url, tmp_path)
    cache.open()
    with cache.pin_part(0) as pin:
        real = pin.paths[0]
    copy = tmp_path / "elsewhere.npy"
    copy.write_bytes(real.read_bytes())
    real.unlink()
    real.symlink_to(copy)
    with pytest.raises(CacheError, match="not a regular file"):
        cache.pin_part(0)


def test_cache_folder_is_private(url: str, tmp_path: Path) -> None:
    cache = cache_for(url, tmp_path)
    cache.open()
    cache.pin_part(0).release()
    assert cache.folder.stat().st_mode & 0o777 == 0o700
    assert (cache.folder / "part-00000").stat().st_mode & 0o077 == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_cache_folder_of_another_user_is_refused(url: str, tmp_path: Path) -> None:
    cache = cache_for(url, tmp_path)
    cache.folder.mkdir(parents=True)
    os.chown(cache.folder, 4321, 4321)
    with pytest.raises(CacheError, match="belongs to user id 4321"):
        cache.open()


def test_cache_folder_itself_a_symlink_is_refused(url: str, tmp_path: Path) -> None:
    cache = cache_for(url, tmp_path)
    other = victim(tmp_path)
    cache.folder.parent.mkdir(parents=True)
    cache.folder.symlink_to(other)
    with pytest.raises(CacheError, match="symlink"):
        cache.open()
    assert untouched(other)


@pytest.mark.parametrize("kind", ["list", "folder", "huge"])
def test_bookkeeping_of_the_wrong_type(url: str, tmp_path: Path, kind: str) -> None:
    cache = cache_for(url, tmp_path)
    cache.open()
    record = cache.folder / ".chute-cache" / "identity.json"
    record.unlink()
    if kind == "list":
        record.write_text("[1, 2]")
    elif kind == "folder":
        record.mkdir()
    else:
        record.write_bytes(b" " * (2 << 20))
    with pytest.raises(CacheError, match=r"identity\.json"):
        cache_for(url, tmp_path).open()
