"""Faults on Azure Blob (azurite) and GCS (fake-gcs-server), real emulator processes on
127.0.0.1 (``tests/store/_emulators.py``): a missing dataset, object or container, a stopped
server and a plain-HTTP endpoint the client refuses are each a chute error naming the URL,
at once or within the retry window, never a hang."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("obstore")

from _emulators import Azurite, Server
from _reliability import recorded
from _s3server import small_dataset

from chute.errors import DatasetNotFoundError, RemoteError
from chute.store import Store

pytestmark = pytest.mark.slow  # real emulator processes

_row = recorded(
    {
        "test_missing_dataset_and_object_are_not_found_errors_naming_the_url": (
            "cloud: missing object",
            "no dataset at the URL; a part file deleted after open, then read",
            "DatasetNotFoundError naming the URL, and the object's URL",
        ),
        "test_missing_container_names_it": (
            "cloud: missing container",
            "az://no-such-container/ds.chute on azurite",
            "DatasetNotFoundError naming the container (was: no such object)",
        ),
        "test_stopped_server_is_a_remote_error_naming_the_url": (
            "cloud: server stopped",
            "the emulator process stopped after open, retry 1 s",
            "RemoteError naming the object's URL and the attempts; no hang",
        ),
        "test_server_restarted_mid_epoch_is_bridged_by_retries": (
            "cloud: server restarted",
            "the emulator process stopped mid-epoch, started again 0.5 s later on its port",
            "the read waits through retries and returns the right sample",
        ),
        "test_http_endpoint_refused_by_the_client_is_an_error_at_once": (
            "cloud: plain HTTP refused",
            "the emulator's http:// endpoint with allow_http=False",
            "RemoteError naming allow_http, not retried (was: 120 s of retries, 'unreachable')",
        ),
    }
)


@pytest.fixture
def local(tmp_path: Path) -> Path:
    return Path(small_dataset(tmp_path / "local.chute"))


def test_missing_dataset_and_object_are_not_found_errors_naming_the_url(
    cloud: Server, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = cloud.url(request)
    with pytest.raises(DatasetNotFoundError, match=f"{url} is not a chute dataset"):
        cloud.open(url, tmp_path / "cache")
    cloud.publish(local, url)
    with cloud.open(url, tmp_path / "cache") as ds:
        cloud.delete(url, "part-00001/x.npy")
        assert ds[0]["text"] == "sample 0"  # part 0 is there
        with pytest.raises(DatasetNotFoundError, match=f"{url}/part-00001/x.npy: no such object"):
            ds[150]


def test_missing_container_names_it(azurite: Azurite, tmp_path: Path) -> None:
    url = "az://no-such-container/ds.chute"
    with pytest.raises(DatasetNotFoundError, match="container 'no-such-container' does not"):
        azurite.open(url, tmp_path / "cache")


@pytest.fixture
def own(
    cloud: Server, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Server]:
    """A server of the test's own, of the kind of ``cloud``, which it may stop: the local
    dataset published at its ``url(request)``."""
    server = type(cloud)(tmp_path)
    try:
        server.publish(local, server.url(request))
        yield server
    finally:
        server.stop()


@pytest.mark.timeout(120)  # a hang, not an error, would fail here
def test_stopped_server_is_a_remote_error_naming_the_url(
    own: Server, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = own.url(request)
    with own.open(url, tmp_path / "cache", retry=1.0, timeout=5) as ds:
        assert ds[0]["text"] == "sample 0"
        own.stop()
        with pytest.raises(RemoteError, match=f"{url}/part-00001/.*: could not read it after"):
            ds[150]


@pytest.mark.timeout(120)
def test_server_restarted_mid_epoch_is_bridged_by_retries(
    own: Server, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with own.open(own.url(request), tmp_path / "cache", retry=60) as ds:
        assert ds[0]["text"] == "sample 0"
        own.stop()
        with ThreadPoolExecutor(1) as pool:  # the server is restarted by this thread
            read = pool.submit(lambda: ds[150]["text"])  # part 1: fetched once it is back
            time.sleep(0.5)
            own.restart()
            assert read.result(timeout=60) == "sample 150"
        assert ds.cache.store.stats["retries"] >= 1


def test_http_endpoint_refused_by_the_client_is_an_error_at_once(
    cloud: Server, local: Path, request: pytest.FixtureRequest
) -> None:
    url = cloud.url(request)
    cloud.publish(local, url)
    store = Store(url, {**cloud.options, "allow_http": False})
    with pytest.raises(RemoteError, match=r"chute.json: the endpoint is plain http://.*allow_http"):
        store.get_bytes("chute.json")
    assert store.stats["retries"] == 0
