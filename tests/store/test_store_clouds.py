"""Remote datasets on Azure Blob (azurite) and GCS (fake-gcs-server), real emulator processes
on 127.0.0.1 (``tests/store/_emulators.py``): written (Azure) or put (GCS: the emulator takes
no XML API uploads), opened, read sample by sample, by a Loader with prefetch and by
chute.dataloader's worker processes, the local cache filled then reused. The same checks
against S3 are in ``tests/store/test_store_remote.py``; faults in
``tests/store/test_store_clouds_faults.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("obstore")

from _emulators import Azurite, Server
from _s3server import assert_same, small_dataset

import chute
from chute.transfer import download, upload

pytestmark = pytest.mark.slow  # real emulator processes and worker processes


@pytest.fixture
def local(tmp_path: Path) -> Path:
    return Path(small_dataset(tmp_path / "local.chute"))


def ids(batches) -> list[int]:
    return [int(v) for b in batches for v in b["x"][:, 0].tolist()]


def test_written_dataset_reads_back_sample_for_sample(
    cloud: Server, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = cloud.url(request)
    if isinstance(cloud, Azurite):  # chute.write straight to the URL
        assert small_dataset(url, storage_options=cloud.options) == url
    else:
        cloud.publish(local, url)
    with cloud.open(url, tmp_path / "cache") as ds, chute.open(local) as want:
        assert ds.url == url
        assert_same(want, ds)
    copy = download(url, tmp_path / "copy.chute", storage_options=cloud.options)
    chute.verify(copy)


def test_loader_epoch_with_prefetch_fills_then_reuses_the_cache(
    cloud: Server, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = cloud.url(request)
    cloud.publish(local, url)
    with cloud.open(url, tmp_path / "cache") as ds:
        got = ids(chute.Loader(ds, 32, seed=1))
        assert sorted(got) == list(range(300)) and got != list(range(300))
        assert ds.cache.store.stats["get"] == 1 + 3 * 6  # the manifest, each part's 6 files
        cached = {p.relative_to(ds.cache.folder).as_posix() for p in ds.cache.folder.rglob("*")}
        assert {f"part-0000{i}/x.npy" for i in range(3)} <= cached
    with cloud.open(url, tmp_path / "cache") as ds:  # opened anew: the same cache
        assert sorted(ids(chute.Loader(ds, 32, seed=2))) == list(range(300))
        assert ds.cache.store.stats["get"] == 1  # the manifest only: every part was cached


def test_dataloader_worker_processes_read_through_their_own_clients(
    cloud: Server, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """chute.dataloader's worker processes get the dataset pickled (its storage_options
    with it) and make their own client: together they read the epoch exactly once."""
    url = cloud.url(request)
    cloud.publish(local, url)
    with cloud.open(url, tmp_path / "cache") as ds:
        ds[0]  # the parent used its client: the workers must not inherit it
        assert sorted(ids(chute.dataloader(ds, 32, num_workers=2))) == list(range(300))
        assert all((ds.cache.folder / f"part-0000{i}/x.npy").is_file() for i in range(3))


def test_endpoint_from_the_environment_allows_plain_http(
    cloud: Server,
    local: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = cloud.url(request)
    cloud.publish(local, url)
    for name, value in cloud.env.items():
        monkeypatch.setenv(name, value)
    with chute.open(url, cache_dir=tmp_path / "cache") as ds, chute.open(local) as want:
        assert_same(want, ds)


# the spellings of the endpoint key besides the fixtures' ("endpoint", "base_url")
SPELLINGS = {
    "az": ("azure_storage_endpoint", "azure_endpoint", "AZURE_STORAGE_ENDPOINT"),
    "gs": ("google_base_url", "GOOGLE_BASE_URL"),
}


def test_endpoint_key_spellings(
    cloud: Server, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = cloud.url(request)
    cloud.publish(local, url)
    given = "endpoint" if cloud.scheme == "az" else "base_url"
    for key in SPELLINGS[cloud.scheme]:
        options = {k: v for k, v in cloud.options.items() if k != given}
        options[key] = cloud.options[given]
        ds = chute.open(url, storage_options=options, cache_dir=tmp_path / key)
        assert len(ds) == 300 and ds[299]["text"] == "sample 299"
        ds.close()


def test_zstd_objects_read_back(
    azurite: Azurite, local: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = azurite.url(request)
    store = upload(local, url, storage_options=azurite.options, compression="zstd")
    assert all(k.endswith(".zst") for k in store.list() if k != "chute.json")
    with azurite.open(url, tmp_path / "cache") as ds, chute.open(local) as want:
        assert_same(want, ds)
