"""Remote datasets end to end, as a user uses them, against a real S3-protocol server (moto)
on 127.0.0.1: chute.write(URL) -> chute.open(URL) -> Loader / chute.dataloader, the cache
shared by processes and bounded by cache_limit, faults, the command line."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import pickle
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("obstore")
pytest.importorskip("moto")

import _remote_children as children
import torch
from _s3server import BUCKET, S3Server, small_dataset

import chute
from chute.cli import main as cli
from chute.errors import (
    CacheError,
    ChecksumError,
    DatasetExistsError,
    DatasetNotFoundError,
    RemoteError,
)
from chute.reader.remote import RemoteDataset
from chute.store import Store

pytestmark = pytest.mark.slow  # a real S3 server (moto) and worker processes

SPAWN = mp.get_context("spawn")
ENV_VARS = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")


def url_for(request: pytest.FixtureRequest, name: str = "ds.chute") -> str:
    return f"s3://{BUCKET}/{request.node.name.replace('[', '_').replace(']', '')}/{name}"


def ids(batches) -> list[int]:
    return [int(v) for b in batches for v in b["x"][:, 0].tolist()]


@pytest.fixture(autouse=True)
def cache_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's default cache and staging folders in its tmp_path."""
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_write_open_loader_epoch_exactly_once(
    s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest, cache_env: Path
) -> None:
    url = url_for(request)
    assert small_dataset(url, n=300, part_size=50) == url  # written locally, then uploaded
    assert not list((cache_env / ".staging").iterdir())  # the staging copy is gone
    key = url.split(BUCKET + "/")[1]
    gets = sum(n for (m, k), n in s3.requests.items() if m == "GET" and k.startswith(key))
    ds = chute.open(url)
    assert isinstance(ds, RemoteDataset) and len(ds) == 300
    assert sum(n for (m, k), n in s3.requests.items() if m == "GET" and k.startswith(key)) == (
        gets + 1  # opening reads the manifest only
    )
    assert ds[7]["text"] == "sample 7" and int(ds[-1]["x"][0]) == 299
    loader = chute.Loader(ds, 32, num_workers=2, seed=1)
    got = ids(loader)
    assert sorted(got) == list(range(300)) and got != list(range(300))
    # resume mid-epoch, with another world size
    loader = chute.Loader(ds, 32, num_workers=2, seed=1)
    it = iter(loader)
    first = ids([next(it) for _ in range(3)])
    state = loader.state_dict()
    rest = []
    for r in range(2):
        other = chute.Loader(ds, 16, num_workers=1, seed=1, rank=r, world_size=2)
        other.load_state_dict(state)
        rest += ids(other)
    assert sorted(first + rest) == list(range(300))
    # pickles small, as (cache, fields): a copy reads without fetching the manifest again
    copy = pickle.loads(pickle.dumps(ds))
    assert len(pickle.dumps(ds)) < 20_000 and copy[5]["text"] == "sample 5"
    # Subset, to_memory, fields
    sub = torch.utils.data.Subset(ds, list(range(100, 160)))
    assert sorted(ids(chute.Loader(sub, 8, num_workers=2))) == list(range(100, 160))
    assert int(ds.to_memory()[42]["x"][0]) == 42
    assert list(chute.open(url, fields=["label"])[0]) == ["label"]
    assert "s3://" in repr(ds)


