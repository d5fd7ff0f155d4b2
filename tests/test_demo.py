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
from chute.demo import SAMPLE_BYTES, cleanup_line, run_demo, write_hdf5


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
    # the last line says how much is left on disk, where, and how to delete it
    on_disk = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    assert printed.splitlines()[-1] == (
        f"the demo wrote {on_disk / 1e6:,.0f} MB to {out}/ (mostly cifar.h5 and cifar.chute); "
        f"delete it with: rm -r {out}"
    )


def test_cleanup_line_names_only_what_the_demo_wrote(tmp_path: Path) -> None:
    out = tmp_path / "my demo"
    (out / "d.chute").mkdir(parents=True)
    (out / "d.chute" / "x.npy").write_bytes(b"0" * 3_000_000)
    (out / "c.h5").write_bytes(b"0" * 1_000_000)
    (out / "mine.txt").write_bytes(b"0" * 5_000_000)  # the user's, in a folder reused
    written = [out / "c.h5", out / "d.chute"]
    start = f"the demo wrote 4 MB to {out}/ (mostly c.h5 and d.chute); delete it with: rm -r "
    assert cleanup_line(out, written, fresh=True) == start + f"'{out}'"  # quoted for the shell
    assert cleanup_line(out, written, fresh=False) == start + f"'{out}/c.h5' '{out}/d.chute'"


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
