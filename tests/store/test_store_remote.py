"""Remote datasets against a real S3-protocol server (moto) on 127.0.0.1: upload, download,
the node-local cache (one download per node, checks, eviction, pins), faults."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("obstore")
pytest.importorskip("moto")
pytest.importorskip("zstandard")

import _store_children as children
import torch
from _s3server import BUCKET, S3Server, assert_same, small_dataset

import chute
from chute.errors import (
    CacheError,
    ChecksumError,
    DatasetExistsError,
    DatasetNotFoundError,
    FormatError,
    RemoteError,
)
from chute.store import Prefetcher, RemoteCache, Store
from chute.transfer import download, upload

pytestmark = pytest.mark.slow  # a real S3 server (moto) and worker processes

SPAWN = mp.get_context("spawn")


def url_for(request: pytest.FixtureRequest, name: str = "ds.chute") -> str:
    return f"s3://{BUCKET}/{request.node.name.replace('[', '_').replace(']', '')}/{name}"


@pytest.fixture
def local(tmp_path: Path) -> Path:
    return small_dataset(tmp_path / "local.chute")


def opened(url: str, tmp_path: Path, limit: int | str | None = None, **kw) -> RemoteCache:
    cache = RemoteCache(Store(url, retries=2, backoff=0.05, **kw), tmp_path / "cache", limit)
    cache.open()
    return cache


# ------------------------------------------------------------------ round trips


def test_upload_then_download_and_cache(
    s3: S3Server, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = url_for(request)
    upload(local, url)
    puts = [k for m, k in s3.log if m == "PUT" and k.startswith(url.split(BUCKET + "/")[1])]
    assert puts[-1].endswith("/chute.json") and len(puts) == 1 + 3 * 6  # manifest last
    with pytest.raises(DatasetExistsError):
        upload(local, url)

    got = download(url, tmp_path / "copy.chute")
    with chute.open(local) as a, chute.open(got) as b:
        assert_same(a, b)
    chute.verify(got)

    cache = opened(url, tmp_path)
    gets_before = sum(n for (m, _), n in s3.requests.items() if m == "GET")
    for i in range(3):
        with cache.pin_part(i) as pin:
            assert all(p.is_file() for p in pin.paths)
    with chute.open(local) as a, chute.open(cache.folder) as b:
        assert_same(a, b)
    for i in range(3):  # a second pass downloads nothing
        cache.pin_part(i).release()
    gets = sum(n for (m, _), n in s3.requests.items() if m == "GET") - gets_before
    assert gets == 3 * 6  # each file once
    assert cache.usage() == sum(e.nbytes for e in cache.entries.values())


def test_zstd_round_trip(
    s3: S3Server, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = url_for(request)
    store = upload(local, url, compression="zstd")
    keys = store.list()
    assert "chute.json" in keys and all(k.endswith(".zst") for k in keys if k != "chute.json")
    cache = opened(url, tmp_path)
    entry = cache.entries["part-00000/x.npy"]
    assert entry.stored is not None and entry.stored[0] * 5 < entry.nbytes  # it compressed
    for i in range(3):
        cache.pin_part(i).release()
    with chute.open(local) as a, chute.open(cache.folder) as b:
        assert_same(a, b)
    with chute.open(download(url, tmp_path / "copy.chute")) as b, chute.open(local) as a:
        assert_same(a, b)


def test_overwrite_replaces_and_rebuilds_the_cache(
    s3: S3Server, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = url_for(request)
    upload(local, url)
    old = opened(url, tmp_path)
    old.pin_part(0).release()
    small = small_dataset(tmp_path / "small.chute", n=120, part_size=60)
    upload(small, url, overwrite=True)
    assert not [k for k in Store(url).list() if k.startswith("part-00002/")]  # old files gone
    with pytest.raises(CacheError, match=r"older version .* another process still reads"):
        opened(url, tmp_path)  # `old` still has it open (a shared lock)
    old.close()
    new = opened(url, tmp_path)  # rebuilt
    assert not (new.folder / "part-00002").exists()
    for i in range(2):
        new.pin_part(i).release()
    with chute.open(small) as a, chute.open(new.folder) as b:
        assert_same(a, b)


def test_a_folder_of_another_dataset_is_refused(
    s3: S3Server, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    a, b = url_for(request, "a.chute"), url_for(request, "b.chute")
    upload(local, a)
    upload(local, b)
    first = opened(a, tmp_path)
    other = RemoteCache(Store(b), folder=first.folder)
    with pytest.raises(CacheError, match=r"is the cache of .*a.chute.* not .*b.chute"):
        other.open()
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("mine")
    with pytest.raises(CacheError, match="not a cache folder"):
        RemoteCache(Store(b), folder=tmp_path / "plain").open()


# --------------------------------------------------------------------- bad input


def test_missing_bucket_key_and_bad_manifest(
    s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with pytest.raises(DatasetNotFoundError, match="bucket 'no-such-bucket' does not exist"):
        opened("s3://no-such-bucket/x.chute", tmp_path)
    url = url_for(request)
    with pytest.raises(DatasetNotFoundError, match=f"{url} is not a chute dataset"):
        opened(url, tmp_path)
    Store(url).put_bytes("chute.json", b'{"format": "parquet"}')
    with pytest.raises(FormatError, match=f"{url}/chute.json: not a chute manifest"):
        opened(url, tmp_path)


def test_no_credentials_is_a_clear_error(
    s3: S3Server,
    local: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = url_for(request)
    upload(local, url)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(RemoteError, match=r"no credentials .*AWS_ACCESS_KEY_ID"):
        opened(url, tmp_path, timeout=3)


def test_corrupted_object_is_refetched_once_then_refused(
    s3: S3Server, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = url_for(request)
    store = upload(local, url)
    cache = opened(url, tmp_path)
    rel = "part-00001/x.npy"
    good = (local / rel).read_bytes()
    store.put_bytes(rel, good[:-4] + b"\0\0\0\1")  # same size, other bytes
    key = f"{request.node.name}/ds.chute/{rel}"
    before = s3.gets(key)
    with pytest.raises(ChecksumError, match=f"{url}/{rel}: xxh3 .* two downloads"):
        cache.pin_part(1)
    assert s3.gets(key) - before == 2
    assert not (cache.folder / rel).exists()
    assert not list((cache.folder / "part-00001").glob(".*tmp*"))
    store.put_bytes(rel, good)  # repaired: fine again
    cache.pin_part(1).release()


# ------------------------------------------------------------- server faults


def test_5xx_is_retried_then_an_error(
    s3: S3Server, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = url_for(request)
    upload(local, url)
    cache = opened(url, tmp_path)
    key = f"{request.node.name}/ds.chute/part-00000/x.npy"
    s3.fail[key] = 2  # retries=2: the third attempt succeeds
    cache.pin_part(0).release()
    assert cache.store.stats["retries"] == 2
    key = f"{request.node.name}/ds.chute/part-00001/x.npy"
    s3.fail[key] = 10
    t = time.monotonic()
    with pytest.raises(RemoteError, match=f"{url}/part-00001/x.npy: could not read it after 3"):
        cache.pin_part(1)
    assert time.monotonic() - t < 5


def test_server_stopped_mid_epoch_errors_without_hanging(
    own_s3: S3Server, local: Path, tmp_path: Path
) -> None:
    url = f"s3://{BUCKET}/stopped/ds.chute"
    upload(local, url)
    cache = opened(url, tmp_path)
    errors: list[BaseException] = []
    with Prefetcher(range(3), cache.pin_part, ahead=1, release=lambda p: p.release()) as pf:
        assert next(pf)[0] == 0
        own_s3.stop()
        t = time.monotonic()
        try:
            for _ in pf:
                pass
        except RemoteError as exc:
            errors.append(exc)
    assert time.monotonic() - t < 10
    assert errors and "could not read it after 3 attempt(s)" in str(errors[0])


def test_server_restarted_mid_epoch_is_bridged_by_retries(
    own_s3: S3Server, local: Path, tmp_path: Path
) -> None:
    url = f"s3://{BUCKET}/restarted/ds.chute"
    upload(local, url)
    cache = RemoteCache(Store(url, retries=6, backoff=0.1), tmp_path / "cache")
    cache.open()
    cache.pin_part(0).release()
    own_s3.stop()
    restarted: list[S3Server] = []
    timer = threading.Timer(0.5, lambda: restarted.append(S3Server(own_s3.port)))
    timer.start()
    try:
        cache.pin_part(1).release()  # the moto state is per process: the objects are there
        assert cache.store.stats["retries"] >= 1
    finally:
        timer.join()
        for s in restarted:
            s.stop()


# --------------------------------------------------------- processes sharing


def test_two_processes_download_each_file_once(
    s3: S3Server, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = url_for(request)
    upload(local, url)
    cache = opened(url, tmp_path)
    prefix = f"{request.node.name}/ds.chute/"
    s3.slow[prefix + "part-00000/x.npy"] = 0.3  # long enough for both to be waiting on it
    start = SPAWN.Event()
    procs = [
        SPAWN.Process(target=children.pin_part, args=(cache, 0, start, str(tmp_path / f"o{i}")))
        for i in range(2)
    ]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert (tmp_path / "o0").read_text() == (tmp_path / "o1").read_text()
    for rel in cache.part_files(0):
        assert s3.gets(prefix + rel) == 1, rel


def test_fork_child_after_use_is_refused_not_hung(
    s3: S3Server, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """obstore's runtime does not survive fork(): a forked child that used it would hang."""
    url = url_for(request)
    upload(local, url)
    cache = opened(url, tmp_path)
    cache.pin_part(0).release()  # obstore's runtime runs in this process now
    out = tmp_path / "o"
    p = mp.get_context("fork").Process(target=children.pin_part_report, args=(cache, 1, str(out)))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    assert out.read_text().startswith("RemoteError") and "forkserver" in out.read_text()


