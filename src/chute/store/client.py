"""One dataset's object store: a lazily created, per-process ``obstore`` client with bounded
retries, and errors that name the URL and the object.

:class:`Store` is picklable and cheap: it holds the URL and the options, and creates the
``obstore`` client on first use in each process (keyed by ``os.getpid()``), so a DataLoader
worker, forked or spawned, never uses a client (connection pool, runtime) inherited from its
parent. Credentials and endpoints come the provider's standard way: its environment variables
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``,
``GOOGLE_SERVICE_ACCOUNT``, ``AZURE_STORAGE_ACCOUNT_NAME``, ...), read by ``obstore``, or
``storage_options`` (``obstore``'s config keys, e.g. ``endpoint``, ``region``,
``skip_signature``; HTTP client keys such as ``allow_http`` or ``proxy_url`` go to its client
options). An ``http://`` endpoint, in ``storage_options`` or the provider's environment
variable (a local MinIO, moto, azurite or fake-gcs-server), allows plain HTTP.

Every request is retried on 5xx answers, dropped connections and timeouts, at most
``retries`` times with exponential backoff and jitter, then raises :class:`RemoteError`; a
download that fails midway restarts from its first byte. A missing bucket or key is a
:class:`DatasetNotFoundError`, refused or missing credentials a :class:`RemoteError` that
says how to provide them: neither is retried.

Nothing a server sends is trusted to be bounded. A download must get its answer's headers,
then each 1 MiB of its body (``STREAM_CHUNK``), within ``timeout`` seconds (default 15, so at
least ~70 KB/s), else it is cut and retried: a server that stalls or trickles surfaces as a
:class:`RemoteError` naming the object after at most ``(retries + 1) * timeout`` seconds plus
the backoff (about 100 s by default). Its size is bounded by what the caller expects: the
``Content-Length`` is checked before any byte is read, and the stream is cut as soon as it
(or, decompressed, its output) passes the bound, so neither memory nor disk ever holds more.

Redirects: with a session token in the credentials, reads go through signed URLs and a
client that never follows a redirect, so the token reaches no other host (see
:mod:`chute.store.signed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import xxhash

from ..errors import ArgumentError, DatasetNotFoundError, RemoteError, require
from ..manifest_file import MAX_MANIFEST_BYTES
from .bounds import CorruptObjectError, Sink, StalledError, _Capped, _LocalError, _want, _write
from .configure import EXTRA, make_store
from .failures import classify, request_error
from .signed import SignedReader, carries_token
from .url import URL, parse_url

T = TypeVar("T")


CHUNK = 8 << 20  # multipart upload chunk size
RETRY_SECONDS = 120.0  # a failing request is retried this long: outages of a minute pass
STREAM_CHUNK = 1 << 20  # download chunks: written (and hashed) while the next ones arrive;
# 8 MiB chunks measured 10-15% slower per GET on loopback (a first GET 20-30% slower). Each
# must arrive within the timeout: the minimum rate is STREAM_CHUNK / timeout.
TIMEOUT = 15.0  # default seconds for a request's headers, and for each chunk of a download


class Store:
    """The object store holding the dataset at ``url``.

    ``retry``: seconds during which a failed request (5xx, connection, timeout) is retried,
    counted from its first failure (default 120: an outage of a minute, a server restart, is
    ridden out; a dead endpoint is an error after about that long, a stalled one after at most
    ``retry + timeout``); ``retries``: at most that many retries as well (None: no count);
    ``backoff``: the first wait in seconds, doubled each retry (with jitter, at most 10 s);
    ``timeout``: seconds within which a download must get its headers and then each 1 MiB
    of its body, and other requests a byte, else the request is cut (and retried); also
    taken from ``storage_options={"timeout": seconds}``.
    ``stats`` counts this process's requests and bytes (``get``, ``put``, ``bytes_in``,
    ``bytes_out``, ``retries``).
    """

    def __init__(
        self,
        url: str | URL,
        storage_options: Mapping[str, Any] | None = None,
        *,
        retry: float = RETRY_SECONDS,
        retries: int | None = None,
        backoff: float = 0.25,
        timeout: float = TIMEOUT,
    ):
        self.url = parse_url(url)
        if storage_options is not None and not isinstance(storage_options, Mapping):
            raise ArgumentError(
                f"storage_options must be a dict, got {type(storage_options).__name__}"
            )
        self.storage_options = dict(storage_options or {})
        timeout = self.storage_options.pop("timeout", timeout)
        retry = self.storage_options.pop("retry", retry)  # e.g. from chute.write(url, ...)
        trust = self.storage_options.pop("trust_redirects", False)
        if not isinstance(trust, bool):
            raise ArgumentError(f"storage_options['trust_redirects'] must be a bool, got {trust!r}")
        self.trust_redirects = trust
        self._endpoint = ""  # a custom endpoint, once the client is made
        if retries is not None and (not isinstance(retries, int) or retries < 0):
            raise ArgumentError(f"retries must be an int >= 0 or None, got {retries!r}")
        if isinstance(retry, bool) or not isinstance(retry, (int, float)) or retry < 0:
            raise ArgumentError(f"retry must be a number of seconds >= 0, got {retry!r}")
        self.retry, self.retries = float(retry), retries
        self.backoff, self.timeout = float(backoff), _seconds(timeout)
        self.stats = {"get": 0, "put": 0, "bytes_in": 0, "bytes_out": 0, "retries": 0}
        self._client: Any = None
        self._signed: Any = None  # a SignedReader when the client carries a session token
        self._pid = -1
        # The lock that makes the client, one per process: a lock inherited through fork()
        # may be held by a parent thread that was making the parent's client at that moment.
        self._locks: dict[int, threading.Lock] = {}

    # ----------------------------------------------------------------- the client

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"], state["_pid"], state["_locks"] = None, -1, {}
        state["_signed"] = None
        return state

    def client(self) -> Any:
        """This process's ``obstore`` store, created on first use here (never inherited)."""
        pid = os.getpid()
        if self._client is None or self._pid != pid:
            with self._locks.setdefault(pid, threading.Lock()):  # (setdefault is atomic)
                if self._client is None or self._pid != pid:
                    self._client, self._signed = self._make_client()
                    self._pid = pid
                    self.stats = dict.fromkeys(self.stats, 0)
        return self._client

    def _unsigned(self, what: str) -> Any:
        """The obstore client, for a request that no signed URL can carry (an upload, a
        listing, a delete). With a session token and a custom endpoint that is refused unless
        ``storage_options={"trust_redirects": True}``: obstore would follow a redirect from
        the endpoint to any host with the token (see :mod:`chute.store.signed`)."""
        client = self.client()
        if self._signed is not None and self._endpoint and not self.trust_redirects:
            raise RemoteError(
                f"{self.url}: {what} with a session token (x-amz-security-token) through the "
                f"endpoint {self._endpoint}: obstore follows a redirect with that token to any "
                "host the endpoint names, so chute does not send it there. If you trust this "
                "endpoint not to redirect elsewhere, pass storage_options="
                "{'trust_redirects': True}; or use credentials without a session token"
            )
        return client

    def _reader(self) -> Any:
        """This process's :class:`~chute.store.signed.SignedReader` when the client's
        requests carry a session token (reads then never follow a redirect), else None."""
        self.client()
        return self._signed

    def _make_client(self) -> tuple[Any, Any]:
        """The obstore client, and a reader of signed URLs when it carries a session token
        (see :mod:`chute.store.signed`)."""
        store, client, self._endpoint = make_store(self.url, self.storage_options, self.timeout)
        if not carries_token(store):
            return store, None
        return store, SignedReader(store, client, self.timeout)

    # ------------------------------------------------------------------- requests

    def get_bytes(self, relpath: str, limit: int = MAX_MANIFEST_BYTES) -> bytes:
        """The whole object ``relpath`` (small ones: the manifest), at most ``limit`` bytes:
        a bigger one is a :class:`CorruptObjectError`, found before or while reading."""

        def get() -> bytes:
            data = bytearray()
            self._read(relpath, limit, False, data.extend)
            return bytes(data)

        return self.call("read", relpath, get)

    def get_to_file(
        self, relpath: str, file: Sink, *, size: int, zstd: bool = False, out: int | None = None
    ) -> tuple[int, str]:
        """Stream object ``relpath`` (``size`` bytes) into the open ``file`` (decompressed
        when ``zstd``, into at most ``out`` bytes), in chunks, never all in memory. Returns
        the object's stored size and xxh3_64. An object of another size, or that decompresses
        to more, is a :class:`CorruptObjectError` as soon as that shows (before its first
        byte when the server says its size). A retry truncates ``file`` and starts over; a
        local write error (disk full) is raised as is, not retried."""

        def get() -> tuple[int, str]:
            file.seek(0)
            file.truncate()
            h = xxhash.xxh3_64()
            sink: Any = _Capped(file, relpath, size if out is None else out)
            if zstd:
                zstandard = require("zstandard", EXTRA)
                sink = zstandard.ZstdDecompressor().stream_writer(sink, closefd=False)

            def write(chunk: bytes) -> None:
                h.update(chunk)
                _write(sink, chunk, relpath)

            n = self._read(relpath, size, True, write)
            _write(sink, None, relpath)
            return n, h.hexdigest()

        try:
            return self.call("read", relpath, get)
        except _LocalError as exc:
            raise exc.exc from None

    def _read(self, relpath: str, limit: int, exact: bool, write: Callable[[bytes], None]) -> int:
        """GET ``relpath`` into ``write`` (see :meth:`_stream`), through signed URLs when the
        requests carry a session token (:mod:`chute.store.signed`)."""
        reader = self._reader()
        if reader is None:
            return self._run(self._stream(relpath, limit, exact, write))
        self._count("get", "bytes_in", 0)

        def count(n: int) -> None:
            self.stats["bytes_in"] += n

        return reader.stream(relpath, limit, exact, write, count, STREAM_CHUNK)

    async def _stream(
        self, relpath: str, limit: int, exact: bool, write: Callable[[bytes], None]
    ) -> int:
        """GET ``relpath`` and ``write`` its body chunk by chunk; the headers and each chunk
        must come within ``timeout``, the body be at most ``limit`` bytes (exactly, when
        ``exact``). Returns the body's size."""
        obs = require("obstore", EXTRA)
        result = await self._within(obs.get_async(self.client(), relpath), relpath, "answer")
        self._count("get", "bytes_in", 0)
        said = result.meta.get("size")
        if isinstance(said, int) and (said > limit or (exact and said != limit)):
            raise CorruptObjectError(
                f"{relpath}: the store says {said} bytes, {_want(limit, exact)}"
            )
        chunks = result.stream(min_chunk_size=STREAM_CHUNK).__aiter__()
        n = 0
        while True:
            try:
                chunk = await self._within(chunks.__anext__(), relpath, "1 MiB of the body")
            except StopAsyncIteration:
                break
            n += len(chunk)
            self.stats["bytes_in"] += len(chunk)
            if n > limit:
                raise CorruptObjectError(
                    f"{relpath}: over {limit} bytes were sent, {_want(limit, exact)}"
                )
            write(chunk)
        if exact and n != limit:
            raise CorruptObjectError(f"{relpath}: {n} bytes were sent, {_want(limit, exact)}")
        return n

    async def _within(self, step: Any, relpath: str, what: str) -> Any:
        try:
            return await asyncio.wait_for(step, self.timeout)
        except asyncio.TimeoutError:  # not the builtin TimeoutError on 3.10
            raise StalledError(
                f"{relpath}: no {what} within {self.timeout:g} s (a stalled or too slow "
                "connection; storage_options={'timeout': seconds} sets the bound)"
            ) from None

    @staticmethod
    def _run(coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` to its end in an event loop of its own, leaving the thread's event
        loop setting alone (on a helper thread when this thread already runs a loop, as a
        notebook's does)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return _in_new_loop(coro)
        with ThreadPoolExecutor(1, "chute-get") as pool:
            return pool.submit(_in_new_loop, coro).result()

    def put_file(self, path: str | os.PathLike, relpath: str) -> None:
        """Upload the local file ``path`` as ``relpath`` (multipart above the chunk size)."""
        obs = require("obstore", EXTRA)
        size = os.path.getsize(path)
        client = self._unsigned("an upload")

        def put() -> None:
            obs.put(client, relpath, Path(path), chunk_size=CHUNK, max_concurrency=8)
            self._count("put", "bytes_out", size)

        self.call("write", relpath, put)

    def put_chunks(self, relpath: str, chunks: Callable[[], Iterable[bytes]]) -> None:
        """Upload the bytes that ``chunks()`` yields as ``relpath`` (called again on a retry)."""
        obs = require("obstore", EXTRA)
        client = self._unsigned("an upload")

        def put() -> None:
            def counted() -> Iterator[bytes]:
                for c in chunks():
                    self.stats["bytes_out"] += len(c)
                    yield c

            obs.put(client, relpath, counted(), chunk_size=CHUNK, max_concurrency=8)
            self.stats["put"] += 1

        self.call("write", relpath, put)

    def put_bytes(self, relpath: str, data: bytes) -> None:
        """Upload ``data`` as ``relpath`` in one request (the manifest: the commit)."""
        obs = require("obstore", EXTRA)
        client = self._unsigned("an upload")

        def put() -> None:
            obs.put(client, relpath, data, use_multipart=False)
            self._count("put", "bytes_out", len(data))

        self.call("write", relpath, put)

    def head(self, relpath: str) -> dict[str, Any] | None:
        """``{"size", "e_tag", "last_modified"}`` of ``relpath``, None if there is none."""
        obs = require("obstore", EXTRA)
        reader = self._reader()
        try:
            if reader is not None:
                return self.call("read", relpath, lambda: reader.head(relpath))
            meta = self.call("read", relpath, lambda: obs.head(self.client(), relpath))
        except DatasetNotFoundError:
            return None
        return {k: meta.get(k) for k in ("size", "e_tag", "last_modified")}

    def delete(self, relpath: str) -> None:
        """Delete ``relpath`` (no error if it does not exist)."""
        obs = require("obstore", EXTRA)
        client = self._unsigned("a delete")
        with contextlib.suppress(DatasetNotFoundError):
            self.call("delete", relpath, lambda: obs.delete(client, relpath))

    def list(self, relprefix: str = "") -> list[str]:
        """The keys under ``relprefix``, relative to the dataset URL."""
        obs = require("obstore", EXTRA)
        client = self._unsigned("a listing")

        def ls() -> list[str]:
            out: list[str] = []
            for batch in obs.list(client, relprefix or None):
                out.extend(m["path"] for m in batch)
            return out

        return self.call("list", relprefix, ls)

    def _count(self, kind: str, nbytes: str, n: int) -> None:
        self.stats[kind] += 1
        self.stats[nbytes] += n

    # -------------------------------------------------------------------- retries

    def call(self, what: str, relpath: str, fn: Callable[[], T]) -> T:
        """``fn()``, retried with backoff on transient failures; errors name the object."""
        attempt = 0
        first_failure: float | None = None
        while True:
            try:
                return fn()
            except (_LocalError, ArgumentError, RemoteError, CorruptObjectError):
                raise
            except Exception as exc:
                kind = classify(exc)
                now = time.monotonic()
                first_failure = now if first_failure is None else first_failure
                delay = min(10.0, self.backoff * 2**attempt) * (0.5 + random.random() / 2)
                if (
                    kind == "transient"
                    and (self.retries is None or attempt < self.retries)
                    and now + delay - first_failure <= self.retry
                ):
                    attempt += 1
                    self.stats["retries"] += 1
                    time.sleep(delay)
                    continue
                where = self.url.join(relpath)
                raise request_error(kind, what, where, self.url, self.retry, exc, attempt) from None


def _in_new_loop(coro: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def _seconds(value: Any) -> float:
    """A timeout in seconds: a positive number, or a string such as ``"30s"`` / ``"2m"``."""
    text = str(value).strip()
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    unit = next((u for u in ("ms", "s", "m", "h") if text.endswith(u)), "")
    try:
        seconds = float(text[: len(text) - len(unit)]) * scale.get(unit, 1.0)
    except ValueError:
        seconds = -1.0
    if isinstance(value, bool) or not 0 < seconds < float("inf"):
        raise ArgumentError(f"timeout must be a positive number of seconds, got {value!r}")
    return seconds
