"""Dataset URLs: ``s3://bucket/prefix``, ``gs://``, ``az://`` / ``abfs://``, ``http(s)://``,
``file://``, parsed into (scheme, bucket, prefix) without any I/O.

The scheme picks the object store; ``bucket`` is the bucket or container (the host for
HTTP, empty for ``file://``); ``prefix`` is the dataset's folder inside it, the keys of its
files are ``prefix/relpath``. Paths with ``..`` or empty segments are refused: a key is
derived from a URL and a manifest name, and must never point elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from .._args import URL_SCHEME
from ..errors import ArgumentError

# alias -> canonical scheme
SCHEMES = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gs",
    "gcs": "gs",
    "az": "az",
    "azure": "az",
    "abfs": "az",
    "abfss": "az",
    "adl": "az",
    "http": "http",
    "https": "https",
    "file": "file",
}


@dataclass(frozen=True)
class URL:
    """A parsed dataset URL. ``url`` is the URL as given, without a trailing ``/``."""

    url: str
    scheme: str  # canonical: s3, gs, az, http, https, file
    bucket: str
    prefix: str  # no leading or trailing '/'; '' for the bucket's root

    def key(self, relpath: str) -> str:
        """The object key of ``relpath`` (a path inside the dataset, '/'-separated)."""
        return f"{self.prefix}/{relpath}" if self.prefix else relpath

    def join(self, relpath: str) -> str:
        """The full URL of ``relpath``, for messages."""
        return f"{self.url}/{relpath}"

    @property
    def remote(self) -> bool:
        """False for ``file://``."""
        return self.scheme != "file"

    def __str__(self) -> str:
        return self.url


def is_url(path: object) -> bool:
    """Whether ``path`` is a string that names a URL (``scheme://`` at its start), not a
    local path: ``"s3://b/x"`` and ``"s4://b/x"`` are (:func:`parse_url` refuses the
    latter's scheme, rather than a local folder ``s4:`` being made); ``"data/x.chute"`` and
    ``"C:/x"`` are not."""
    return isinstance(path, str) and URL_SCHEME.match(path) is not None


# storage_options keys that set the endpoint, per scheme (obstore's spellings; any case)
ENDPOINT_KEYS = {
    "s3": ("aws_endpoint_url_s3", "aws_endpoint", "aws_endpoint_url", "endpoint_url", "endpoint"),
    "gs": ("google_base_url", "gcs_base_url", "base_url"),
    "az": ("azure_storage_endpoint", "azure_endpoint", "endpoint"),
}


def endpoint_option(scheme: str, options: Mapping[str, Any]) -> str | None:
    """The endpoint that ``options`` (storage_options) set for a store of ``scheme``, under
    any of obstore's spellings; None when they set none."""
    given = {str(k).lower(): v for k, v in options.items()}
    for key in ENDPOINT_KEYS.get(scheme, ()):
        if given.get(key):
            return str(given[key])
    return None


def parse_url(path: str | URL) -> URL:
    """Parse a dataset URL; an :class:`ArgumentError` naming the URL when it is not one."""
    if isinstance(path, URL):
        return path
    if not isinstance(path, str):
        raise ArgumentError(f"a dataset URL is a str, got {type(path).__name__} {path!r}")
    m = URL_SCHEME.match(path)
    if m is None:
        raise ArgumentError(f"{path!r} is not a URL (expected e.g. 's3://bucket/train.chute')")
    given = m.group(1).lower()
    scheme = SCHEMES.get(given)
    if scheme is None:
        raise ArgumentError(
            f"{path}: scheme {given!r} is not supported; use one of {', '.join(sorted(SCHEMES))}"
        )
    url = path.rstrip("/")
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ArgumentError(f"{path}: a dataset URL has no query or fragment ('?', '#')")
    bucket = parts.netloc
    raw = unquote(parts.path)
    if scheme == "file":
        if bucket not in ("", "localhost"):
            raise ArgumentError(f"{path}: a file:// URL names a local path (file:///abs/path)")
        if not raw.startswith("/") or raw == "/":
            raise ArgumentError(f"{path}: a file:// URL needs an absolute folder path")
        return URL(url, scheme, "", _clean(path, raw.strip("/")))
    if not bucket:
        raise ArgumentError(f"{path}: no bucket (expected {given}://BUCKET/PATH)")
    return URL(url, scheme, bucket, _clean(path, raw.strip("/")))


def _clean(path: str, prefix: str) -> str:
    segments = prefix.split("/") if prefix else []
    if any(s in ("", ".", "..") for s in segments):
        raise ArgumentError(
            f"{path}: the path has an empty, '.' or '..' segment; name the dataset folder "
            "plainly, e.g. s3://bucket/data/train.chute"
        )
    return prefix
