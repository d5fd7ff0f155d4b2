"""One cache budget for a whole cache folder (chute/store/budget.py): several datasets and
jobs sharing a ``cache_dir`` stay within it together, least-recently-used files of any dataset
go first, a pinned file never, and a dead downloader's reservation is forgotten."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import threading
from pathlib import Path

import pytest

pytest.importorskip("obstore")
pytest.importorskip("moto")

import _remote_children as children
from _s3server import BUCKET, S3Server, small_dataset

import chute
from chute.errors import ArgumentError, ArgumentValueError, CacheError
from chute.store.budget import RESERVED, Budget

pytestmark = pytest.mark.slow  # a real S3 server (moto), and worker processes

SPAWN = mp.get_context("spawn")
ENV_VARS = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")


def url_for(request: pytest.FixtureRequest, name: str) -> str:
    return f"s3://{BUCKET}/{request.node.name.replace('[', '_').replace(']', '')}/{name}"


def data_bytes(cache: Path) -> int:
    """Bytes of the cached data files of every dataset under ``cache`` (no bookkeeping)."""
    total = 0
    for p in cache.rglob("*.npy"):
        if not any(part.startswith(".") for part in p.relative_to(cache).parts):
            with contextlib.suppress(FileNotFoundError):  # evicted meanwhile
                total += p.stat().st_size
    return total


def largest_part(url: str, tmp_path: Path) -> int:
    probe = chute.open(url, cache_dir=tmp_path / "probe")
    return max(sum(f.nbytes for f in p.files.values()) for p in probe.parts)


def two_datasets(request: pytest.FixtureRequest, tmp_path: Path, n: int) -> tuple[str, str, int]:
    """Two datasets of ``n`` samples in parts of 50 in the bucket: their URLs, the largest
    part's bytes."""
    a, b = url_for(request, "a.chute"), url_for(request, "b.chute")
    for url in (a, b):
        small_dataset(url, n=n, part_size=50)
    return a, b, largest_part(a, tmp_path)


def test_two_datasets_share_one_budget_evicting_each_others_files(
    s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    a, b, part = two_datasets(request, tmp_path, 600)  # 12 parts each
    budget, cache = 7 * part, tmp_path / "cache"
    ds_a = chute.open(a, cache_dir=cache, cache_budget=budget)
    ds_b = chute.open(b, cache_dir=cache, cache_budget=budget)
    for _ in chute.Loader(ds_a, 25, shuffle=False, num_workers=2):
        pass
    a_files = data_bytes(ds_a.cache.folder)
    assert a_files <= budget  # its own 12 parts did not fit: it evicted its own
    peak = 0
    seen = []
    for batch in chute.Loader(ds_b, 25, shuffle=False, num_workers=2):
        peak = max(peak, data_bytes(cache))
        seen += batch["x"][:, 0].long().tolist()
    # the pinned parts (3 of a's, a few of b's) fit in the budget: it is kept, give or take
    # the sampling of a folder changing under the count
    assert peak <= budget + part
    assert data_bytes(cache) <= budget
    assert data_bytes(ds_a.cache.folder) < a_files  # b's downloads evicted a's files
    assert seen == list(range(600))
    again = [int(v) for b_ in chute.Loader(ds_a, 25, shuffle=False) for v in b_["x"][:, 0]]
    assert again == list(range(600))  # what was evicted is fetched again


def test_a_pinned_file_of_another_dataset_is_never_evicted(
    s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    a, b, part = two_datasets(request, tmp_path, 300)  # 6 parts each
    cache = tmp_path / "cache"
    ds_a = chute.open(a, cache_dir=cache, cache_budget=5 * part)
    pins = [ds_a.cache.pin_part(i) for i in range(3)]  # a reader of a maps 3 parts
    pinned = {p: p.stat().st_ino for pin in pins for p in pin.paths}
    ds_b = chute.open(b, cache_dir=cache, cache_budget=5 * part)
    seen = [int(v) for b_ in chute.Loader(ds_b, 50, shuffle=False) for v in b_["x"][:, 0]]
    assert seen == list(range(300))  # every part of b, through the room a leaves
    for path, inode in pinned.items():
        assert path.stat().st_ino == inode  # never deleted, never fetched again
    for pin in pins:
        pin.release()
    assert data_bytes(cache) <= 5 * part + 3 * part


def test_two_jobs_in_processes_stay_within_the_node_budget(
    s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two jobs, each a process with its own Loader threads, reading its own dataset at the
    same time through one cache folder, the budget from ``$CHUTE_CACHE_BUDGET``."""
    urls = [url_for(request, f"job{i}.chute") for i in range(2)]
    for url in urls:
        small_dataset(url, n=400, part_size=40)  # 10 parts each
    part = largest_part(urls[0], tmp_path)
    budget, cache = 8 * part, tmp_path / "cache"
    env = {k: os.environ[k] for k in ENV_VARS if k in os.environ}
    env["CHUTE_CACHE_BUDGET"] = str(budget)
    outs = [tmp_path / f"o{i}" for i in range(2)]
    procs = [
        SPAWN.Process(target=children.read_all, args=(url, str(cache), env, str(o)))
        for url, o in zip(urls, outs, strict=True)
    ]
    peak, done = 0, threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.wait(0.01):
            peak = max(peak, data_bytes(cache))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join(180)
            assert p.exitcode == 0
    finally:
        done.set()
        watcher.join()
    for o in outs:
        assert sorted(json.loads(o.read_text())) == list(range(400))
    # together, not each: two jobs with a per-dataset limit of this size would reach 2 budgets
    assert peak <= budget + part
    assert data_bytes(cache) <= budget


def test_a_dead_downloaders_reservation_is_forgotten(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    budget = Budget(cache, 1000)
    (cache / RESERVED).mkdir(parents=True)
    (cache / RESERVED / "4242-dead").write_text(str(10**12))  # no process holds its lock
    assert budget.usage() == 0
    assert not (cache / RESERVED / "4242-dead").exists()
    with budget.reserve(600):
        assert budget.usage() == 600  # a live reservation counts
        assert len(os.listdir(cache / RESERVED)) == 1
    assert budget.usage() == 0 and os.listdir(cache / RESERVED) == []


def test_budget_arguments_and_errors(
    s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = url_for(request, "ds.chute")
    small_dataset(url, n=300, part_size=50)
    part = largest_part(url, tmp_path)
    with pytest.raises(CacheError, match=r"cache_budget of \d+ bytes .* 5 largest parts"):
        chute.open(url, cache_dir=tmp_path / "c1", cache_budget=4 * part)
    with pytest.raises(ArgumentValueError, match="cache_budget"):
        chute.open(url, cache_dir=tmp_path / "c1", cache_budget="lots")
    monkeypatch.setenv("CHUTE_CACHE_BUDGET", "lots")
    with pytest.raises(ArgumentValueError, match="CHUTE_CACHE_BUDGET"):
        chute.open(url, cache_dir=tmp_path / "c1")
    monkeypatch.setenv("CHUTE_CACHE_BUDGET", str(6 * part))
    assert chute.open(url, cache_dir=tmp_path / "c2").cache.budget == 6 * part
    with pytest.raises(ArgumentError, match="cache_budget"):
        chute.open(tmp_path / "local.chute", cache_budget="1GB")
