"""A disk that fills up while writing.

A real small filesystem (a 50 MB tmpfs, else a loop-mounted ext4 image; skipped with the
reason where neither can be mounted). Expected of every writer that hits ENOSPC: a
``chute.ChuteError`` that is also an ``OSError`` and names the destination; its temp folder
removed (the space given back); an appender's lock released; the old dataset intact; and
``chute convert`` printing one line, no traceback, exit code != 0.
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path

import numpy as np
import pytest
from _faults import (
    mount_small_fs,
    recorded_case,  # noqa: F401 - autouse: records the case
    run_chute,
    run_python,
)

import chute

pytestmark = pytest.mark.slow  # a mounted filesystem and fresh interpreters

FS_MB = 50
ROWS, WIDTH = 5000, 1000  # the old dataset: 5000 float32 rows of 1000 = 20 MB


@pytest.fixture
def small_fs(tmp_path: Path):
    """A real filesystem of FS_MB MB, mounted for the test and unmounted after it."""
    where = tmp_path / "fs"
    undo = mount_small_fs(where, FS_MB)
    if isinstance(undo, str):
        pytest.skip(undo)
    try:
        yield where
    finally:
        undo()


def _old(where: Path) -> Path:
    path = where / "d.chute"
    chute.write(path, {"x": np.full((ROWS, WIDTH), 7, np.float32)})
    return path


def _fill(path: Path, rows: bool = True, **writer_kw) -> BaseException | None:
    """Write to ``Writer(path, **writer_kw)`` until the disk is full: float32 rows of 4 KB one
    by one (small writes stay in the file's buffer, so closing it fails with ENOSPC again),
    or 4 MB batches (written straight through). Bounded: 400 MB is 8
    times the filesystem. The exception that came out, None if none did."""
    row = {"x": np.ones(WIDTH, np.float32)}
    batch = {"x": np.ones((1000, WIDTH), np.float32)}
    try:
        with chute.Writer(path, **writer_kw) as w:
            for _ in range(100_000 if rows else 100):
                if rows:
                    w.append(row)
                else:
                    w.extend(batch)
    except BaseException as exc:
        return exc
    return None


def _is_enospc(exc: BaseException | None) -> bool:
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _temp_folders(path: Path) -> list[str]:
    """Temp folders a writer of ``path`` may leave: ``.NAME.tmp-*`` beside it and, for an
    appender, ``..append.tmp-*`` inside it."""
    beside = [p.name for p in path.parent.glob(f".{path.name}.tmp-*")]
    inside = [p.name for p in path.glob("*.tmp-*")] if path.is_dir() else []
    return sorted(beside + inside)


def _check_error(exc: BaseException | None, path: Path) -> None:
    assert exc is not None, "writing 400 MB into a 50 MB filesystem raised nothing"
    assert _is_enospc(exc) or isinstance(exc, chute.ChuteError), repr(exc)
    assert isinstance(exc, chute.ChuteError), f"a bare {type(exc).__name__}: {exc}"
    assert isinstance(exc, OSError), f"{type(exc).__name__} should also be an OSError"
    assert str(path) in str(exc), f"the message does not name the destination {path}: {exc}"


# ---------------------------------------- disk full during Writer(append=True)


@pytest.mark.parametrize("rows", [True, False], ids=["rows", "batches"])
def test_append_enospc_raises_chute_error_naming_destination(small_fs: Path, rows: bool) -> None:
    path = _old(small_fs)
    _check_error(_fill(path, rows, append=True), path)


@pytest.mark.parametrize("rows", [True, False], ids=["rows", "batches"])
def test_append_enospc_removes_temp_folder(small_fs: Path, rows: bool) -> None:
    path = _old(small_fs)
    exc = _fill(path, rows, append=True)
    assert _is_enospc(exc), repr(exc)
    assert _temp_folders(path) == [], "the appender's temp folder stays (and the disk full)"


def test_append_enospc_releases_lock(small_fs: Path) -> None:
    """Another process's ``Writer(p, append=True)`` gets the lock (run with a timeout, so a
    regression fails instead of hanging the suite)."""
    path = _old(small_fs)
    exc = _fill(path, append=True)
    assert _is_enospc(exc), repr(exc)
    code = f"""
        import chute
        w = chute.Writer({str(path)!r}, append=True)
        w.abort()
        print("locked and released")
    """
    try:
        proc = run_python(code, timeout=15)
    except Exception as e:  # subprocess.TimeoutExpired
        pytest.fail(f"another process's Writer(append=True) still waits for the lock: {e}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "locked and released" in proc.stdout


@pytest.mark.parametrize("rows", [True, False], ids=["rows", "batches"])
def test_append_enospc_keeps_old_dataset(small_fs: Path, rows: bool) -> None:
    path = _old(small_fs)
    exc = _fill(path, rows, append=True)
    assert _is_enospc(exc), repr(exc)
    ds = chute.open(path)
    assert len(ds) == ROWS
    assert bool((ds[ROWS - 1]["x"] == 7).all())
    assert chute.verify(path, progress=False) > 0


@pytest.mark.parametrize("rows", [True, False], ids=["rows", "batches"])
def test_write_enospc_removes_staging_folder(small_fs: Path, rows: bool) -> None:
    """Without append: the ``.NAME.tmp-PID-*`` staging folder goes, and with it the space:
    a later write from this same (live) process fits."""
    _old(small_fs)
    path = small_fs / "new.chute"
    exc = _fill(path, rows)
    assert _is_enospc(exc), repr(exc)
    assert _temp_folders(path) == [], "the staging folder of a live process stays"
    assert not path.exists()
    chute.write(small_fs / "after.chute", {"x": np.ones((1000, WIDTH), np.float32)})  # 4 MB


# --------------------------------------- disk full while writing or converting


@pytest.mark.parametrize("rows", [True, False], ids=["rows", "batches"])
def test_write_enospc_raises_chute_error_naming_destination(small_fs: Path, rows: bool) -> None:
    _old(small_fs)
    path = small_fs / "new.chute"
    _check_error(_fill(path, rows), path)


def test_write_function_enospc_raises_chute_error(small_fs: Path) -> None:
    """``chute.write`` of arrays larger than the free space."""
    path = small_fs / "big.chute"
    try:
        chute.write(path, {"x": np.ones((15000, WIDTH), np.float32)})  # 60 MB
    except BaseException as exc:
        _check_error(exc, path)
    else:
        pytest.fail("writing 60 MB into a 50 MB filesystem raised nothing")
    assert _temp_folders(path) == []


def test_cli_convert_disk_full_one_line_no_traceback(small_fs: Path, tmp_path: Path) -> None:
    src = tmp_path / "src.npy"  # 64 MB of zeros, sparse on disk
    np.lib.format.open_memmap(src, "w+", np.float32, (16000, WIDTH)).flush()
    dst = small_fs / "dst.chute"
    proc = run_chute("convert", "-q", str(src), str(dst), timeout=120)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert str(dst) in lines[0] and "error" in lines[0], lines[0]
    assert _temp_folders(dst) == [] and not dst.exists()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
