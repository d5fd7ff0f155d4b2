"""chute bench's adapters for the libraries a user might pick instead (each skipped when its
package is missing), and the order-independent checksum of contenders that read in their own
order."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import chute
from chute.bench import CONTENDERS, Contender, Setup, run_bench, table

N = 300
LIMIT = CONTENDERS[0]  # the gather limit: the reference checksum


@pytest.fixture
def small(tmp_path: Path) -> Path:
    # every kind of fixed shape the adapters map: scalars, vectors, images; odd dtypes
    rng = np.random.default_rng(0)
    with chute.Writer(tmp_path / "small.chute") as w:
        for i in range(N):
            w.append(
                {
                    "image": rng.integers(0, 256, (8, 8, 3), dtype=np.uint8),
                    "label": np.int64(i % 10),
                    "vec": rng.random(4).astype(np.float16),
                    "flag": np.bool_(i % 3 == 0),
                }
            )
    return tmp_path / "small.chute"


def _contender(prefix: str) -> Contender:
    return next(c for c in CONTENDERS if c.name.startswith(prefix))


def _bench(small: Path, tmp_path: Path, c: Contender, workers: int):
    return run_bench(
        small,
        batch_size=64,
        workers=workers,
        work_dir=tmp_path,
        contenders=[LIMIT, c],
        log=lambda s: None,
    )


def test_hugging_face_datasets_reads_the_bench_order(small: Path, tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    report = _bench(small, tmp_path, _contender("HF datasets"), workers=1)
    limit, hf = report.results[:2]
    assert hf.status == "ok", hf.reason
    assert hf.samples == N and hf.batches == 5
    assert hf.checksum_ok is True and hf.checksum == limit.checksum


def test_webdataset_is_checked_as_a_set(small: Path, tmp_path: Path) -> None:
    pytest.importorskip("webdataset")
    report = _bench(small, tmp_path, _contender("WebDataset"), workers=2)
    wds = report.results[1]
    assert wds.status == "ok", wds.reason
    assert wds.samples == N and wds.checksum_ok is True
    assert "own order, as a set" in table(report)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("chute-bench-")] == []


def _own(setup: Setup, mangle: bool) -> Iterator[dict[str, np.ndarray]]:
    arrays = {n: chute.open(setup.copy)[:][n].numpy() for n in setup.fields}
    for k, idx in enumerate(reversed(setup.batches)):
        if mangle and k == 0:
            idx = np.r_[idx[:-1], idx[0]]  # one sample read twice, one never
        yield {n: a[idx] for n, a in arrays.items()}


@pytest.mark.slow  # runs contenders of the benchmark
def test_set_checksum_ignores_order_but_not_a_duplicate(small: Path, tmp_path: Path) -> None:
    reordered = Contender("reordered", "", None, lambda s: _own(s, False), own_order=True)
    duplicate = Contender("duplicate", "", None, lambda s: _own(s, True), own_order=True)
    report = run_bench(
        small,
        batch_size=64,
        workers=0,
        work_dir=tmp_path,
        contenders=[LIMIT, reordered, duplicate],
        log=lambda s: None,
    )
    _, good, bad = report.results[:3]
    assert good.checksum_ok is True and bad.checksum_ok is False
    assert bad.samples == N
    assert "MISMATCH (own order, as a set)" in table(report)


@pytest.mark.parametrize("prefix", ["HF datasets", "WebDataset"])
def test_missing_package_is_skipped_with_its_hint(prefix: str, small: Path, tmp_path: Path) -> None:
    c = replace(_contender(prefix), requires=("chute_no_such_module",))
    report = _bench(small, tmp_path, c, workers=0)
    row = report.results[1]
    assert row.status == "skipped" and _contender(prefix).install in row.reason
    assert row.reason.startswith("not installed: pip install ")
