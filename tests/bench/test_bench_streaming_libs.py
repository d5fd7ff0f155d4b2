"""chute bench's LitData and MosaicML Streaming rows, end to end at a tiny size when the library is
installed (CI has neither: those tests skip there), and their install hint when it is not.

Both read in their own order, so each row is checked as a set of samples: its order-free digest
must equal the gather limit's (the same contender, hashed as a set), and both libraries must
leave nothing behind: no file in the temporary folder, no segment in /dev/shm.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _reliability import shm_entries

import chute
from chute.bench import CONTENDERS, BenchReport, Contender, Setup, run_bench, table
from chute.bench.contenders.contender import Batch

N = 300  # not a multiple of the batch (64) nor of the workers' share: the tails must come once
LIMIT = CONTENDERS[0]  # the gather limit
LIMIT_AS_SET = replace(LIMIT, name="gather limit, as a set", own_order=True)


@pytest.fixture
def small(tmp_path: Path) -> Path:
    # every shape the adapters map (scalars, vectors, images) and dtypes MDS has no column for
    # (bool, complex64: stored as their bytes)
    rng = np.random.default_rng(0)
    with chute.Writer(tmp_path / "small.chute") as w:
        for i in range(N):
            w.append(
                {
                    "image": rng.integers(0, 256, (8, 8, 3), dtype=np.uint8),
                    "label": np.int64(i),
                    "flag": np.bool_(i % 3 == 0),
                    "vec": rng.random(4).astype(np.float16),
                    "z": (rng.random(2) + 1j * i).astype(np.complex64),
                }
            )
    return tmp_path / "small.chute"


def _contender(name: str) -> Contender:
    return next(c for c in CONTENDERS if c.name == name)


def _typed(c: Contender) -> Contender:
    """``c``, checking that each batch is field -> array of the field's dtype and shape, batch
    axis first: the contract of every contender (the checksums see bytes only)."""

    def batches(setup: Setup) -> Iterator[Batch]:
        for b in c.open(setup):
            for name, f in setup.fields.items():
                assert str(b[name].dtype).removeprefix("torch.") == f.dtype, name
                assert tuple(b[name].shape[1:]) == f.shape, name
            yield b

    return replace(c, open=batches)


def _shm_left(before: set[str]) -> set[str]:
    """/dev/shm entries new since ``before`` that may be ours and stay for a second. Other jobs
    on the machine come and go there too: torch_<pid>_* segments name their process, and
    multiprocessing's named semaphores (sem.mp-*) are not shared memory."""
    me = str(os.getpid())
    left: set[str] | None = None
    for _ in range(10):
        new = {
            n
            for n in shm_entries() - before
            if not n.startswith("sem.") and (not n.startswith("torch_") or n.split("_")[1] == me)
        }
        left = new if left is None else left & new
        if not left:
            return set()
        time.sleep(0.1)
    return left


LIBRARIES = [("LitData", "litdata"), ("MosaicML Streaming", "streaming")]


@contextmanager
def _leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Asserts that the block leaves no file in the process's temporary folder (a fresh one, so
    that whatever a library puts there is seen, and only that) and no segment in /dev/shm."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    before = shm_entries()
    yield
    assert list(tmp.iterdir()) == []
    assert _shm_left(before) == set()


def _bench(small: Path, tmp_path: Path, c: Contender, workers: int, **kw: Any) -> BenchReport:
    work = tmp_path / "work"
    report = run_bench(
        small,
        batch_size=64,
        workers=workers,
        work_dir=work,
        contenders=[LIMIT, LIMIT_AS_SET, c],
        log=lambda s: None,
        **kw,
    )
    assert list(work.iterdir()) == []
    return report


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name, module", LIBRARIES)
def test_reads_every_sample_once_and_leaves_nothing(
    name: str,
    module: str,
    workers: int,
    small: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip(module)
    with _leaves_nothing(tmp_path, monkeypatch):
        report = _bench(small, tmp_path, _typed(_contender(name)), workers)
    limit, limit_set, row = report.results
    assert row.status == "ok", row.reason
    assert row.samples == N and not row.stopped and row.extra["order"] == "own"
    assert row.checksum_ok is True and limit.checksum_ok is True
    assert row.checksum == limit_set.checksum != limit.checksum  # the set digest, not the order
    assert "ok (own order, as a set)" in table(report)


@pytest.mark.parametrize("name, module", LIBRARIES)
def test_stopped_at_the_time_limit_leaves_nothing(
    name: str, module: str, small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip(module)
    with _leaves_nothing(tmp_path, monkeypatch):  # workers still running when it stops
        row = _bench(small, tmp_path, _contender(name), 2, time_limit=1e-9).results[2]
    assert row.status == "ok" and row.stopped and row.batches == 2, row.reason
    assert row.checksum_ok is None  # part of an epoch in its own order: nothing to compare


@pytest.mark.parametrize(
    "name, module, hint",
    [
        ("LitData", "litdata", "pip install litdata"),
        ("MosaicML Streaming", "streaming", "pip install mosaicml-streaming"),
    ],
)
def test_missing_library_is_skipped_with_its_pip_line(
    name: str, module: str, hint: str, small: Path, tmp_path: Path
) -> None:
    c = _contender(name)
    assert c.requires == (module,) and c.install == hint
    if importlib.util.find_spec(module) is not None:  # installed here: make it missing
        c = replace(c, requires=("chute_no_such_module",))
    report = run_bench(
        small, workers=0, work_dir=tmp_path, contenders=[LIMIT, c], log=lambda s: None
    )
    row = report.results[1]
    assert row.status == "skipped" and row.reason == f"not installed: {hint}"
    assert hint in table(report)