def test_prefetch_fetches_ahead_in_order_and_is_released(
    s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = url_for(request)
    small_dataset(url, n=400, part_size=40)
    ds = chute.open(url, cache_limit=10**9)
    key = url.split(BUCKET + "/")[1]
    start = len(s3.log)
    loader = chute.Loader(ds, 20, shuffle=False, num_workers=2)
    assert ids(loader) == list(range(400))
    order = [k for m, k in s3.log[start:] if m == "GET" and k.endswith("/x.npy")]
    want = [f"{key}/part-{i:05d}/x.npy" for i in range(10)]
    assert sorted(order) == want  # each part once
    # in read order, up to the parts fetched concurrently (the prefetch depth)
    assert all(abs(order.index(k) - i) <= 2 for i, k in enumerate(want)), order
    assert ds._feed is None or ds._feed.closed  # the pass ended: its pins were released
    ds.close()
    assert ds.cache.evict(10**9) > 0  # nothing is pinned any more: all evictable


def test_dataloader_workers_default_to_a_safe_start(
    s3: S3Server, request: pytest.FixtureRequest
) -> None:
    url = url_for(request)
    small_dataset(url, n=120, part_size=30)
    ds = chute.open(url)
    ds[0]  # the parent used the client: forked workers would hang
    dl = chute.dataloader(ds, 16, num_workers=2)
    assert dl.multiprocessing_context.get_start_method() == "forkserver"
    assert sorted(ids(dl)) == list(range(120))


def test_dataloader_prefetches_in_the_main_process(
    s3: S3Server, request: pytest.FixtureRequest
) -> None:
    """chute.dataloader's sampler downloads the parts ahead of its worker processes, in the
    order it hands their batches out; each file once per node, whoever gets there first."""
    url = url_for(request)
    small_dataset(url, n=400, part_size=40)
    ds = chute.open(url)
    key = url.split(BUCKET + "/")[1]
    start = len(s3.log)
    dl = chute.dataloader(ds, 20, shuffle=False, num_workers=2, batch_transform=children.slow)
    assert ids(dl) == list(range(400))
    order = [k for m, k in s3.log[start:] if m == "GET" and k.endswith("/x.npy")]
    assert sorted(order) == [f"{key}/part-{i:05d}/x.npy" for i in range(10)]
    fetched = ds.cache.store.stats["get"]  # this (the main) process's downloads
    assert fetched >= 10, fetched  # most of the 10 parts x 3 files: ahead of the workers
    assert ds._feed is None or ds._feed.closed


def test_decode_on_a_remote_image_dataset_prefetches(
    s3: S3Server, request: pytest.FixtureRequest
) -> None:
    pytest.importorskip("simplejpeg")
    from PIL import Image

    rng = np.random.default_rng(0)
    photos = [Image.fromarray(rng.integers(0, 255, (40, 50, 3), np.uint8)) for _ in range(60)]
    url = url_for(request)
    chute.write(url, {"image": photos}, schema={"image": chute.fields.Image()}, part_size=10)
    ds = chute.open(url)
    loader = chute.Loader(ds, 8, shuffle=False, decode={"image": chute.CenterCrop(16)})
    it = iter(loader)
    assert next(it)["image"].shape == (8, 3, 16, 16)
    assert ds._feed is not None and not ds._feed.closed  # the Decoded view passed it on
    assert sum(len(b["image"]) for b in it) == 52


def test_two_processes_share_one_cache_and_download_each_file_once(
    s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = url_for(request)
    small_dataset(url, n=200, part_size=50)
    key = url.split(BUCKET + "/")[1]
    env = {k: os.environ[k] for k in ENV_VARS}
    outs = [tmp_path / f"o{i}" for i in range(2)]
    procs = [
        SPAWN.Process(target=children.read_all, args=(url, str(tmp_path / "shared"), env, str(o)))
        for o in outs
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    for o in outs:
        assert sorted(json.loads(o.read_text())) == list(range(200))
    data = [(k, n) for (m, k), n in s3.requests.items() if m == "GET" and k.startswith(key)]
    assert len(data) == 1 + 4 * 6 and all(n == 1 for k, n in data if k.endswith(".npy")), data


def test_cache_limit_is_kept_within_the_parts_in_use(
    s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = url_for(request)
    small_dataset(url, n=600, part_size=50)  # 12 parts
    probe = chute.open(url, cache_dir=tmp_path / "probe")
    part = max(
        sum(f.nbytes for f in p.files.values()) for p in probe.parts
    )  # the largest part, all fields
    with pytest.raises(CacheError, match="smaller than the 5 largest parts"):
        chute.open(url, cache_limit=4 * part)
    limit = 6 * part
    ds = chute.open(url, cache_limit=limit)
    peak = 0
    for _ in range(2):  # two epochs: the second evicts and fetches again
        for _b in chute.Loader(ds, 25, shuffle=False, num_workers=2):
            peak = max(peak, ds.cache.usage())
    assert peak <= limit + 3 * part  # beyond the limit: at most parts pinned while read
    assert ds.cache.usage() <= limit + 3 * part
    got = ids(chute.Loader(ds, 25, shuffle="parts", seed=4, num_workers=2))
    assert sorted(got) == list(range(600))  # shuffled, and within the limit: part-aware


def test_two_nodes_two_ranks_part_aware_each_node_downloads_its_half(
    s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A simulated 2-node x 2-rank job: 4 processes, a cache folder per node."""
    url = url_for(request)
    small_dataset(url, n=800, part_size=50)  # 16 parts
    total = sum(f.nbytes for p in chute.open(url).parts for f in p.files.values())
    env = {k: os.environ[k] for k in ENV_VARS}
    outs, procs = [], []
    for rank in range(4):
        node = tmp_path / f"node{rank // 2}"
        out = tmp_path / f"rank{rank}.json"
        outs.append(out)
        args = (url, str(node), env, rank, 4, 2, str(out))
        procs.append(SPAWN.Process(target=children.read_rank, args=args))
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
        assert p.exitcode == 0
    results = [json.loads(o.read_text()) for o in outs]
    for e in range(2):
        seen = [i for r in results for i in r["epochs"][e]]
        assert sorted(seen) == list(range(800)), e  # every sample once per epoch
        assert len({len(r["epochs"][e]) for r in results}) == 1  # equal steps
    for node in range(2):  # in the first epoch (the next deals the parts anew)
        got = results[2 * node]["bytes"][0] + results[2 * node + 1]["bytes"][0]
        assert 0.4 * total < got < 0.6 * total, (node, got, total)  # its half, not all


def test_server_stopped_mid_epoch_is_a_chute_error_not_a_hang(
    own_s3: S3Server, tmp_path: Path
) -> None:
    url = f"s3://{BUCKET}/stopped-loader/ds.chute"  # moto's state is per process
    small_dataset(url, n=300, part_size=50)
    ds = RemoteDataset(Store(url, retries=2, backoff=0.05, timeout=5))
    loader = chute.Loader(ds, 25, shuffle=False, num_workers=2)
    it = iter(loader)
    next(it)
    own_s3.stop()
    t = time.monotonic()
    with pytest.raises(RemoteError) as info:  # a chute error arrives as itself
        for _ in it:
            pass
    assert time.monotonic() - t < 20
    assert "attempt(s)" in str(info.value)


def test_corrupted_object_is_refetched_once_then_an_error(
    s3: S3Server, request: pytest.FixtureRequest
) -> None:
    url = url_for(request)
    small_dataset(url, n=100, part_size=50)
    store = Store(url)
    key = url.split(BUCKET + "/")[1]
    good = store.get_bytes("part-00001/x.npy")
    store.put_bytes("part-00001/x.npy", good[:-4] + b"\xff\xff\xff\xff")  # same size
    before = s3.gets(f"{key}/part-00001/x.npy")
    ds = chute.open(url)
    assert int(ds[10]["x"][0]) == 10  # part 0 is fine
    with pytest.raises(ChecksumError, match=r"part-00001/x\.npy.*two downloads"):
        ds[60]
    assert s3.gets(f"{key}/part-00001/x.npy") == before + 2
    assert not (ds.cache.folder / "part-00001" / "x.npy").exists()  # never used


def test_a_failed_upload_leaves_no_openable_dataset(
    s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest, cache_env: Path
) -> None:
    url = url_for(request)
    key = url.split(BUCKET + "/")[1]
    s3.fail[f"{key}/part-00001/x.npy"] = 100
    x = np.zeros((100, 64), np.float32)
    with pytest.raises(RemoteError):  # retried for 1 s, not the default 2 minutes
        chute.write(url, {"x": x}, part_size=50, storage_options={"retry": 1})
    with pytest.raises(DatasetNotFoundError, match="manifest is uploaded last"):
        chute.open(url)
    assert not list((cache_env / ".staging").iterdir())
    s3.fail.clear()
    small_dataset(url, n=100, part_size=50)
    with pytest.raises(DatasetExistsError):  # refused before writing anything
        chute.Writer(url)
    chute.write(url, {"x": np.zeros((3, 64), np.float32)}, overwrite=True)
    assert len(chute.open(url)) == 3


def test_convert_from_torch_from_dask_to_a_url(
    s3: S3Server, request: pytest.FixtureRequest
) -> None:
    url = url_for(request)
    x = np.arange(40, dtype=np.float32).reshape(20, 2)
    assert chute.convert({"x": x}, url, progress=False) == url
    assert torch.equal(chute.open(url)[3]["x"], torch.tensor([6.0, 7.0]))
    tds = torch.utils.data.TensorDataset(torch.arange(10))
    url2 = url_for(request, "t.chute")
    chute.from_torch(tds, url2, num_workers=0, names=("y",), progress=False)
    assert int(chute.open(url2)[9]["y"]) == 9
    da = pytest.importorskip("dask.array")
    url3 = url_for(request, "d.chute")
    chute.from_dask(
        {"x": da.from_array(x, chunks=(7, 2))}, url3, scheduler="threads", progress=False
    )
    assert torch.equal(chute.open(url3)[19]["x"], torch.tensor([38.0, 39.0]))


def test_cli_upload_download_info_verify(
    s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture
) -> None:
    url = url_for(request)
    local = small_dataset(tmp_path / "l.chute", n=100, part_size=50)
    assert cli(["upload", str(local), url, "--compression", "zstd"]) == 0
    assert cli(["upload", str(local), url]) == 1  # exists
    assert cli(["info", url]) == 0
    assert cli(["verify", "-q", url]) == 0
    assert cli(["download", url, str(tmp_path / "back.chute")]) == 0
    out = capsys.readouterr().out
    assert f"{url}: 100 samples, 2 part(s)" in out and "OK" in out
    assert chute.open(tmp_path / "back.chute")[99]["text"] == "sample 99"
    with pytest.raises(chute.ArgumentError, match="apply to URLs"):
        chute.open(local, cache_limit="1GB")


@pytest.fixture
def http_folder(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A plain web server on 127.0.0.1 serving ``tmp_path / "www"`` (read-only)."""
    import functools
    import http.server
    import threading

    root = tmp_path / "www"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join()


def test_http_is_read_only_and_file_urls_round_trip(
    http_folder: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, base = http_folder
    chute.write(root / "d.chute", {"x": np.arange(400).reshape(100, 4)}, part_size=30)
    ds = chute.open(f"{base}/d.chute")
    assert isinstance(ds, RemoteDataset) and int(ds[42]["x"][0]) == 168
    assert sorted(v // 4 for v in ids(chute.Loader(ds, 16, shuffle="parts"))) == list(range(100))
    with pytest.raises(chute.ArgumentValueError, match="read-only"):
        chute.write(f"{base}/new.chute", {"x": np.arange(4)})
    assert cli(["upload", str(root / "d.chute"), f"{base}/up.chute"]) != 0
    assert "read-only" in capsys.readouterr().err
    assert not (root / "new.chute").exists() and not (root / "up.chute").exists()
    url = f"file://{root / 'f.chute'}"
    chute.write(url, {"x": np.arange(400).reshape(100, 4)}, part_size=30)
    assert sorted(ids(chute.Loader(chute.open(url), 16))) == list(range(0, 400, 4))
