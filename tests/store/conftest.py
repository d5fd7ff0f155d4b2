"""Fixtures of the remote-storage tests: a real S3-protocol server (moto) on 127.0.0.1,
and the client's environment variables pointing at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("obstore")
pytest.importorskip("moto")
pytest.importorskip("zstandard")

from _s3server import S3Server


def _env(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    server = S3Server()
    server.create_bucket()
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """The module's server, with the client's environment pointing at it; faults reset."""
    _env(monkeypatch, s3_server.endpoint)
    yield s3_server
    s3_server.fail.clear()
    s3_server.slow.clear()


@pytest.fixture
def own_s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """A server of the test's own, which it may stop."""
    server = S3Server()
    server.create_bucket()
    _env(monkeypatch, server.endpoint)
    yield server
    server.stop()
