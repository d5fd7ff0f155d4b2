"""Reads of an S3 store whose credentials carry a session token, through signed URLs and a
client that never follows a redirect.

``obstore`` follows HTTP redirects (no option stops it) with the request's headers: it drops
the ``Authorization`` signature on another host, but the session token
(``x-amz-security-token``) goes along, to whatever host the ``Location`` names. So when the
store's requests would carry a session token (temporary credentials: ``AWS_SESSION_TOKEN``, an
instance or SSO role), :class:`~chute.store.client.Store` reads (GET, HEAD) through here
instead: ``obstore.sign`` makes a URL whose query holds the signature and the token (nothing
secret in a header), and ``urllib3`` fetches it with redirects off. A 3xx answer is then a
:class:`~chute.errors.RemoteError` naming the object and where it was sent, never followed:
the token reaches only the endpoint it was configured for. Requests without a session token
(keys alone, whose signature ``obstore`` drops on another host; public buckets; other
providers) are ``obstore``'s as before.

The same bounds hold as for ``obstore``'s reads (see :mod:`chute.store.client`): the headers
within ``timeout``, then each 1 MiB of the body within ``timeout``, the body at most the
size expected; a failed answer carries the kind that the store's retry loop reads (missing,
denied, client, transient), so retries and messages are the same.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from ..errors import RemoteError, require
from .bounds import CorruptObjectError, StalledError, _want

EXPIRES = datetime.timedelta(minutes=15)  # a signed URL is used at once, once
TOKEN = "X-Amz-Security-Token="  # the session token's query key in a signed URL


class SignedError(Exception):
    """An answer or failure of a signed request, with the kind the retry loop acts on."""

    def __init__(self, kind: str, text: str):
        super().__init__(text)
        self.kind = kind


def carries_token(client: Any) -> bool:
    """Whether ``client`` (an obstore store) signs its requests with a session token: only S3
    stores do, and a URL it signs then holds :data:`TOKEN`."""
    if type(client).__name__ != "S3Store":
        return False
    obs = require("obstore", "remote")
    try:
        return TOKEN in obs.sign(client, "GET", "probe", EXPIRES)
    except Exception:  # unsigned (skip_signature), or no credentials: no token to carry
        return False


class SignedReader:
    """GET and HEAD of ``client``'s objects through URLs it signs, fetched without following
    redirects; one connection pool per process (made where first used).
    ``client_options``: obstore's HTTP client options, of which the TLS, plain-HTTP and proxy
    ones apply (``root_certificate``, ``allow_invalid_certificates``, ``allow_http``,
    ``proxy_url``)."""

    def __init__(self, client: Any, client_options: Mapping[str, Any], timeout: float):
        urllib3 = require("urllib3", "remote")
        self.client, self.timeout = client, timeout
        kw: dict[str, Any] = {"retries": False, "maxsize": 16, "block": False}
        if client_options.get("allow_invalid_certificates") in (True, "true", "True"):
            kw["cert_reqs"] = "CERT_NONE"
        if client_options.get("root_certificate"):
            kw["ca_certs"] = str(client_options["root_certificate"])
        proxy = client_options.get("proxy_url")
        self.pool = urllib3.ProxyManager(proxy, **kw) if proxy else urllib3.PoolManager(**kw)
        self.errors = urllib3.exceptions.HTTPError
        self.tls_errors = urllib3.exceptions.SSLError
        self.allow_http = client_options.get("allow_http") in (True, "true", "True")
        self._timeout = urllib3.Timeout(connect=max(1.0, timeout / 3), read=timeout)
        self._lock = threading.Lock()

    def _request(self, method: str, relpath: str) -> Any:
        obs = require("obstore", "remote")
        url = obs.sign(self.client, method, relpath, EXPIRES)
        if url.startswith("http://") and not self.allow_http:
            raise SignedError("http", f"{relpath}: BadScheme: plain http:// is not allowed")
        try:
            resp = self.pool.request(
                method,
                url,
                redirect=False,
                preload_content=False,
                decode_content=False,
                timeout=self._timeout,
            )
        except self.errors as exc:
            if "timed out" in str(exc).lower():
                raise self._stalled(relpath, "answer") from None
            kind = "tls" if isinstance(exc, self.tls_errors) else "transient"
            raise SignedError(kind, f"{relpath}: {type(exc).__name__}: {exc}") from None
        if resp.status >= 300:
            try:
                body = resp.read(4096).decode("utf-8", "replace")
            except self.errors:
                body = ""
            finally:
                resp.release_conn()
            raise _answer_error(relpath, resp.status, resp.headers, body)
        return resp

    def head(self, relpath: str) -> dict[str, Any]:
        """``{"size", "e_tag", "last_modified"}`` of ``relpath`` (a :class:`SignedError` of
        kind "missing" when there is none)."""
        resp = self._request("HEAD", relpath)
        resp.release_conn()
        size = resp.headers.get("Content-Length")
        return {
            "size": int(size) if size and size.isdigit() else None,
            "e_tag": resp.headers.get("ETag"),
            "last_modified": resp.headers.get("Last-Modified"),
        }

    def stream(
        self,
        relpath: str,
        limit: int,
        exact: bool,
        write: Callable[[bytes], None],
        count: Callable[[int], None],
        chunk: int,
    ) -> int:
        """GET ``relpath`` and ``write`` its body in chunks of ``chunk`` bytes, each within
        ``timeout``, the body at most ``limit`` bytes (exactly, when ``exact``), as
        :meth:`chute.store.client.Store._stream` does; ``count(n)`` sees every chunk
        received. Returns the body's size."""
        resp = self._request("GET", relpath)
        try:
            said = resp.headers.get("Content-Length")
            if said is not None and said.isdigit():
                n = int(said)
                if n > limit or (exact and n != limit):
                    raise CorruptObjectError(
                        f"{relpath}: the store says {n} bytes, {_want(limit, exact)}"
                    )
            total = 0
            while True:
                got = self._chunk(resp, chunk, relpath)
                if not got:
                    break
                total += len(got)
                count(len(got))
                if total > limit:
                    raise CorruptObjectError(
                        f"{relpath}: over {limit} bytes were sent, {_want(limit, exact)}"
                    )
                write(got)
            if exact and total != limit:
                raise CorruptObjectError(
                    f"{relpath}: {total} bytes were sent, {_want(limit, exact)}"
                )
            return total
        finally:
            resp.release_conn()

    def _chunk(self, resp: Any, size: int, relpath: str) -> bytes:
        """Up to ``size`` bytes of the body (fewer only at its end), arriving within the
        timeout: each read returns what a packet brings, so a trickle is cut too."""
        deadline = time.monotonic() + self.timeout
        parts: list[bytes] = []
        n = 0
        while n < size:
            try:
                got = resp.read1(size - n)
            except self.errors as exc:
                if "timed out" in str(exc).lower():
                    raise self._stalled(relpath, "1 MiB of the body") from None
                raise SignedError("transient", f"{relpath}: {exc}") from None
            if not got:
                break
            parts.append(got)
            n += len(got)
            if n < size and time.monotonic() > deadline:
                raise self._stalled(relpath, "1 MiB of the body")
        return b"".join(parts)

    def _stalled(self, relpath: str, what: str) -> StalledError:
        return StalledError(
            f"{relpath}: no {what} within {self.timeout:g} s (a stalled or too slow "
            "connection; storage_options={'timeout': seconds} sets the bound)"
        )


def _answer_error(relpath: str, status: int, headers: Mapping[str, str], body: str) -> Exception:
    """The error for an answer that is not a 2xx: a redirect refused, else the kind of the
    status (what obstore's errors say for the same answers)."""
    if 300 <= status < 400:
        where = headers.get("Location", "")
        host = urlsplit(where).netloc or "(no Location)"
        return RemoteError(
            f"{relpath}: the store answered {status} redirecting to {host}; chute does not "
            "follow redirects with a session token (it would go along to that host): point "
            f"the endpoint at the server that holds the data ({where[:200]})"
        )
    text = f"{relpath}: status code: {status}: {body[:400]}"
    if status == 404:
        return SignedError("missing", text)
    if status in (401, 403):
        return SignedError("denied", text)
    if status >= 500 or status in (408, 429):
        return SignedError("transient", text)
    return SignedError("client", text)
