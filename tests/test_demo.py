"""chute demo end to end at a tiny size: every step runs, the plot and the JSON are written."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

import chute
from chute.bench import CONTENDERS
from chute.cli import main
from chute.demo import SAMPLE_BYTES, run_demo, write_hdf5


@pytest.mark.slow  # ~10 s: a bench table and a short training run
def test_demo_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "demo"
    argv = ["demo", "--size", "2MB", "--out", str(out), "--train-seconds", "1", "--workers", "1"]
    assert main([*argv, "--bench-bytes", "0.5MB"]) == 0
    printed = capsys.readouterr().out
    for step in ("[0]", "[1]", "[2]", "[3]", "[4]", "[5]"):
        assert step in printed
    for c in CONTENDERS:
        assert c.name in printed
    assert f"plot: {out / 'bench.png'}" in printed

    summary = json.loads((out / "demo.json").read_text())
    assert summary["samples"] == int(2e6 // SAMPLE_BYTES)
    assert summary["train"]["steps"] > 0 and 0 <= summary["train"]["wait_fraction"] <= 1
    assert summary["open_ms"] > 0 and summary["first_batch_ms"] >= summary["open_ms"]
    bench = json.loads((out / "bench.json").read_text())
    assert all(r["checksum_ok"] for r in bench["results"] if r["status"] == "ok")
    assert (out / "bench.png").read_bytes()[:4] == b"\x89PNG"
    with chute.open(out / "cifar.chute") as ds:
        assert len(ds) == summary["samples"] and set(ds.schema) == {"image", "label"}


def test_generated_data_is_learnable_and_matches_hdf5(tmp_path: Path) -> None:
    path = write_hdf5(tmp_path / "c.h5", 3000, seed=1)
    with h5py.File(path, "r") as f:
        images, labels = f["images"][:], f["labels"][:]
    assert images.shape == (3000, 32, 32, 3) and images.dtype == np.uint8
    assert set(np.unique(labels)) == set(range(10))
    # each class has its own template: class means differ far more than the noise allows
    means = np.stack([images[labels == k].mean(axis=0) for k in range(10)])
    assert np.abs(means[0] - means[1]).mean() > 5


def test_too_small_a_size_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(chute.SchemaError, match="too small"):
        run_demo(1000, tmp_path)
