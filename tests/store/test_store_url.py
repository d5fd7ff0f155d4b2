"""URLs, sizes and the prefetcher: no server needed."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

import chute
from chute import ArgumentError, ArgumentValueError
from chute._args import parse_size
from chute.store import Prefetcher, is_url, parse_url
from chute.store.paths import folder_name


@pytest.mark.parametrize(
    ("url", "scheme", "bucket", "prefix"),
    [
        ("s3://b/data/train.chute", "s3", "b", "data/train.chute"),
        ("s3://b/data/train.chute/", "s3", "b", "data/train.chute"),
        ("S3A://b/x", "s3", "b", "x"),
        ("s3://b", "s3", "b", ""),
        ("gs://bk/a/b", "gs", "bk", "a/b"),
        ("az://container/p", "az", "container", "p"),
        ("abfss://c@acct.dfs.core.windows.net/p", "az", "c@acct.dfs.core.windows.net", "p"),
        ("https://host:8443/d/x.chute", "https", "host:8443", "d/x.chute"),
        ("http://127.0.0.1:9000/d", "http", "127.0.0.1:9000", "d"),
        ("file:///tmp/x.chute", "file", "", "tmp/x.chute"),
    ],
)
def test_parse(url: str, scheme: str, bucket: str, prefix: str) -> None:
    u = parse_url(url)
    assert (u.scheme, u.bucket, u.prefix) == (scheme, bucket, prefix)
    assert is_url(url)
    assert u.join("part-00000/x.npy").endswith("/part-00000/x.npy")
    assert u.key("chute.json") == (f"{prefix}/chute.json" if prefix else "chute.json")


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("ftp://host/x", "scheme 'ftp' is not supported"),
        ("s3:///x", "no bucket"),
        ("s3://b/a/../x", r"'\.\.' segment"),
        ("s3://b/a//x", "empty"),
        ("s3://b/x?versionId=1", "no query"),
        ("file://host/x", "local path"),
        ("file:///", "absolute folder"),
        ("train.chute", "not a URL"),
    ],
)
def test_bad_urls_name_the_url(url: str, match: str) -> None:
    with pytest.raises(ArgumentError, match=match) as info:
        parse_url(url)
    assert url.split("?")[0] in str(info.value) or "not a URL" in str(info.value)


def test_is_url_is_false_for_paths() -> None:
    for p in ("data/x.chute", "/abs/x", "C:/x", b"s3://b/x", None, 3):
        assert not is_url(p)


def test_an_unknown_scheme_is_a_url_refused_not_a_local_path(tmp_path: Path) -> None:
    assert is_url("s4://b/x") and is_url("x://y")
    for call in (
        lambda: chute.open("s4://b/x"),
        lambda: chute.write("s4://b/x", {"x": np.arange(3)}),
    ):
        with pytest.raises(ArgumentError, match="scheme 's4' is not supported"):
            call()


def test_parse_size() -> None:
    assert parse_size(123) == 123 and parse_size(2e9) == 2 * 10**9 and parse_size("2e9") == 2e9
    assert parse_size("20GB") == 20 * 10**9
    assert parse_size("1.5 GiB") == int(1.5 * 2**30)
    assert parse_size("512mib") == 512 * 2**20
    assert parse_size("10k") == 10_000
    assert parse_size("7") == 7
    for bad in ("lots", "-1GB", "1XB", float("nan"), -1):
        with pytest.raises(ArgumentValueError, match="cache_limit"):
            parse_size(bad, "cache_limit")
    for bad in (True, [1], None):
        with pytest.raises(ArgumentError, match="cache_limit"):
            parse_size(bad, "cache_limit")  # type: ignore[arg-type]


def test_folder_names_differ_per_url() -> None:
    a, b = folder_name("s3://b/x/train.chute"), folder_name("s3://c/x/train.chute")
    assert a != b and a.startswith("train.chute-") and b.startswith("train.chute-")


def test_prefetcher_order_bound_and_release() -> None:
    live: set[int] = set()
    peak = 0
    lock = threading.Lock()

    def fetch(p: int) -> int:
        nonlocal peak
        with lock:
            live.add(p)
            peak = max(peak, len(live))
        time.sleep(0.005)
        return p * 10

    def release(r: int) -> None:
        with lock:
            live.remove(r // 10)

    with Prefetcher(iter(range(20)), fetch, ahead=3, release=release) as pf:
        got = [r for _, r in pf]
    assert got == [p * 10 for p in range(20)]
    assert peak <= 4  # ahead + the one handed out
    assert not live  # every result released


def test_prefetcher_error_at_its_part_and_close_releases() -> None:
    released: list[int] = []

    def fetch(p: int) -> int:
        if p == 2:
            raise ValueError("part 2 is broken")
        return p

    pf = Prefetcher(range(6), fetch, ahead=3, release=released.append)
    assert next(pf) == (0, 0)
    assert next(pf) == (1, 1)
    with pytest.raises(ValueError, match="part 2"):
        next(pf)
    pf.close()
    assert sorted(released) == [0, 1, 3, 4, 5]  # handed out and prefetched ones, never 2


def test_prefetcher_ahead_zero_fetches_inline() -> None:
    threads = set()

    def fetch(p: int) -> int:
        threads.add(threading.current_thread())
        return p

    assert [r for _, r in Prefetcher(range(3), fetch, ahead=0)] == [0, 1, 2]
    assert threads == {threading.current_thread()}


def test_azure_without_an_account_names_its_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Configuring the client needs no network: the error names Azure's own variables."""
    pytest.importorskip("obstore")
    import chute

    for var in ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_ACCOUNT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ArgumentError, match="AZURE_STORAGE_ACCOUNT_NAME") as info:
        chute.open("az://container/x.chute")
    assert "az://container/x.chute" in str(info.value)
