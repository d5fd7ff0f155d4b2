"""``ds[i]``'s check that the dataset was not replaced: throttled to one per
``RECHECK_INTERVAL`` (a ``stat`` a file on every call would be half of a sample's cost), yet
a file rewritten in place is caught: at the first ``ds[i]``, at the first one after the
interval (whichever part it reads: every part read since the last check is checked), and at
any read that fails. The interval is a module constant that the tests set, so nothing here
depends on the wall clock."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from _reliability import recorded

import chute
from chute.reader import dataset

_row = recorded(
    {
        "test_rewritten_file_caught_at_the_first_getitem_after_the_interval": (
            "dataset rewritten in place: ds[i]",
            "a part's file given a new mtime between two ds[i], 3 parts",
            "DatasetChangedError naming the file at the first ds[i] after the interval, "
            "whichever part it reads; gather at once",
        ),
        "test_failed_read_rechecks_at_once": (
            "dataset rewritten in place: corrupt offsets",
            "a ragged field's offsets rewritten to lie, inside the interval",
            "DatasetChangedError (the file was replaced), never a bare FormatError",
        ),
    }
)


def _dataset(tmp_path: Path) -> Path:
    ids = [np.arange(i % 5 + 1, dtype=np.int32) for i in range(30)]
    return chute.write(tmp_path / "d.chute", {"x": np.arange(30), "ids": ids}, part_size=10)


def test_rewritten_file_caught_at_the_first_getitem_after_the_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _dataset(tmp_path)
    monkeypatch.setattr(dataset, "RECHECK_INTERVAL", 1e9)
    ds = chute.open(path)
    assert ds[0]["x"].item() == 0  # the first ds[i] checks
    os.utime(path / "part-00000" / "x.npy", ns=(0, 0))  # same inode and size, other mtime
    assert ds[1]["x"].item() == 1  # inside the interval: not checked
    assert ds[15]["x"].item() == 15  # another part
    with pytest.raises(chute.DatasetChangedError, match=r"part-00000/x\.npy"):
        ds.gather([0])  # a batch checks at once
    monkeypatch.setattr(dataset, "RECHECK_INTERVAL", 0.0)
    with pytest.raises(chute.DatasetChangedError, match=r"part-00000/x\.npy is not the file"):
        ds[25]  # part 2 read now, part 0 read since the last check: checked
    with pytest.raises(chute.DatasetChangedError, match=r"part-00000/x\.npy"):
        ds[26]  # still refused: a failed check forgets no part


def test_failed_read_rechecks_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _dataset(tmp_path)
    monkeypatch.setattr(dataset, "RECHECK_INTERVAL", 1e9)
    ds = chute.open(path)
    assert ds[3]["ids"].tolist() == [0, 1, 2, 3]
    offsets = path / "part-00000" / "ids.offsets.npy"
    arr = np.load(offsets, mmap_mode="r+")
    arr[5] = 10**9  # sample 4 now ends past the values
    arr.flush()
    del arr
    os.utime(offsets, ns=(0, 0))  # its mtime may not have moved at this clock's resolution
    with pytest.raises(chute.DatasetChangedError, match=r"ids\.offsets\.npy is not the file"):
        ds[4]
