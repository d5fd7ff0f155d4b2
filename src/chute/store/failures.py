"""What a failed request to a store means: the kind of failure (only a transient one is
retried, by :meth:`chute.store.client.Store.call`) and the error that names the object and
says what to do."""

from __future__ import annotations

from ..errors import DatasetNotFoundError, RemoteError
from .configure import CREDENTIALS, short
from .url import URL

__all__ = ["classify", "request_error"]

# the error codes of a missing bucket (S3, GCS) or container (Azure) in a 404's body
_NO_BUCKET = ("NoSuchBucket", "ContainerNotFound")

# rustls' errors in obstore's debug dump when the TLS handshake fails: not retried
_TLS_ERRORS = ("InvalidContentType", "InvalidCertificate", "CorruptMessage", "HandshakeFailure")


def classify(exc: BaseException) -> str:
    """missing | credentials | denied | client | http | tls | transient."""
    kind = getattr(exc, "kind", None)  # a signed request's failure says its kind
    if isinstance(kind, str):
        return kind
    if isinstance(exc, FileNotFoundError):
        return "missing"
    name = type(exc).__name__
    text = str(exc)
    if name in ("PermissionDeniedError", "UnauthenticatedError"):
        return "denied"
    if "169.254.169.254" in text or "credential" in text.lower():
        return "credentials"
    if name in ("InvalidPathError", "NotSupportedError", "UnknownConfigurationKeyError"):
        return "client"
    if "BadScheme" in text:  # an http:// URL without allow_http: the request is not sent
        return "http"
    if any(t in text for t in _TLS_ERRORS):
        return "tls"
    if "status code: 4" in text and "status code: 408" not in text and "429" not in text:
        return "client"
    return "transient"  # 5xx, connection refused/reset, timeouts, truncated bodies


def request_error(
    kind: str, what: str, where: str, url: URL, retry: float, exc: BaseException, tries: int
) -> Exception:
    """The error for a request to ``what`` object ``where`` of store ``url`` that failed
    with ``exc`` of ``kind`` (see :func:`classify`) after ``tries`` retries within ``retry``
    seconds."""
    if kind == "missing":
        if any(code in str(exc) for code in _NO_BUCKET):
            bucket = "container" if url.scheme == "az" else "bucket"
            return DatasetNotFoundError(
                f"{where}: the {bucket} {url.bucket!r} does not exist (or is not "
                "visible with these credentials and endpoint)"
            )
        return DatasetNotFoundError(f"{where}: no such object")
    if kind == "credentials":
        return RemoteError(
            f"{where}: no credentials for {url.scheme}://: set the provider's "
            f"environment variables ({CREDENTIALS.get(url.scheme, 'see obstore')}), "
            "or pass them in storage_options, or storage_options={'skip_signature': True} "
            f"for a public bucket ({short(exc)})"
        )
    if kind == "denied":
        return RemoteError(
            f"{where}: the store refused to {what} it with these credentials: {short(exc)}"
        )
    if kind == "client":
        return RemoteError(f"{where}: the store refused the request: {short(exc)}")
    if kind == "http":
        return RemoteError(
            f"{where}: the endpoint is plain http://, which the client refuses: pass "
            f"storage_options={{'allow_http': True}} ({short(exc)})"
        )
    if kind == "tls":
        return RemoteError(
            f"{where}: the TLS handshake with the endpoint failed (an https:// endpoint "
            "on a server that speaks plain HTTP, or a certificate it does not trust): "
            "use its http:// URL, or pass root_certificate in storage_options "
            f"({short(exc)})"
        )
    return RemoteError(
        f"{where}: could not {what} it after {tries + 1} attempt(s) in {retry:g} s "
        "of retries (the store is unreachable or failing; chute.open(url, retry=SECONDS) "
        f"rides out a longer outage): {short(exc)}"
    )
