"""Remote datasets in the conditions of a shared cluster node, against a real S3-protocol
server (moto) on 127.0.0.1: forked workers, a global shuffle over a small cache."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("obstore")
pytest.importorskip("moto")

import torch
from _s3server import BUCKET, S3Server, small_dataset

import chute
from chute.cli import main as cli
from chute.errors import ArgumentError, ArgumentValueError, DatasetNotFoundError, RemoteError
from chute.store import Store
from chute.store.client import RETRY_SECONDS


def url_for(request: pytest.FixtureRequest, name: str = "ds.chute") -> str:
    return f"s3://{BUCKET}/{request.node.name.replace('[', '_').replace(']', '')}/{name}"


@pytest.fixture(autouse=True)
def cache_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("context", ["fork", torch.multiprocessing.get_context("fork")])
def test_dataloader_refuses_forked_workers_at_once(
    s3: S3Server, request: pytest.FixtureRequest, context: object
) -> None:
    url = url_for(request)
    small_dataset(url, n=60, part_size=20)
    ds = chute.open(url)  # fetched the manifest: a forked child's requests would hang
    with pytest.raises(ArgumentValueError, match=r"cannot be forked.*forkserver.*spawn"):
        chute.dataloader(ds, 10, num_workers=2, multiprocessing_context=context)
    with pytest.raises(ArgumentValueError, match="cannot be forked"):  # a Subset of it too
        sub = torch.utils.data.Subset(ds, range(30))
        chute.dataloader(sub, 10, num_workers=1, multiprocessing_context="fork")


class _Batches(torch.utils.data.Dataset):
    """Batches of 10 of a dataset, gathered in the worker: a plain torch DataLoader."""

    def __init__(self, ds: chute.Dataset) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return len(self.ds) // 10

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.ds.gather(np.arange(10 * i, 10 * i + 10))


def test_a_forked_worker_ignores_the_parents_prefetch(
    s3: S3Server, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A worker forked while the parent prefetches (a plain torch DataLoader, fork) does not
    wait on the parent's prefetch threads: parts already cached are read, a download is the
    client's clear error about fork(). DataLoader(timeout=) turns a hang into a failure."""
    url = url_for(request)
    small_dataset(url, n=60, part_size=20)
    ds = chute.open(url)
    ds.fetch()  # every part in the node's cache
    cold = chute.open(url, cache_dir=tmp_path / "cold")  # nothing cached
    plan = [np.arange(i, i + 10) for i in range(0, 60, 10)]
    kw = {"batch_size": None, "num_workers": 1, "multiprocessing_context": "fork", "timeout": 120}
    try:
        assert ds.prefetch(plan) is not None
        got = [b["x"][:, 0].tolist() for b in torch.utils.data.DataLoader(_Batches(ds), **kw)]
        assert [v for b in got for v in b] == list(range(60))
        # the parent's feed fetches 2 parts ahead and waits: part 2 is the child's download
        assert cold.prefetch(plan) is not None
        with pytest.raises(RemoteError, match="fork"):
            list(torch.utils.data.DataLoader(_Batches(cold), **kw))
    finally:
        ds.close()
        cold.close()


