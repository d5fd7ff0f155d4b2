"""Files rewritten in place while a Loader iterates.

docs/format.md promises that one epoch never mixes two datasets. ``cp -r new/. d/`` (here
``shutil.copytree(dirs_exist_ok=True)``) rewrites the files in place: same inodes, new
content and mtime. The check asked for is cheap (file identity at each epoch start and part
switch): the epoch must be all v1, or a ``DatasetChangedError`` must come before it ends.
``num_workers=0``, so the copy never races a read (a read of a file being truncated is a
SIGBUS, another matter).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from _faults import recorded_case  # noqa: F401 - autouse: records the case

import chute

N, BATCH = 2000, 10  # 200 batches an epoch


def _version(path: Path, v: int, part_size: int | None) -> Path:
    chute.write(path, {"x": np.full((N, 16), v, np.float32)}, part_size=part_size)
    return path


def _changed(exc: BaseException) -> bool:
    """A DatasetChangedError, as itself or as the cause of the error the Loader raised."""
    return isinstance(exc, chute.DatasetChangedError) or isinstance(
        exc.__cause__, chute.DatasetChangedError
    )


def _run_epoch(
    loader: chute.Loader, change, at: int = 20
) -> tuple[list[float], BaseException | None]:
    """Iterate one epoch, calling ``change()`` after batch ``at``; the versions seen per batch
    and the error that ended the epoch, if any."""
    seen: list[float] = []
    try:
        for k, batch in enumerate(loader):
            vals = batch["x"].unique().tolist()
            seen.append(vals[0] if len(vals) == 1 else -1.0)  # -1: a batch mixing versions
            if k == at:
                change()
    except chute.ChuteError as exc:
        return seen, exc
    return seen, None


@pytest.mark.parametrize("how", ["copytree", "mmap_r+"])
def test_inplace_rewrite_detected_before_epoch_ends(tmp_path: Path, how: str) -> None:
    """Four parts of 500 samples; the files change at batch 20 (in part 0): the switch to part
    1 (batch 50) notices: part 1 is mapped lazily, after its identity check."""
    d = _version(tmp_path / "d.chute", 1, part_size=500)
    new = _version(tmp_path / "new.chute", 2, part_size=500)
    loader = chute.Loader(chute.open(d), BATCH, shuffle=False, num_workers=0)

    def change() -> None:
        if how == "copytree":
            shutil.copytree(new, d, dirs_exist_ok=True)
        else:  # np.load(..., mmap_mode="r+") edits every part's file the same way
            for f in sorted(d.glob("part-*/x.npy")):
                arr = np.load(f, mmap_mode="r+")
                arr[:] = 2
                arr.flush()
                del arr

    seen, exc = _run_epoch(loader, change)
    assert exc is not None and _changed(exc), (
        f"no DatasetChangedError: the epoch gave {seen.count(1.0)} batches of v1, "
        f"{seen.count(2.0)} of v2, {seen.count(-1.0)} mixed (error: {exc!r})"
    )
    assert len(seen) < N // BATCH


def test_inplace_rewrite_single_part_detected_before_epoch_ends(tmp_path: Path) -> None:
    """One part (the root), already mapped when the files change at batch 20: the check per
    gather (``fstat`` of the mapped files: size and mtime) raises before the epoch ends,
    instead of handing out 179 more batches of v2."""
    d = _version(tmp_path / "d.chute", 1, part_size=None)
    new = _version(tmp_path / "new.chute", 2, part_size=None)
    loader = chute.Loader(chute.open(d), BATCH, shuffle=False, num_workers=0)
    seen, exc = _run_epoch(loader, lambda: shutil.copytree(new, d, dirs_exist_ok=True))
    assert exc is not None and _changed(exc), (
        f"no DatasetChangedError: the epoch gave {seen.count(1.0)} batches of v1, "
        f"{seen.count(2.0)} of v2, {seen.count(-1.0)} mixed (error: {exc!r})"
    )


def test_inplace_rewrite_single_part_detected_by_next_epoch(tmp_path: Path) -> None:
    """At the latest, the next epoch's start notices (epoch 1 is never silently all v2)."""
    d = _version(tmp_path / "d.chute", 1, part_size=None)
    new = _version(tmp_path / "new.chute", 2, part_size=None)
    loader = chute.Loader(chute.open(d), BATCH, shuffle=False, num_workers=0)
    _, exc = _run_epoch(loader, lambda: shutil.copytree(new, d, dirs_exist_ok=True))
    if exc is None:
        with pytest.raises(chute.ChuteError) as info:
            next(iter(loader))
        exc = info.value
    assert _changed(exc), repr(exc)


def test_no_rewritten_batch_handed_out(tmp_path: Path) -> None:
    """After the change, no batch of v2 is handed out before the error (not even the rest of
    part 0, batches 21-49, before the switch to part 1)."""
    d = _version(tmp_path / "d.chute", 1, part_size=500)
    new = _version(tmp_path / "new.chute", 2, part_size=500)
    loader = chute.Loader(chute.open(d), BATCH, shuffle=False, num_workers=0)
    seen, exc = _run_epoch(loader, lambda: shutil.copytree(new, d, dirs_exist_ok=True))
    assert exc is not None and _changed(exc), repr(exc)
    assert set(seen) == {1.0}, (
        f"{seen.count(2.0)} batches of v2 were handed out before the DatasetChangedError"
    )


def test_inplace_rewrite_detected_by_dataloader(tmp_path: Path) -> None:
    """The same with ``chute.dataloader`` (in-process, ``num_workers=0``)."""
    d = _version(tmp_path / "d.chute", 1, part_size=500)
    new = _version(tmp_path / "new.chute", 2, part_size=500)
    dl = chute.dataloader(chute.open(d), BATCH, shuffle=False, num_workers=0, pin_memory=False)
    seen, exc = _run_epoch(dl, lambda: shutil.copytree(new, d, dirs_exist_ok=True))  # type: ignore[arg-type]
    assert exc is not None and _changed(exc), (
        f"no DatasetChangedError: {seen.count(1.0)} batches of v1, {seen.count(2.0)} of v2"
    )
