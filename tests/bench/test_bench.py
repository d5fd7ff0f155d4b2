"""chute bench end to end on tiny real data: every contender runs, checksums agree, JSON and PNG."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import chute
from chute.bench import CONTENDERS, Contender, Setup, run_bench, table
from chute.bench.measure import BatchHash, TreeMemory, evict
from chute.cli import main
from chute.cli import size as parse_size

N = 300


@pytest.fixture
def small(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    samples = [
        {
            "image": rng.integers(0, 256, (8, 8, 3), dtype=np.uint8),
            "label": np.int64(i % 10),
            "tokens": np.arange(i % 5, dtype=np.int32),  # ragged: not benchmarked, noted
        }
        for i in range(N)
    ]
    with chute.Writer(tmp_path / "small.chute") as w:
        for s in samples:
            w.append(s)
    return tmp_path / "small.chute"


def _by_name(report_json: dict) -> dict[str, dict]:
    return {r["name"]: r for r in report_json["results"]}


@pytest.mark.slow  # ~8 s: every contender, DataLoader workers included
def test_cli_end_to_end(small: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    argv = ["bench", str(small), "--batch-size", "64", "--workers", "1"]
    rc = main([*argv, "--json", str(out_json), "--plot", str(out_png), "--work-dir", str(tmp_path)])
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    for name in [c.name for c in CONTENDERS]:
        assert name in printed.out
    assert "'tokens' is ragged: not benchmarked" in printed.err

    report = json.loads(out_json.read_text())
    assert report["dataset"]["samples"] == N
    assert list(report["dataset"]["fields"]) == ["image", "label"]
    rows = _by_name(report)
    checksums = set()
    for c in CONTENDERS:
        r = rows[c.name]
        if any(importlib.util.find_spec(m) is None for m in c.requires):
            assert r["status"] == "skipped" and c.install in r["reason"], r
            continue
        assert r["status"] == "ok", r
        assert r["samples"] == N and r["batches"] == 5 and not r["stopped"]
        assert r["checksum_ok"] is True
        assert r["first_batch_s"] > 0 and r["samples_per_s"] > 0 and r["peak_pss_mb"] is not None
        if not c.own_order:  # own-order rows carry an order-free digest (test_bench_adapters)
            checksums.add(r["checksum"])
    assert len(checksums) == 1
    assert rows["chute Loader"]["vs_chute"] == pytest.approx(1.0)
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("chute-bench-")] == []


def _reversed(setup: Setup) -> Iterator[dict[str, np.ndarray]]:
    # reads every sample exactly once, but in another order: the checksum must say so
    arrays = {n: chute.open(setup.copy)[:][n].numpy() for n in setup.fields}
    for idx in reversed(setup.batches):
        yield {n: a[idx] for n, a in arrays.items()}


@pytest.mark.slow  # runs contenders of the benchmark
def test_checksum_catches_another_order_and_missing_modules(small: Path, tmp_path: Path) -> None:
    wrong = Contender("wrong order", "reversed batches", None, _reversed)
    missing = Contender("needs xyz", "", None, _reversed, ("chute_no_such_module",), "pip xyz")
    report = run_bench(
        small,
        batch_size=64,
        workers=0,
        work_dir=tmp_path,
        contenders=[*CONTENDERS[:2], wrong, missing],
        log=lambda s: None,
    )
    ceiling, loader, bad, skipped = report.results[:4]
    assert ceiling.checksum_ok and loader.checksum_ok
    assert bad.status == "ok" and bad.samples == N and bad.checksum_ok is False
    assert skipped.status == "skipped" and "pip xyz" in skipped.reason
    text = table(report)
    assert "MISMATCH" in text and "pip xyz" in text


def test_time_limit_checks_the_prefix(small: Path, tmp_path: Path) -> None:
    report = run_bench(
        small,
        batch_size=16,
        workers=1,
        time_limit=1e-9,  # stop after the second batch
        work_dir=tmp_path,
        contenders=CONTENDERS[:2],
        log=lambda s: None,
    )
    for r in report.results[:2]:
        assert r.stopped and r.batches == 2 and r.samples == 32
        assert r.checksum_ok is True
    assert "read" in table(report)


def test_a_failing_contender_is_reported_not_raised(small: Path, tmp_path: Path) -> None:
    def broken(setup: Setup) -> Iterator[dict]:
        raise RuntimeError("disk on fire")

    report = run_bench(
        small,
        workers=0,
        work_dir=tmp_path,
        contenders=[CONTENDERS[0], replace(CONTENDERS[0], name="broken", open=broken)],
        log=lambda s: None,
    )
    assert report.results[1].status == "failed"
    assert "disk on fire" in report.results[1].reason


@pytest.mark.slow  # runs contenders of the benchmark
def test_source_other_than_chute_is_converted(tmp_path: Path) -> None:
    src = tmp_path / "x.npy"
    np.save(src, np.arange(200 * 4, dtype=np.float32).reshape(200, 4))
    report = run_bench(
        src,
        max_bytes=100 * 16,
        workers=0,
        work_dir=tmp_path,
        contenders=CONTENDERS[:2],
        log=lambda s: None,
    )
    assert report.dataset["samples"] == 100 and report.dataset["source_samples"] == 200
    assert all(r.checksum_ok for r in report.results[:2])


@pytest.mark.slow  # ~9 s: every contender
def test_bfloat16_and_bool_fields(tmp_path: Path) -> None:
    # The sample copy keeps the dtypes; every store gets bfloat16 as its 16 bits.
    x = torch.randn(64, 3).to(torch.bfloat16)
    chute.write(tmp_path / "b.chute", {"x": x, "m": np.arange(64) % 3 == 0})
    report = run_bench(
        tmp_path / "b.chute",
        batch_size=8,
        workers=0,
        work_dir=tmp_path,
        contenders=CONTENDERS,
        log=lambda s: None,
    )
    measured = [r for r in report.results if r.status == "ok"]
    assert len(measured) >= 5 and all(r.checksum_ok for r in measured)


def test_batch_hash_is_bytes_in_order() -> None:
    x = torch.arange(12, dtype=torch.bfloat16).reshape(3, 4)
    a, b, c = BatchHash(["x"]), BatchHash(["x"]), BatchHash(["x"])
    a.update({"x": x})
    b.update({"x": x.view(torch.int16).numpy()})
    c.update({"x": x.flip(0)})
    assert a.hexdigest() == b.hexdigest() != c.hexdigest()
    assert a.samples == 3 and len(a.prefix) == 1


def test_tree_memory_sees_an_allocation() -> None:
    mem = TreeMemory()
    mem.start()
    block = np.ones(64 << 20, np.uint8)  # touched: resident
    mem.record()
    mem.stop()
    assert mem.peak - mem.baseline > 48 << 20
    assert mem.peak_anon - mem.baseline_anon > 48 << 20
    del block


def test_evict_and_sizes(tmp_path: Path) -> None:
    f = tmp_path / "f.bin"
    f.write_bytes(b"x" * 4096)
    evict([f])  # no root needed
    assert f.read_bytes() == b"x" * 4096
    assert parse_size("2e9") == 2e9 and parse_size("500MB") == 500e6
    assert parse_size("64MiB") == 64 * 2**20