def test_global_shuffle_over_a_small_cache_warns_at_creation(
    s3: S3Server, request: pytest.FixtureRequest
) -> None:
    url = url_for(request)
    small_dataset(url, n=400, part_size=40)
    full = chute.open(url)
    total = sum(e.nbytes for e in full.cache.entries.values())
    small = chute.open(url, cache_limit=total * 6 // 10)  # 6 of the 10 parts
    for make in (
        lambda ds: chute.Loader(ds, 20, shuffle=True, num_workers=1),
        lambda ds: chute.dataloader(ds, 20, shuffle=True, num_workers=0),
        lambda ds: chute.Loader(torch.utils.data.Subset(ds, range(200)), 20, shuffle=True),
        lambda ds: chute.Loader(ds, 20, batch_tokens=64, num_workers=1),  # shuffled too
        lambda ds: chute.dataloader(ds, 20, batch_tokens=64, num_workers=0),
    ):
        with pytest.warns(UserWarning, match="shuffle='parts'"):
            make(small)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        chute.Loader(small, 20, shuffle="parts", num_workers=1)
        chute.Loader(small, 20, shuffle=False, num_workers=1)
        chute.Loader(full, 20, shuffle=True, num_workers=1)  # no limit: nothing evicted
        big = chute.open(url, cache_limit=total)
        chute.Loader(big, 20, shuffle=True, num_workers=1)


def _local_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_a_url_writer_uploads_each_part_when_finished(
    s3: S3Server, request: pytest.FixtureRequest, cache_env: Path
) -> None:
    """Each finished part is uploaded and its local copy deleted: the staging folder never
    holds more than the part being written; the manifest is uploaded last."""
    url = url_for(request)
    key = url.split(BUCKET + "/")[1]
    part = np.ones((100, 256), np.float32)  # 100 KB a part
    start = len(s3.log)
    peak = 0
    with chute.Writer(url, part_size=100) as w:
        for i in range(6):
            w.extend({"x": part * i, "y": np.full(100, i)})
            peak = max(peak, _local_bytes(cache_env / ".staging"))
            puts = {k for m, k in s3.log[start:] if m == "PUT"}
            assert f"{key}/part-{i:05d}/x.npy" in puts  # uploaded as soon as finished
            assert f"{key}/chute.json" not in puts
    assert peak <= part.nbytes + 10_000  # one part's files (and headers) at most
    assert not any((cache_env / ".staging").iterdir())  # the staging folder is removed
    assert [k for m, k in s3.log[start:] if m == "PUT"][-1] == f"{key}/chute.json"
    ds = chute.open(url)
    assert len(ds) == 600 and len(ds.parts) == 6
    assert ds.gather(np.array([0, 599]))["y"].tolist() == [0, 5]


def test_write_to_a_url_takes_storage_options_compression_and_a_default_part_size(
    s3: S3Server,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = url_for(request)
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # the endpoint comes from storage_options alone
    opts = {"endpoint": s3.endpoint}
    monkeypatch.setattr(chute.writer.writer, "URL_PART_BYTES", 40_000)  # 128 MiB by default
    x = np.zeros((1000, 100), np.float32)  # 400 KB, compressible
    chute.write(url, {"x": x, "i": np.arange(1000)}, storage_options=opts, compression="zstd")
    ds = chute.open(url, storage_options=opts)
    assert 8 <= len(ds.parts) <= 11  # about 40 KB each
    assert ds.cache.manifest is not None
    key = url.split(BUCKET + "/")[1]
    assert s3.gets(f"{key}/part-00000/x.npy.zst") == 0  # stored compressed
    assert ds.gather(np.arange(1000))["i"].tolist() == list(range(1000))
    assert s3.gets(f"{key}/part-00000/x.npy.zst") == 1
    with pytest.raises(ArgumentValueError, match="compression= applies to datasets written"):
        chute.write(Path(ds.cache.folder).parent / "local.chute", {"x": x}, compression="zstd")


def test_a_url_writer_turning_a_field_ragged_rewrites_the_uploaded_parts(
    s3: S3Server, request: pytest.FixtureRequest
) -> None:
    url = url_for(request)
    with chute.Writer(url, part_size=2, compression="zstd") as w:
        for n in (3, 3, 3, 3, 5):  # the fifth sample makes "v" ragged: parts 0, 1 re-sent
            w.append({"v": np.arange(n)})
    ds = chute.open(url)
    assert [len(ds[i]["v"]) for i in range(5)] == [3, 3, 3, 3, 5]


def test_endpoint_spellings_http_inference_and_precedence(
    s3: S3Server,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    url = url_for(request)
    small_dataset(url, n=20, part_size=10)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")  # dead: storage_options win
    for key in ("aws_endpoint", "endpoint", "AWS_ENDPOINT_URL", "endpoint_url"):
        ds = chute.open(url, storage_options={key: s3.endpoint}, cache_dir=tmp_path / key)
        assert len(ds) == 20 and ds[19]["label"] is not None
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1")  # obstore lets it win
    with pytest.raises(ArgumentError, match="AWS_ENDPOINT_URL_S3"):
        chute.open(url, storage_options={"aws_endpoint": s3.endpoint})


def test_an_https_endpoint_on_a_plain_http_server_fails_at_once_naming_tls(
    s3: S3Server, request: pytest.FixtureRequest
) -> None:
    tls = s3.endpoint.replace("http://", "https://")
    store = Store(url_for(request), {"endpoint": tls}, retries=5)
    with pytest.raises(RemoteError, match="TLS handshake") as info:
        store.get_bytes("chute.json")
    assert store.stats["retries"] == 0  # not retried: it cannot succeed
    assert "http://" in str(info.value)


def test_an_azure_http_endpoint_allows_plain_http(s3: S3Server) -> None:
    """An ``http://`` Azure endpoint (an emulator's) needs no allow_http: the request is sent
    (here to the S3 server, which knows no such container) rather than refused by the client
    builder and retried as unreachable."""
    opts = {
        "account_name": "devstoreaccount1",
        "account_key": "Zm9v",
        "azure_storage_endpoint": f"{s3.endpoint}/devstoreaccount1",
    }
    store = Store("az://nocontainer/x.chute", opts, retries=0)
    with pytest.raises((RemoteError, DatasetNotFoundError)) as info:
        store.get_bytes("chute.json")
    assert "builder error" not in str(info.value) and "unreachable" not in str(info.value)
    assert s3.requests[("GET", "nocontainer/x.chute/chute.json")] == 1


@pytest.mark.slow
def test_bench_on_a_url_keeps_the_url(
    s3: S3Server, request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    url = url_for(request)
    small_dataset(url, n=300, part_size=100)
    args = ["bench", url, "--max-bytes", "50KB", "--time-limit", "1", "--work-dir", str(tmp_path)]
    assert cli(args) == 0
    assert f"of {url};" in capsys.readouterr().out


def test_default_retries_ride_out_a_server_restart(
    own_s3: S3Server, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The server is down for 10 s (longer than 5 retries with backoff once waited): the
    default retry window (chute.store.client.RETRY_SECONDS, 120 s) bridges it."""
    url = url_for(request)
    small_dataset(url, n=40, part_size=20)
    ds = chute.open(url, cache_dir=tmp_path / "c")
    assert ds.cache.store.retry == RETRY_SECONDS and ds.cache.store.retries is None
    ds.gather(np.arange(20))  # part 0
    own_s3.stop()
    restarted: list[S3Server] = []
    timer = threading.Timer(10, lambda: restarted.append(S3Server(own_s3.port)))
    timer.start()
    try:
        assert ds.gather(np.arange(20, 40))["label"].shape == (20,)  # part 1, after the outage
        assert ds.cache.store.stats["retries"] >= 6
    finally:
        timer.join()
        for s in restarted:
            s.stop()


def test_a_dead_endpoint_and_a_stalled_one_fail_within_the_retry_window(
    s3: S3Server, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = url_for(request)
    small_dataset(url, n=40, part_size=20)
    key = url.split(BUCKET + "/")[1]
    dead = Store(url, {"endpoint": "http://127.0.0.1:1"}, retry=1, backoff=0.05)
    with pytest.raises(RemoteError, match=r"attempt\(s\) in 1 s of retries.*retry=SECONDS"):
        dead.get_bytes("chute.json")
    assert dead.stats["retries"] >= 1
    ds = chute.open(url, cache_dir=tmp_path / "c", retry=1, timeout=1)
    assert (ds.cache.store.retry, ds.cache.store.timeout) == (1.0, 1.0)
    s3.slow[f"{key}/part-00000/x.npy"] = 3  # 3 s per 64 KiB: a stall, cut after 1 s
    with pytest.raises(RemoteError, match=r"part-00000/x\.npy"):
        ds.gather(np.arange(20))
    with pytest.raises(ArgumentError, match="apply to URLs"):
        chute.open(tmp_path / "c", retry=10)


_FULL_DISK_CHILD = """
import resource, signal, sys
import numpy as np
import chute
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file over the limit: EFBIG, as a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
try:
    chute.write(sys.argv[1], {"x": np.zeros((1000, 1000), np.uint8)}, part_size=500)
except chute.WriteError as exc:
    print(exc)
"""


def test_no_room_while_staging_names_the_staging_folder_and_chute_cache_dir(
    s3: S3Server, request: pytest.FixtureRequest, cache_env: Path
) -> None:
    url = url_for(request)
    child = subprocess.run(
        [sys.executable, "-c", _FULL_DISK_CHILD, url],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ,
    )
    out = child.stdout
    assert f"local staging of {url}" in out, child.stderr[-2000:]
    assert "CHUTE_CACHE_DIR" in out and str(cache_env / ".staging") in out
    with pytest.raises(DatasetNotFoundError):
        chute.open(url)


def test_a_failing_object_is_tried_as_often_as_the_error_says(
    s3: S3Server, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The prefetcher and the Loader's threads all need the failing file: one retry window
    is spent on it, not one each in turn."""
    url = url_for(request)
    small_dataset(url, n=300, part_size=30)
    key = url.split(BUCKET + "/")[1] + "/part-00003/x.npy"
    s3.fail[key] = 10**6
    ds = chute.open(url, cache_dir=tmp_path / "c", retry=1)
    with pytest.raises(RemoteError, match=r"after (\d+) attempt") as info:
        for _ in chute.Loader(ds, 10, shuffle=False, num_workers=2):
            pass
    said = int(re.search(r"after (\d+) attempt", str(info.value)).group(1))  # type: ignore[union-attr]
    assert s3.gets(key) == said
