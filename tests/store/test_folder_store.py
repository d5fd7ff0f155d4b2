"""The ObjectStore contract, checked on FolderStore (a local folder, no dependency) and on
Store over file:// (obstore); then the remote reader, its cache, upload and download run
end to end through a FolderStore in a second or so. tests/store/test_remote_dataset.py runs
them against a real S3-protocol server."""

from __future__ import annotations

import io
import multiprocessing
import os
import threading
from pathlib import Path

import numpy as np
import pytest
import xxhash

import chute
from chute.errors import DatasetExistsError, DatasetNotFoundError, RemoteError
from chute.reader.remote import RemoteDataset
from chute.store import FolderStore, ObjectStore, Store
from chute.store.client import CorruptObjectError
from chute.store.upload import upload
from chute.transfer import download


def check_object_store(store: ObjectStore, tmp_path: Path) -> None:
    """What chute's remote reader, cache, upload and download ask of a store."""
    assert isinstance(store, ObjectStore)
    assert store.head("a/b.bin") is None
    with pytest.raises(DatasetNotFoundError, match=r"b\.bin"):
        store.get_bytes("a/b.bin")
    store.put_bytes("a/b.bin", b"hello")
    assert store.get_bytes("a/b.bin") == b"hello"
    assert store.head("a/b.bin")["size"] == 5  # type: ignore[index]
    store.put_bytes("a/b.bin", b"hello again")  # replaced whole
    assert store.get_bytes("a/b.bin") == b"hello again"
    payload = np.random.default_rng(0).bytes(3 << 20)
    (tmp_path / "local.bin").write_bytes(payload)
    store.put_file(tmp_path / "local.bin", "c.bin")
    sink = io.BytesIO(b"stale bytes, truncated first")
    got = store.get_to_file("c.bin", sink, size=len(payload))
    assert got == (len(payload), xxhash.xxh3_64_hexdigest(payload))
    assert sink.getvalue() == payload
    with pytest.raises(CorruptObjectError, match=r"c\.bin"):  # not the manifest's size
        store.get_to_file("c.bin", io.BytesIO(), size=len(payload) - 1)
    with pytest.raises(CorruptObjectError, match=r"a/b\.bin"):  # over the limit
        store.get_bytes("a/b.bin", limit=4)
    zstandard = pytest.importorskip("zstandard")
    packed = zstandard.ZstdCompressor().compress(payload)
    store.put_chunks("d.bin.zst", lambda: [packed[:1000], packed[1000:]])
    sink = io.BytesIO()
    assert store.get_to_file("d.bin.zst", sink, size=len(packed), zstd=True) == (
        len(packed),
        xxhash.xxh3_64_hexdigest(packed),
    )
    assert sink.getvalue() == payload
    store.put_bytes("bad.zst", b"not zstd at all")
    with pytest.raises(CorruptObjectError):
        store.get_to_file("bad.zst", io.BytesIO(), size=15, zstd=True)
    with pytest.raises(CorruptObjectError, match="decompresses to over"):  # a bomb is cut
        store.get_to_file("d.bin.zst", io.BytesIO(), size=len(packed), zstd=True, out=1000)
    assert sorted(store.list()) == ["a/b.bin", "bad.zst", "c.bin", "d.bin.zst"]
    assert sorted(store.list("a/")) == ["a/b.bin"]
    store.delete("bad.zst")
    store.delete("bad.zst")  # no error: already gone
    assert store.head("bad.zst") is None
    assert store.stats["put"] >= 4 and store.stats["bytes_in"] >= 2 * len(payload)


def test_folder_store_keeps_the_contract(tmp_path: Path) -> None:
    check_object_store(FolderStore(tmp_path / "bucket" / "ds"), tmp_path)


def test_obstore_store_on_a_folder_keeps_the_contract(tmp_path: Path) -> None:
    pytest.importorskip("obstore")
    check_object_store(Store((tmp_path / "bucket" / "ds").as_uri()), tmp_path)


def test_folder_store_refuses_keys_outside_it(tmp_path: Path) -> None:
    store = FolderStore(tmp_path / "ds")
    for key in ("../escape", "/escape", "a//b", "./x"):
        with pytest.raises(chute.ArgumentError, match="not a key inside"):
            store.put_bytes(key, b"x")
    assert not (tmp_path / "escape").exists()


@pytest.fixture
def local(tmp_path: Path) -> Path:
    rng = np.random.default_rng(1)
    return chute.write(
        tmp_path / "local.chute",
        {
            "x": rng.standard_normal((300, 4)).astype(np.float32),
            "tok": [np.arange(i % 7, dtype=np.int32) for i in range(300)],
        },
        part_size=100,
    )


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_upload_open_load_download_through_a_folder_store(
    local: Path, tmp_path: Path, compression: str | None
) -> None:
    if compression:
        pytest.importorskip("zstandard")
    store = FolderStore(tmp_path / "bucket" / "ds")
    upload(local, store, compression=compression)
    with pytest.raises(DatasetExistsError):
        upload(local, store)
    ds, want = RemoteDataset(store, cache_dir=tmp_path / "cache"), chute.open(local)
    assert len(ds) == len(want) == 300
    idx = np.random.default_rng(2).permutation(300)[:50]
    got, ref = ds.gather(idx), want.gather(idx)
    assert np.array_equal(got["x"].numpy(), ref["x"].numpy())
    assert [t.tolist() for t in got["tok"]] == [t.tolist() for t in ref["tok"]]
    loaded = [b["x"] for b in chute.Loader(ds, 64, shuffle=False)]
    assert np.array_equal(np.concatenate(loaded), want.gather(np.arange(300))["x"].numpy())
    copy = chute.open(download(store, tmp_path / "copy.chute"))
    assert np.array_equal(copy.gather(idx)["x"].numpy(), ref["x"].numpy())


def test_a_corrupted_object_in_the_folder_is_caught(local: Path, tmp_path: Path) -> None:
    store = FolderStore(tmp_path / "bucket" / "ds")
    upload(local, store)
    key = next(k for k in store.list() if k.endswith("x.npy"))
    blob = bytearray(store.get_bytes(key))
    blob[-1] ^= 0xFF
    store.put_bytes(key, bytes(blob))
    ds = RemoteDataset(store, cache_dir=tmp_path / "cache")
    with pytest.raises(chute.ChecksumError):
        ds.gather(np.arange(300))


def _make_client(store: Store) -> None:
    try:
        store.client()
    except RemoteError as exc:  # the parent used obstore already: the clear refusal
        assert "forked" in str(exc)


def test_a_child_forked_while_a_thread_makes_the_client_makes_its_own(tmp_path: Path) -> None:
    """fork() while a thread of the parent holds the lock that makes the client (the first
    request of a prefetch thread): the child makes its own client; it does not wait forever on
    the lock it inherited held (it makes one, or refuses one that fork() broke)."""
    (tmp_path / "bucket").mkdir()
    store = Store((tmp_path / "bucket").as_uri())
    held, release = threading.Event(), threading.Event()

    def maker() -> None:  # a parent thread inside the client's making
        with store._locks.setdefault(os.getpid(), threading.Lock()):
            held.set()
            release.wait(60)

    thread = threading.Thread(target=maker)
    thread.start()
    try:
        assert held.wait(60)
        child = multiprocessing.get_context("fork").Process(target=_make_client, args=(store,))
        child.start()
        child.join(timeout=60)
        alive = child.is_alive()
        if alive:
            child.kill()
        assert not alive and child.exitcode == 0
    finally:
        release.set()
        thread.join(timeout=60)
