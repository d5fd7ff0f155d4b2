"""Shared by the reliability tests: a standard dataset, hostile-file helpers, leak probes.

Every reliability test records what it tried with :func:`record` (pytest ``record_property``),
so ``scripts/reliability_report.py`` can tabulate fault, input class, number of cases and
result from the JUnit XML into ``docs/reliability.md``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _helpers import MIXED_SCHEMA, check_sample, mixed_samples
from hypothesis import HealthCheck, settings

import chute
from chute import format as fmt
from chute.reader.verify import file_checksum

N = 7  # samples in the standard dataset: small, odd, split unevenly into parts


def fuzz(*suppress: HealthCheck) -> settings:
    """Hypothesis settings of the fuzz tests: 100 examples, no deadline, no example database."""
    return settings(
        max_examples=100,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, *suppress],
        database=None,
    )


def leftovers(path: Path) -> list[str]:
    """Everything the writer may have left next to ``path`` (staging and old folders)."""
    lock = f".{path.name}.lock"  # the writers' lock file stays (chute.writer.commit.DatasetLock)
    return sorted(
        p.name
        for p in path.parent.iterdir()
        if p.name.startswith(f".{path.name}.") and p.name != lock
    )


def record(
    record_property: Callable[[str, Any], None],
    fault: str,
    inputs: str,
    cases: int,
    outcome: str | Counter = "",
) -> None:
    """Note a row of the reliability table: the fault tried, on what, how often, what happened."""
    if isinstance(outcome, Counter):
        outcome = ", ".join(f"{k} {v}" for k, v in sorted(outcome.items()))
    record_property("fault", fault)
    record_property("inputs", inputs)
    record_property("cases", cases)
    record_property("outcome", outcome)


def make_dataset(path: Path, n: int = N, part_size: int | None = None, **kw: Any) -> Path:
    """Write the shared mixed dataset of ``n`` samples (every field kind) at ``path``."""
    with chute.Writer(path, MIXED_SCHEMA, part_size=part_size, metadata={"n": n}, **kw) as w:
        for sample in mixed_samples(n):
            w.append(sample)
    return path


def check_content(ds: chute.Dataset) -> None:
    """The dataset holds exactly what :func:`make_dataset` wrote (its length tells which)."""
    assert ds.metadata == {"n": len(ds)}
    for i, want in enumerate(mixed_samples(len(ds))):
        check_sample(ds[i], want)


def read_everything(path: Path) -> None:
    """Open ``path`` and touch every sample every way a user can (raises what chute raises)."""
    with chute.open(path) as ds:
        n = len(ds)
        for i in range(min(n, 64)):
            ds[i]
        idx = np.arange(min(n, 64))
        ds.gather(idx)
        ds[0:n]  # slices within a part are views: no gather checks on this path
        ds[1:3]
        ds.gather(idx[::-1].copy())
        ds.empty_batch(2)
        chute.verify(path)


def outcome_of(fn: Callable[[], Any]) -> str:
    """``"ok"`` or the name of the chute error ``fn`` raised; anything else fails the test."""
    try:
        fn()
    except chute.ChuteError as exc:
        return type(exc).__name__
    return "ok"


def load_manifest(path: Path) -> dict:
    return json.loads((path / fmt.MANIFEST).read_text())


def save_manifest(path: Path, manifest: Any) -> None:
    (path / fmt.MANIFEST).write_text(json.dumps(manifest))


def reseal(path: Path) -> None:
    """Record the current size and checksum of every data file in the manifest, as a forger
    who edited the files would: only chute's own checks of the content can catch the edit."""
    manifest = load_manifest(path)
    for part in manifest["parts"]:
        for fn, info in part["files"].items():
            file = path / part["name"] / fn
            info["bytes"] = file.stat().st_size
            try:
                info[fmt.CHECKSUM] = file_checksum(file)
            except chute.FormatError:  # a header chute refuses before any checksum matters
                info[fmt.CHECKSUM] = "0"
    save_manifest(path, manifest)


def write_npy(file: Path, arr: np.ndarray) -> None:
    """A plain .npy file (what numpy writes), replacing ``file``."""
    file.unlink(missing_ok=True)
    np.save(file, arr, allow_pickle=False)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def mapped_regions() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def recorded(rows: dict[str, tuple[str, str, str]]) -> Any:
    """An autouse fixture recording each test's row from ``rows``: test function name ->
    (fault, input class, outcome), its parameters added to the input class; for modules
    outside tests/reliability whose rows docs/reliability.md shows."""
    import pytest

    @pytest.fixture(autouse=True)
    def _row(request: pytest.FixtureRequest, record_property: Callable[[str, Any], None]) -> None:
        fault, inputs, outcome = rows[request.node.originalname]
        callspec = getattr(request.node, "callspec", None)
        if callspec is not None:
            inputs += " [" + ", ".join(f"{k}={v!r}" for k, v in callspec.params.items()) + "]"
        record(record_property, fault, inputs, 1, outcome)

    return _row
