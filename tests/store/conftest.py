"""Fixtures of the remote-storage tests: a real S3-protocol server (``tests/store/_s3server.py``)
per test module, and the client's environment pointing at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _s3server import S3Server, s3_env


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
