"""How an object store client is made from a URL, ``storage_options`` and the environment
(:func:`make_store`): which options go to the store and which to its HTTP client, the
endpoint, and the two things refused before any request (an endpoint the environment would
silently override, and obstore in a process forked after its parent used it).
:class:`~chute.store.client.Store` makes one per process."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ArgumentError, RemoteError, require
from .url import URL, endpoint_option

__all__ = ["CREDENTIALS", "EXTRA", "make_store", "short"]

EXTRA = "remote"

CREDENTIALS = {  # what each provider reads from the environment, for error messages
    "s3": "e.g. AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL",
    "gs": "e.g. GOOGLE_APPLICATIONCREDENTIALS or GOOGLE_SERVICE_ACCOUNT",
    "az": "e.g. AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY",
}

# storage_options keys that configure obstore's HTTP client rather than the store
_CLIENT_KEYS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "default_content_type",
        "default_headers",
        "http1_only",
        "http2_only",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "proxy_ca_certificate",
        "proxy_excludes",
        "randomize_addresses",
        "read_timeout",
        "root_certificate",
        "user_agent",
    }
)
_ENDPOINT_VARS = {  # the environment variables obstore reads an endpoint from, per scheme
    "s3": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
    "az": ("AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT"),
    "gs": ("GOOGLE_BASE_URL",),
}

# obstore runs its requests on a process-wide tokio runtime whose threads a fork() does not
# copy: in a child forked after its parent made a request, every request (even from a new
# client) hangs forever (tokio-rs/tokio#4301; obstore is "not fork safe"). Such a child is
# refused with an error instead (see _check_fork).
_used_in: int | None = None  # the pid that started obstore's runtime


def make_store(
    url: URL, storage_options: Mapping[str, Any], timeout: float
) -> tuple[Any, dict[str, Any], str]:
    """The obstore store for ``url``, the HTTP client options it was given, and its custom
    endpoint ("" for the provider's own): ``storage_options`` split between the store and its
    HTTP client, the timeouts set from ``timeout``, an endpoint the environment would override
    refused, and a process forked after its parent used obstore refused (it would hang)."""
    global _used_in
    _check_fork(url)
    store_mod = require("obstore.store", EXTRA)
    _used_in = os.getpid()
    options = dict(storage_options)
    client = {k: options.pop(k) for k in list(options) if k in _CLIENT_KEYS}
    client.setdefault("connect_timeout", f"{max(1, int(timeout // 3))}s")
    client.setdefault("read_timeout", f"{max(1, int(timeout))}s")
    client["timeout"] = "24h"  # a whole large part; downloads are bounded per chunk instead
    explicit = endpoint_option(url.scheme, options)
    _check_endpoint_env(url, explicit)
    endpoint = str(explicit or _env_endpoint(url.scheme) or "")
    if endpoint.startswith("http://") or url.scheme == "http":
        client.setdefault("allow_http", True)
    retry = {"max_retries": 0}  # retried here, where a stream cut midway is retried too
    try:
        if url.scheme == "file":
            Path("/" + url.prefix).mkdir(parents=True, exist_ok=True)
            return store_mod.LocalStore("/" + url.prefix), client, endpoint
        if url.scheme in ("http", "https"):
            if options:
                raise ArgumentError(
                    f"{url}: storage_options {sorted(options)} do not apply to HTTP "
                    f"(only client options: {', '.join(sorted(_CLIENT_KEYS))})"
                )
            http = store_mod.HTTPStore.from_url(url.url, client_options=client, retry_config=retry)
            return http, client, endpoint
        store = store_mod.from_url(
            url.url, config=options or None, client_options=client, retry_config=retry
        )
        return store, client, endpoint
    except ArgumentError:
        raise
    except Exception as exc:
        raise ArgumentError(
            f"{url}: cannot configure the object store client from storage_options "
            f"{sorted(storage_options)} and the environment ("
            f"{CREDENTIALS.get(url.scheme, 'see obstore')}): {short(exc)}"
        ) from None


def _check_fork(url: URL) -> None:
    """Refuse to use obstore in a process forked after its parent used it (it would hang)."""
    if _used_in is not None and _used_in != os.getpid():
        raise RemoteError(
            f"{url}: this process was forked from one that had already used the object "
            "store client (obstore), whose runtime does not survive fork(): its requests "
            "would hang. Start workers with the 'spawn' or 'forkserver' method (e.g. "
            "DataLoader(multiprocessing_context='forkserver')), or fork before the first read"
        )


def _check_endpoint_env(url: URL, explicit: str | None) -> None:
    """Refuse an endpoint in storage_options that ``AWS_ENDPOINT_URL_S3`` would override:
    obstore lets that variable win over its configuration, which would send the requests
    elsewhere without a word."""
    env = os.environ.get("AWS_ENDPOINT_URL_S3")
    if url.scheme == "s3" and explicit and env and env.rstrip("/") != explicit.rstrip("/"):
        raise ArgumentError(
            f"{url}: storage_options set the endpoint {explicit}, but the environment "
            f"variable AWS_ENDPOINT_URL_S3={env} would override it (obstore gives it "
            "precedence): unset AWS_ENDPOINT_URL_S3, or drop the endpoint from storage_options"
        )


def _env_endpoint(scheme: str) -> str | None:
    variables = _ENDPOINT_VARS.get(scheme, ())
    return next((os.environ[v] for v in variables if os.environ.get(v)), None)


def short(exc: BaseException) -> str:
    """The first line of an obstore error (they carry a long debug dump)."""
    return str(exc).strip().split("\n", 1)[0][:400]
