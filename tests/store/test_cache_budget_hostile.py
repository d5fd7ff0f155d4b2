"""Hostile bookkeeping of the node cache budget (chute/store/budget.py): every name under
``.chute-budget/`` can be written by whoever shares the cache folder. A crafted reservation
(huge, negative, not a number, over the record size), held by a live process or not, evicts
nothing; a folder or a link where a reservation is expected is ignored; a folder at the
budget's lock is a CacheError naming it. Real files in tmp_path, real processes holding the
locks, and moto on 127.0.0.1 for the end-to-end read."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _reliability import recorded

from chute.errors import CacheError
from chute.store.budget import LOCK, RESERVED, Budget

LIMIT = 10_000  # the budget of these tests, in bytes
FILE = 1_000  # each cached data file

_row = recorded(
    {
        "test_crafted_reservation_held_by_a_live_process_evicts_nothing": (
            "cache budget: crafted reservation",
            "a record under .chute-budget/reserved/ whose flock a live process holds",
            "ignored (counts nothing, left to its holder); no file evicted "
            "(10**20 evicted every unpinned file of every dataset)",
        ),
        "test_crafted_reservation_of_a_dead_process_is_deleted": (
            "cache budget: crafted reservation",
            "the same records, no process holding their lock",
            "deleted at the next count; no file evicted",
        ),
        "test_folder_or_link_at_a_reservation_name_is_ignored": (
            "cache budget: reservation of the wrong type",
            "a folder (empty, or holding a file) and a link at reserved/1-aa",
            "ignored, never opened; room made and reserved as usual "
            "(was IsADirectoryError on every download)",
        ),
        "test_folder_at_the_budget_lock_is_a_cache_error_naming_it": (
            "cache budget: lock of the wrong type",
            "a folder at .chute-budget/lock",
            "CacheError naming the path and to remove it (was IsADirectoryError)",
        ),
        "test_remote_reads_under_a_budget_with_planted_records": (
            "cache budget: planted records, end to end",
            "a huge held reservation and a folder at a reservation name; chute.open(url, "
            "cache_budget=) reads every part",
            "every sample read; the other dataset's files kept",
        ),
    }
)


def cached_dataset(root: Path, name: str, files: int) -> list[Path]:
    """A dataset folder of the cache (``.chute-cache/identity.json``) holding ``files`` data
    files of :data:`FILE` bytes: their paths."""
    (root / name / ".chute-cache").mkdir(parents=True)
    (root / name / ".chute-cache" / "identity.json").write_text("{}")
    out = []
    for i in range(files):
        path = root / name / f"part-{i:05d}" / "x.npy"
        path.parent.mkdir()
        path.write_bytes(bytes(FILE))
        out.append(path)
    return out


@pytest.fixture
def holder() -> Iterator[list[subprocess.Popen]]:
    """Processes started by :func:`hold`, each ended (by its own pid) after the test."""
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        p.stdin.close()  # type: ignore[union-attr]
        p.wait(30)


HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
os.write(fd, bytes.fromhex(sys.argv[2]))
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def hold(procs: list[subprocess.Popen], path: Path, content: bytes) -> None:
    """Write ``content`` at ``path`` from another process, which holds its exclusive flock
    until the test ends (what a live downloader does with its reservation)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), content.hex()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    procs.append(p)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"


CRAFTED = {
    "huge": str(10**20).encode(),
    "over the budget": str(LIMIT + 1).encode(),
    "negative": b"-5000",
    "not a number": b"lots",
    "not text": b"\xff\xfe",
    "over the record size": b"9" * 64,
}


@pytest.mark.parametrize("content", CRAFTED.values(), ids=CRAFTED.keys())
def test_crafted_reservation_held_by_a_live_process_evicts_nothing(
    tmp_path: Path, holder: list[subprocess.Popen], content: bytes
) -> None:
    root = tmp_path / "cache"
    files = cached_dataset(root, "a-0123", 4) + cached_dataset(root, "b-4567", 4)
    record = root / RESERVED / "1-aa"
    hold(holder, record, content)
    budget = Budget(root, LIMIT)
    assert budget.usage() == 8 * FILE  # the record counts nothing
    assert budget.make_room(FILE) == 0  # 8 + 1 files fit: nothing evicted
    with budget.reserve(FILE):
        assert budget.usage() == 9 * FILE
    assert all(f.exists() for f in files)
    assert record.exists()  # a live process's: left to it


@pytest.mark.parametrize("content", CRAFTED.values(), ids=CRAFTED.keys())
def test_crafted_reservation_of_a_dead_process_is_deleted(tmp_path: Path, content: bytes) -> None:
    root = tmp_path / "cache"
    files = cached_dataset(root, "a-0123", 4)
    record = root / RESERVED / "1-aa"
    record.parent.mkdir(parents=True)
    record.write_bytes(content)
    budget = Budget(root, LIMIT)
    assert budget.make_room(FILE) == 0
    assert not record.exists()
    assert all(f.exists() for f in files)


@pytest.mark.parametrize("kind", ["empty folder", "folder holding a file", "link"])
def test_folder_or_link_at_a_reservation_name_is_ignored(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "cache"
    files = cached_dataset(root, "a-0123", 4)
    planted = root / RESERVED / "1-aa"
    planted.parent.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text(str(10**20))
    if kind == "link":
        planted.symlink_to(elsewhere)
    else:
        planted.mkdir()
        if kind == "folder holding a file":
            (planted / "x").write_text(str(10**20))
    budget = Budget(root, LIMIT)
    with budget.reserve(FILE):
        assert budget.usage() == 5 * FILE
    assert all(f.exists() for f in files)
    assert elsewhere.read_text() == str(10**20)  # a link's target is never opened


def test_folder_at_the_budget_lock_is_a_cache_error_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cached_dataset(root, "a-0123", 1)
    (root / LOCK).mkdir(parents=True)
    budget = Budget(root, LIMIT)
    folder = r"\.chute-budget/lock in the cache is a folder.*remove"
    with pytest.raises(CacheError, match=folder), budget.reserve(FILE):
        pass


def test_remote_reads_under_a_budget_with_planted_records(
    request: pytest.FixtureRequest, tmp_path: Path, holder: list[subprocess.Popen]
) -> None:
    pytest.importorskip("obstore")
    pytest.importorskip("moto")
    from _s3server import BUCKET, small_dataset

    import chute

    request.getfixturevalue("s3")
    url = f"s3://{BUCKET}/planted-records/ds.chute"
    small_dataset(url, n=300, part_size=50)
    root = tmp_path / "cache"
    other = cached_dataset(root, "other-0123", 2)
    hold(holder, root / RESERVED / "1-aa", str(10**20).encode())
    (root / RESERVED / "2-bb").mkdir()
    with chute.open(url, cache_dir=root, cache_budget="10MB") as ds:
        seen = [int(v) for b in chute.Loader(ds, 50, shuffle=False) for v in b["x"][:, 0]]
    assert seen == list(range(300))
    assert all(f.exists() for f in other)
