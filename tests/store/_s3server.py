"""A real S3-protocol server on 127.0.0.1 for the remote-storage tests: moto's server app
behind a small WSGI layer that counts requests per key and can inject faults (5xx answers,
slow bodies), served on a free port by werkzeug, as moto's ``ThreadedMotoServer`` does.
"""

from __future__ import annotations

import collections
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import chute

BUCKET = "chute-test"


class S3Server:
    """moto's S3 on 127.0.0.1:free port. ``requests[(method, key)]`` counts requests;
    ``fail[key] = n``: the next ``n`` requests for key get a 503; ``slow[key] = seconds``:
    each 64 KiB of a GET body of key waits that long; ``answer[key] = fn``: a GET of key is
    answered by ``fn(headers, body)`` -> (headers, body chunks), given moto's answer (a hostile
    server: any status as header ``:status``, any length, any pace); ``sent[key]`` counts the
    body bytes it sent."""

    def __init__(self, port: int = 0) -> None:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        self.app = DomainDispatcherApplication(create_backend_app)
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self.log: list[tuple[str, str]] = []
        self.fail: dict[str, int] = {}
        self.slow: dict[str, float] = {}
        self.answer: dict[str, Any] = {}
        self.sent: collections.Counter[str] = collections.Counter()
        self._server = make_server(
            "127.0.0.1", port, self, threaded=True, request_handler=MotoRequestHandler
        )
        host, port = self._server.server_address[:2]
        self.port = port
        self.endpoint = f"http://{host}:{port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        key = path.lstrip("/").partition("/")[2]  # path-style: /bucket/key
        self.requests[(method, key)] += 1
        self.log.append((method, key))
        if self.fail.get(key, 0) > 0:
            self.fail[key] -= 1
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"SlowDown"]
        if method == "GET" and key in self.answer:
            return self._hostile(key, environ, start_response)
        body = self.app(environ, start_response)
        delay = self.slow.get(key)
        if method == "GET" and delay:
            return _slowly(body, delay)
        return body

    def _hostile(self, key: str, environ: dict[str, Any], start_response: Any) -> Any:
        got: dict[str, Any] = {}

        def keep(status: str, headers: list[tuple[str, str]], *exc: Any) -> None:
            got["headers"] = dict(headers)

        body = b"".join(self.app(environ, keep))
        headers, chunks = self.answer[key](got["headers"], body)
        status = headers.pop(":status", "200 OK")  # e.g. "302 Found" with a Location
        start_response(status, list(headers.items()))
        for chunk in chunks:
            self.sent[key] += len(chunk)
            yield chunk

    def gets(self, key: str) -> int:
        return self.requests[("GET", key)]

    def create_bucket(self, name: str = BUCKET) -> None:
        req = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        urllib.request.urlopen(req).read()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def _slowly(body: Any, delay: float) -> Iterator[bytes]:
    for chunk in body:
        for i in range(0, len(chunk), 1 << 16):
            time.sleep(delay)
            yield chunk[i : i + (1 << 16)]


def small_dataset(path: Path | str, n: int = 300, part_size: int = 100, **kw: Any) -> Path | str:
    """Fixed, ragged and string fields in ``n // part_size`` parts (compressible data);
    ``kw`` go to :func:`chute.write` (``storage_options`` for a URL)."""
    rng = np.random.default_rng(0)
    return chute.write(
        path,
        {
            "x": np.repeat(np.arange(n, dtype=np.float32)[:, None], 64, axis=1),
            "label": rng.integers(0, 10, n),
            "tokens": [np.arange(i % 7, dtype=np.int32) for i in range(n)],
            "text": [f"sample {i}" for i in range(n)],
        },
        part_size=part_size,
        **kw,
    )


def assert_same(a: chute.Dataset, b: chute.Dataset) -> None:
    """Equal length, schema and samples."""
    assert len(a) == len(b) and a.schema == b.schema
    for i in range(len(a)):
        x, y = a[i], b[i]
        for k in x:
            if isinstance(x[k], torch.Tensor):
                assert torch.equal(x[k], y[k]), (i, k)
            else:
                assert x[k] == y[k], (i, k)


def s3_env(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
