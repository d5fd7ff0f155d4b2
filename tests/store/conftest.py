"""Fixtures of the remote-storage tests: a real S3-protocol server (``tests/store/_s3server.py``)
per test module, and the client's environment pointing at it; the Azure and GCS emulators
(``tests/store/_emulators.py``), one process each per test module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

import pytest
from _emulators import Azurite, FakeGCS, Server, Unavailable
from _s3server import S3Server, s3_env

E = TypeVar("E", bound=Server)


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    server = S3Server()
    server.create_bucket()
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """The module's server, with the client's environment pointing at it; faults reset."""
    s3_env(monkeypatch, s3_server.endpoint)
    yield s3_server
    s3_server.fail.clear()
    s3_server.slow.clear()
    s3_server.answer.clear()


@pytest.fixture
def own_s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """A server of the test's own, which it may stop."""
    server = S3Server()
    server.create_bucket()
    s3_env(monkeypatch, server.endpoint)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """azurite (Azure Blob) on 127.0.0.1 for the module, installed on first use (skipped,
    with the reason, when it cannot be)."""
    yield from _emulator(Azurite, tmp_path_factory)


@pytest.fixture(scope="module")
def fake_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGCS]:
    """fake-gcs-server on 127.0.0.1 for the module, installed on first use (skipped, with
    the reason, when it cannot be)."""
    yield from _emulator(FakeGCS, tmp_path_factory)


@pytest.fixture(params=["azurite", "fake_gcs"])
def cloud(request: pytest.FixtureRequest) -> Server:
    """The module's emulator of each cloud (skipped where it cannot be installed)."""
    return request.getfixturevalue(request.param)


def _emulator(kind: type[E], tmp_path_factory: pytest.TempPathFactory) -> Iterator[E]:
    try:
        server = kind(tmp_path_factory.mktemp(kind.name))
    except Unavailable as exc:
        pytest.skip(str(exc))
    yield server
    server.stop()
