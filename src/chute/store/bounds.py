"""What a read from a store can find wrong with an object, shared by every way of reading
one (:mod:`chute.store.client`, :mod:`chute.store.signed`, :mod:`chute.store.folder`)."""

from __future__ import annotations


class CorruptObjectError(Exception):
    """A stored object could not be decoded (bad zstd data), or is not the size expected:
    the cache treats it as a checksum mismatch (refetched once, then a ChecksumError)."""


class StalledError(Exception):
    """A request got no answer, or a download no progress, within the timeout (retried)."""


def _want(limit: int, exact: bool) -> str:
    return f"the manifest says {limit}" if exact else f"more than the {limit} allowed"