def test_cache_limit_is_kept_and_pinned_files_never_evicted(
    s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    local = small_dataset(tmp_path / "five.chute", n=500, part_size=100)
    url = url_for(request)
    upload(local, url)
    probe = opened(url, tmp_path)
    part = sum(probe.entries[r].nbytes for r in probe.part_files(0))
    limit = int(2.5 * part)
    with pytest.raises(CacheError, match="smaller than the 3 largest parts"):
        opened(url, tmp_path, limit).check_limit(in_flight=3)
    cache = opened(url, tmp_path, limit)
    cache.check_limit(in_flight=2)
    # another process pins part 0 and holds it
    ready, done = tmp_path / "ready", tmp_path / "done"
    holder = SPAWN.Process(target=children.pin_and_hold, args=(cache, 0, str(ready), str(done)))
    holder.start()
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists()
        for i in range(1, 5):  # an epoch over the other parts
            with cache.pin_part(i):
                assert cache.usage() <= limit
        assert all((cache.folder / r).exists() for r in cache.part_files(0))  # pinned: kept
        assert not (cache.folder / "part-00001").exists() or not any(
            (cache.folder / r).exists() for r in cache.part_files(1)
        )
    finally:
        done.touch()
        holder.join(60)
    assert holder.exitcode == 0
    with cache.pin_part(1):  # part 0 is unpinned now: the least recently used goes
        assert cache.usage() <= limit
    assert not all((cache.folder / r).exists() for r in cache.part_files(0))
    assert all((cache.folder / r).exists() for r in cache.part_files(4))  # the most recent


def test_killed_download_leaves_nothing_usable_nor_locked(
    s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    big = tmp_path / "big.chute"
    chute.write(big, {"x": torch.arange(4 << 20, dtype=torch.uint8).reshape(-1, 1024)})
    url = url_for(request)
    upload(big, url)
    cache = opened(url, tmp_path)
    key = f"{request.node.name}/ds.chute/x.npy"
    s3.slow[key] = 0.05  # 64 tmp chunks: about 3 s
    child = SPAWN.Process(target=children.ensure, args=(cache, "x.npy"))
    child.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(cache.folder.glob(".x.npy.tmp-*")):
        time.sleep(0.02)
    time.sleep(0.3)  # some bytes written
    os.kill(child.pid, signal.SIGKILL)
    child.join(30)
    tmps = list(cache.folder.glob(".x.npy.tmp-*"))
    assert tmps and tmps[0].stat().st_size < (4 << 20)  # a dead download's temp file
    assert not (cache.folder / "x.npy").exists()  # no half file at the real name
    s3.slow.clear()
    t = time.monotonic()
    cache.ensure("x.npy")  # the dead holder's lock is gone: no wait
    assert time.monotonic() - t < 10
    assert not list(cache.folder.glob(".x.npy.tmp-*"))
    with chute.open(big) as a, chute.open(cache.folder) as b:
        assert torch.equal(a[:]["x"], b[:]["x"])


def test_full_disk_is_a_cache_error_naming_the_folder(
    s3: S3Server, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = url_for(request)
    upload(local, url)
    cache = opened(url, tmp_path)
    out = tmp_path / "out"
    p = SPAWN.Process(
        target=children.ensure_with_file_limit,
        args=(cache, "part-00000/x.npy", 4096, str(out)),
    )
    p.start()
    p.join(60)
    text = out.read_text()
    assert text.startswith("CacheError") and str(cache.folder) in text and "full" in text
    assert not list((cache.folder / "part-00000").glob(".*tmp*"))


def test_reads_with_a_session_token_go_through_signed_urls(
    s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a session token, reads are signed URLs fetched without following redirects
    (chute/store/signed.py): the same samples, the same errors; without one, obstore's."""
    url = url_for(request)
    local = small_dataset(tmp_path / "local.chute")
    upload(local, url)
    assert Store(url)._reader() is None  # keys alone: obstore's requests
    monkeypatch.setenv("AWS_SESSION_TOKEN", "SESSION")
    store = Store(url, retries=1, backoff=0.01)
    assert store._reader() is not None
    assert store.head("chute.json") is not None and store.head("nothing") is None
    with pytest.raises(DatasetNotFoundError, match="no such object"):
        store.get_bytes("nothing")
    with chute.open(url, cache_dir=tmp_path / "cache") as ds:
        assert_same(ds, chute.open(local))
    s3.fail[f"{url.split(BUCKET + '/')[1]}/chute.json"] = 1  # a 503, then the object
    assert store.get_bytes("chute.json") == (local / "chute.json").read_bytes()
    assert store.stats["retries"] == 1


def test_unsigned_requests_with_a_session_token_need_a_trusted_endpoint(
    s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uploads, listings and deletes cannot go through signed URLs: with a session token and
    a custom endpoint they are refused (obstore would follow a redirect with the token) unless
    the endpoint is trusted by name, storage_options={"trust_redirects": True}."""
    url = url_for(request)
    local = small_dataset(tmp_path / "local.chute")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "SESSION")
    with pytest.raises(RemoteError, match="trust_redirects"):
        upload(local, url)
    store = Store(url)
    for refused in (
        lambda: store.list(),
        lambda: store.delete("x"),
        lambda: store.put_bytes("x", b""),
    ):
        with pytest.raises(RemoteError, match=r"session token .* endpoint"):
            refused()
    trusted = {"trust_redirects": True}
    upload(local, url, storage_options=trusted)
    assert "chute.json" in Store(url, trusted).list()
    with chute.open(url, cache_dir=tmp_path / "cache") as ds:  # reads: signed URLs, no need
        assert_same(ds, chute.open(local))
    with pytest.raises(chute.ArgumentError, match="trust_redirects"):
        Store(url, {"trust_redirects": "yes"})
