"""``chute verify``: recompute every data file's checksum and compare with the manifest."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tqdm.auto import tqdm

from ..errors import ChecksumError
from ..manifest_file import file_checksum
from .opening import open as open_dataset
from .remote import RemoteDataset


def verify(
    path: str | os.PathLike,
    progress: bool = False,
    *,
    storage_options: Mapping[str, Any] | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> int:
    """Check sizes, headers and checksums of every file; returns the bytes checked.

    Raises :class:`chute.ChecksumError` naming every file whose content changed. ``path``
    may be a URL: every file is downloaded into the cache (checked), then checked again there;
    a cached copy that no longer matches is downloaded again (a ChecksumError when the
    stored object itself does not match). ``storage_options`` and ``cache_dir`` are
    :func:`chute.open`'s, for a URL.
    """
    # checks the manifest, paths and sizes
    ds = open_dataset(path, storage_options=storage_options, cache_dir=cache_dir)
    if isinstance(ds, RemoteDataset):  # a URL: download every file (each checked) first
        ds.fetch()
    with ds:
        bad = []
        total = ds.nbytes
        bar = tqdm(total=total, unit="B", unit_scale=True, disable=not progress, desc="verify")
        with bar:
            for part in ds.parts:
                for name, f in ds.schema.items():
                    for fn in f.files(name).values():
                        file = part.folder / fn
                        if file_checksum(file) == part.files[fn].checksum:
                            pass
                        elif isinstance(ds, RemoteDataset):  # a bad cached copy: fetched
                            ds.cache.refetch(os.path.relpath(file, ds.cache.folder))  # again
                        else:
                            bad.append(str(file))
                        bar.update(part.files[fn].nbytes)
        # Checksums first: a changed offsets file is named as such, not by the values file
        # whose offsets no longer fit.
        if bad:
            raise ChecksumError(
                f"{path}: checksum mismatch in {len(bad)} file(s): {', '.join(bad)}. Their bytes "
                "changed since they were written (disk or copy error, or an edit): restore the "
                "dataset from a good copy or convert it again"
            )
        ds.check_files()  # headers and offsets agree with the manifest
    return total
