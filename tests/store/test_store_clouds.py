"""Remote datasets on Azure Blob (azurite) and GCS (fake-gcs-server), real emulator processes
on 127.0.0.1 (``tests/store/_emulators.py``): written (Azure) or put (GCS: the emulator takes
no XML API uploads), opened, read sample by sample and by a Loader with prefetch, the local
cache filled then reused, and a missing object or a stopped server as a clear error naming
the URL. The same checks against S3 are in ``tests/store/test_store_remote.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("obstore")

from _emulators import Azurite, FakeGCS
from _s3server import assert_same, small_dataset

import chute
from chute.errors import DatasetNotFoundError, RemoteError
from chute.reader.remote import RemoteDataset
from chute.store import Store, parse_url
from chute.transfer import download, upload

pytestmark = pytest.mark.slow  # real emulator processes

Emulator = Azurite | FakeGCS
SCHEMES = {"azurite": "az", "fake_gcs": "gs"}


@pytest.fixture(params=list(SCHEMES))
def cloud(request: pytest.FixtureRequest) -> Emulator:
    """The module's emulator of each cloud (skipped where it cannot be installed)."""
    return request.getfixturevalue(request.param)


def url_for(cloud: Emulator, request: pytest.FixtureRequest, name: str = "ds.chute") -> str:
    scheme = "az" if isinstance(cloud, Azurite) else "gs"
    test = request.node.name.replace("[", "_").replace("]", "")
    return f"{scheme}://chute-test/{test}/{name}"


def publish(cloud: Emulator, local: Path, url: str) -> None:
    """The dataset at ``local`` uploaded to ``url``: by chute (Azure), or by the emulator's
    own API (GCS)."""
    if isinstance(cloud, FakeGCS):
        cloud.put_folder(local, parse_url(url).prefix)
    else:
        upload(local, url, storage_options=cloud.options)


@pytest.fixture
def local(tmp_path: Path) -> Path:
    return Path(small_dataset(tmp_path / "local.chute"))


def open_remote(cloud: Emulator, url: str, tmp_path: Path, **kw) -> RemoteDataset:
    ds = chute.open(url, storage_options=cloud.options, cache_dir=tmp_path / "cache", **kw)
    assert isinstance(ds, RemoteDataset)
    return ds


def test_written_dataset_reads_back_sample_for_sample(
    cloud: Emulator, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = url_for(cloud, request)
    if isinstance(cloud, Azurite):  # chute.write straight to the URL
        assert small_dataset(url, storage_options=cloud.options) == url
    else:
        publish(cloud, local, url)
    with open_remote(cloud, url, tmp_path) as ds, chute.open(local) as want:
        assert ds.url == url
        assert_same(want, ds)
    copy = download(url, tmp_path / "copy.chute", storage_options=cloud.options)
    chute.verify(copy)


def test_loader_epoch_with_prefetch_fills_then_reuses_the_cache(
    cloud: Emulator, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = url_for(cloud, request)
    publish(cloud, local, url)
    with open_remote(cloud, url, tmp_path) as ds:
        got = [int(v) for b in chute.Loader(ds, 32, seed=1) for v in b["x"][:, 0].tolist()]
        assert sorted(got) == list(range(300)) and got != list(range(300))
        stats = ds.cache.store.stats
        assert stats["get"] == 1 + 3 * 6  # the manifest, then each part's 6 files once
        cached = {p.relative_to(ds.cache.folder).as_posix() for p in ds.cache.folder.rglob("*")}
        assert {f"part-0000{i}/x.npy" for i in range(3)} <= cached
    with open_remote(cloud, url, tmp_path) as ds:  # a new process's view: the same cache
        got = [int(v) for b in chute.Loader(ds, 32, seed=2) for v in b["x"][:, 0].tolist()]
        assert sorted(got) == list(range(300))
        assert ds.cache.store.stats["get"] == 1  # the manifest only: every part was cached


def test_dataloader_worker_processes_read_through_their_own_clients(
    cloud: Emulator, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """chute.dataloader's worker processes get the dataset pickled (its storage_options
    with it) and make their own client: together they read the epoch exactly once."""
    url = url_for(cloud, request)
    publish(cloud, local, url)
    with open_remote(cloud, url, tmp_path) as ds:
        ds[0]  # the parent used its client: the workers must not inherit it
        loader = chute.dataloader(ds, 32, num_workers=2)
        got = [int(v) for b in loader for v in b["x"][:, 0].tolist()]
        assert sorted(got) == list(range(300))
        assert all((ds.cache.folder / f"part-0000{i}/x.npy").is_file() for i in range(3))


def test_zstd_objects_read_back(
    azurite: Azurite, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = url_for(azurite, request)
    store = upload(local, url, storage_options=azurite.options, compression="zstd")
    assert all(k.endswith(".zst") for k in store.list() if k != "chute.json")
    with open_remote(azurite, url, tmp_path) as ds, chute.open(local) as want:
        assert_same(want, ds)


def test_missing_dataset_and_object_are_not_found_errors_naming_the_url(
    cloud: Emulator, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = url_for(cloud, request)
    with pytest.raises(DatasetNotFoundError, match=f"{url} is not a chute dataset"):
        open_remote(cloud, url, tmp_path)
    publish(cloud, local, url)
    with open_remote(cloud, url, tmp_path) as ds:
        cloud_delete(cloud, url, "part-00001/x.npy")
        assert ds[0]["text"] == "sample 0"  # part 0 is there
        with pytest.raises(DatasetNotFoundError, match=f"{url}/part-00001/x.npy: no such object"):
            ds[150]


def cloud_delete(cloud: Emulator, url: str, relpath: str) -> None:
    if isinstance(cloud, FakeGCS):
        cloud.delete(parse_url(url).key(relpath))
    else:
        Store(url, cloud.options).delete(relpath)


@pytest.mark.timeout(120)  # a hang, not an error, would fail here
def test_stopped_server_is_a_remote_error_naming_the_url(
    cloud: Emulator, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    own = type(cloud)(tmp_path)  # a server of the test's own, which it stops
    try:
        url = url_for(own, request)
        publish(own, local, url)
        ds = open_remote(own, url, tmp_path, retry=1.0, timeout=5)
        assert ds[0]["text"] == "sample 0"
    finally:
        own.stop()
    with pytest.raises(RemoteError, match=f"{url}/part-00001/.*: could not read it after"):
        ds[150]
    ds.close()


def test_endpoint_from_the_environment_allows_plain_http(
    cloud: Emulator,
    local: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = url_for(cloud, request)
    publish(cloud, local, url)
    for name, value in cloud.env.items():
        monkeypatch.setenv(name, value)
    with chute.open(url, cache_dir=tmp_path / "cache") as ds, chute.open(local) as want:
        assert_same(want, ds)


def test_http_endpoint_refused_by_the_client_is_an_error_at_once(
    cloud: Emulator, local: Path, request: pytest.FixtureRequest
) -> None:
    url = url_for(cloud, request)
    publish(cloud, local, url)
    store = Store(url, {**cloud.options, "allow_http": False})
    with pytest.raises(RemoteError, match=r"chute.json: the endpoint is plain http://.*allow_http"):
        store.get_bytes("chute.json")
    assert store.stats["retries"] == 0


def test_missing_container_names_it(azurite: Azurite, tmp_path: Path) -> None:
    url = "az://no-such-container/ds.chute"
    with pytest.raises(DatasetNotFoundError, match="container 'no-such-container' does not"):
        open_remote(azurite, url, tmp_path)
