"""A writer killed with SIGKILL at any point: ``path`` holds the complete previous dataset,
the complete new one, or nothing; never a partial dataset that ``open`` accepts. The next
write to the same path cleans what the dead writer left.

Kill points are chosen two ways: the child kills itself at the k-th executed line of chute's
writer code (``sys.settrace``), for random k over the whole write and for every line of
``commit``; and the parent kills a child at random times, as ``kill -9`` would.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import CodeType

import pytest
from _helpers import check_sample, mixed_samples
from _reliability import check_content, leftovers, load_manifest, make_dataset, record

import chute
from chute import format as fmt
from chute import manifest_file as manifest
from chute import npy_header
from chute.columns import values
from chute.writer import commit, field_files, schema_inference, writer

pytestmark = pytest.mark.slow  # the fault harness: real processes, signals, fuzzing

WRITER_CODE = {
    m.__file__
    for m in (writer, commit, field_files, schema_inference, values, manifest, npy_header)
}
COMMIT, COMMIT_APPEND = commit.commit.__code__, commit.commit_append.__code__
FORK = multiprocessing.get_context("fork")


def _traced(fn: Callable[[], object], kill_at: int | None, only: CodeType | None) -> int:
    """Run ``fn``; SIGKILL this process at the ``kill_at``-th line executed in chute's writer
    modules (counting only within the function whose code is ``only`` and what it calls,
    when given). Returns the lines counted."""
    count = 0

    def within(frame) -> bool:
        while frame is not None:
            if frame.f_code is only:
                return True
            frame = frame.f_back
        return False

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
            if count == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        return local

    def calls(frame, event, arg):
        if frame.f_code.co_filename in WRITER_CODE and (only is None or within(frame)):
            return local
        return None

    sys.settrace(calls)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


def _traced_write(path: Path, n: int, kill_at: int | None, only: CodeType | None) -> int:
    return _traced(lambda: make_dataset(path, n=n, part_size=3, overwrite=True), kill_at, only)


def _run_killed(path: Path, n: int, kill_at: int, only: CodeType | None) -> int:
    p = FORK.Process(target=_traced_write, args=(path, n, kill_at, only))
    p.start()
    p.join(60)
    assert p.exitcode is not None, "the writer hung"
    return p.exitcode


def _state(path: Path) -> str:
    """'absent', or 'n=K' for a complete, verified dataset of K samples. Anything that is
    there but does not open is a failure: a partial dataset."""
    if not path.exists():
        return "absent"
    chute.verify(path)
    with chute.open(path) as ds:
        check_content(ds)
        return f"n={len(ds)}"


def _check_cleaned(path: Path) -> None:
    """The next write succeeds and leaves nothing of the dead writers behind."""
    make_dataset(path, n=4, overwrite=True)
    assert leftovers(path) == [], leftovers(path)
    assert _state(path) == "n=4"


@pytest.mark.parametrize("previous", [None, 5], ids=["fresh", "overwrite"])
def test_sigkill_at_traced_points(tmp_path: Path, previous: int | None, record_property) -> None:
    path = tmp_path / "d.chute"
    dry = [tmp_path / "dry1.chute", tmp_path / "dry2.chute"]  # counting runs, same situation
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    swaps = commit.exchange(tmp_path / "a", tmp_path / "b")  # renameat2(RENAME_EXCHANGE)
    if previous is not None:
        for d in dry:
            make_dataset(d, n=previous)
    total = _traced_write(dry[0], 7, None, None)
    commit_lines = _traced_write(dry[1], 7, None, COMMIT)
    rng = random.Random(1234)
    points = [(k, None) for k in sorted(rng.sample(range(1, total + 1), 24))]
    points += [(k, COMMIT) for k in range(1, commit_lines + 1)]
    outcomes: Counter = Counter()
    for k, only in points:
        if previous is None:
            shutil.rmtree(path, ignore_errors=True)
        elif _state(path) != f"n={previous}":
            make_dataset(path, n=previous, overwrite=True)
        before = _state(path)
        code = _run_killed(path, 7, k, only)
        after = _state(path)
        assert after in (before, "n=7", "absent"), (k, only, before, after)
        if previous is not None and after == "absent":
            # only between the two renames of commit, where the folders cannot be swapped in
            # one step: the old dataset moved aside, not deleted
            assert only is COMMIT and not swaps, (k, before, after)
        outcomes[f"{'killed' if code == -signal.SIGKILL else 'finished'} -> {after}"] += 1
    _check_cleaned(path)
    record(
        record_property,
        "writer SIGKILL (traced points)",
        f"{'fresh path' if previous is None else 'overwrite of a 5-sample dataset'}: 24 random "
        f"lines of {total} executed, every one of the {commit_lines} lines of commit (and "
        "what it calls)",
        len(points),
        outcomes,
    )


def _append_three(path: Path) -> None:
    with chute.Writer(path, append=True) as w:
        for sample in mixed_samples(3):
            w.append(sample)


def _traced_append(path: Path, kill_at: int | None, only: CodeType | None) -> int:
    return _traced(lambda: _append_three(path), kill_at, only)


def _appended_state(path: Path) -> int:
    """Samples in the dataset, which must be 5 + 3k: the base and k complete appends."""
    chute.verify(path)
    with chute.open(path) as ds:
        n = len(ds)
        assert (n - 5) % 3 == 0, n
        for i, want in enumerate(mixed_samples(5) + mixed_samples(3) * ((n - 5) // 3)):
            check_sample(ds[i], want)
    return n


def _stray_files(path: Path) -> list[str]:
    """Entries of the dataset folder that its manifest does not account for."""
    known = {part["name"] for part in load_manifest(path)["parts"]} | {fmt.MANIFEST}
    return sorted(p.name for p in path.iterdir() if p.name not in known)


def test_sigkill_during_append(tmp_path: Path, record_property) -> None:
    """``Writer(path, append=True)`` killed at traced points: the dataset holds the samples
    before the append or after it, never part of it; the next append cleans up."""
    pristine = make_dataset(tmp_path / "pristine.chute", n=5, part_size=3)
    path = tmp_path / "d.chute"
    shutil.copytree(pristine, path)
    total = _traced_append(path, None, None)
    shutil.rmtree(path)
    shutil.copytree(pristine, path)
    commit_lines = _traced_append(path, None, COMMIT_APPEND)
    rng = random.Random(77)
    points = [(k, None) for k in sorted(rng.sample(range(1, total + 1), 16))]
    points += [(k, COMMIT_APPEND) for k in range(1, commit_lines + 1)]
    outcomes: Counter = Counter()
    for k, only in points:
        shutil.rmtree(path)
        shutil.copytree(pristine, path)
        p = FORK.Process(target=_traced_append, args=(path, k, only))
        p.start()
        p.join(60)
        assert p.exitcode == -signal.SIGKILL, "the appender was not killed, or hung"
        after = _appended_state(path)
        assert after in (5, 8), (k, only, after)
        outcomes["unchanged" if after == 5 else "appended"] += 1
        if only:  # the next append leaves nothing of the dead one behind
            with chute.Writer(path, append=True) as w:
                w.append(mixed_samples(3)[0])
            assert _stray_files(path) == [], (k, _stray_files(path))
    record(
        record_property,
        "appender SIGKILL (traced points)",
        f"Writer(append=True) of 3 samples to a 3-part dataset: 16 random lines of {total} "
        f"executed, every one of the {commit_lines} lines of commit_append (and what it "
        "calls)",
        len(points),
        outcomes,
    )


def _write_forever(path: Path) -> None:
    n = 5
    while True:
        make_dataset(path, n=n, part_size=3, overwrite=True)
        n = 5 + (n - 4) % 4  # 5, 6, 7, 8, 5, ...


def test_sigkill_at_random_times(tmp_path: Path, record_property) -> None:
    """A child rewrites the dataset in a loop; the parent kills it at random times and the
    path always holds one complete version (or none), across kills without cleanup."""
    path = tmp_path / "d.chute"
    rng = random.Random(99)
    outcomes: Counter = Counter()
    kills = 12
    for _ in range(kills):
        p = FORK.Process(target=_write_forever, args=(path,))
        p.start()
        time.sleep(rng.uniform(0.0, 0.4))
        p.kill()
        p.join(30)
        assert p.exitcode == -signal.SIGKILL
        state = _state(path)
        assert state in ("absent", "n=5", "n=6", "n=7", "n=8"), state
        outcomes[state] += 1
    _check_cleaned(path)
    record(
        record_property,
        "writer SIGKILL (random times)",
        "a child rewriting with overwrite=True in a loop, killed after 0-400 ms, repeatedly",
        kills,
        outcomes,
    )


FRESH_WRITER = textwrap.dedent(
    """
    import sys, numpy as np, chute
    print("ready", flush=True)
    n = 0
    while True:
        n += 1
        with chute.Writer(sys.argv[1], overwrite=True, metadata={"n": n}) as w:
            for i in range(2000):
                w.append({"x": np.full(64, n, np.float32), "t": "v" * (n % 7)})
    """
)


def test_sigkill_fresh_interpreter(tmp_path: Path, record_property) -> None:
    """The same from a separate interpreter: killed by the parent mid-stream."""
    path = tmp_path / "d.chute"
    rng = random.Random(5)
    outcomes: Counter = Counter()
    runs = 2
    for _ in range(runs):
        proc = subprocess.Popen(
            [sys.executable, "-c", FRESH_WRITER, str(path)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.2, 0.8))
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
        if path.exists():
            chute.verify(path)
            with chute.open(path) as ds:
                version = ds.metadata["n"]
                assert len(ds) == 2000
                assert (ds.gather(range(2000))["x"] == version).all()
                outcomes["complete"] += 1
        else:
            outcomes["absent"] += 1
    _check_cleaned(path)
    record(
        record_property,
        "writer SIGKILL (separate interpreter)",
        "python -c writer streaming 2000-sample versions, kill -9 after 0.2-0.8 s",
        runs,
        outcomes,
    )


def test_stale_staging_of_live_writer_is_kept(tmp_path: Path, record_property) -> None:
    """Cleaning only removes what dead writers left: a live writer's staging folder survives
    another writer's start, and both commit."""
    path = tmp_path / "d.chute"
    with chute.Writer(path, overwrite=True) as w1:
        w1.append({"x": 1.0})
        staging = leftovers(path)
        assert len(staging) == 1
        make_dataset(path, n=3, overwrite=True)  # another writer starts, cleans, commits
        assert staging[0] in leftovers(path)
    assert len(chute.open(path)) == 1 and leftovers(path) == []
    record(
        record_property,
        "concurrent writers",
        "a second writer commits while the first is writing the same path",
        1,
        "live staging kept; both commit; the last commit wins; nothing left over",
    )
