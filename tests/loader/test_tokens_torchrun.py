"""Token views under torchrun (2 ranks, gloo, CPU, real processes): windows, packed rows and
batch_tokens batches (Loader and chute.dataloader) split between the ranks, disjoint, in
lockstep, together the epoch."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import chute


@pytest.mark.slow
def test_two_ranks_under_torchrun(tmp_path):
    lengths = np.random.default_rng(7).integers(0, 50, 90)
    with chute.Writer(tmp_path / "d.chute", {"tokens": chute.Ragged("int64")}, part_size=20) as w:
        for d, n in enumerate(lengths):
            w.append({"tokens": np.arange(n) + 1000 * d})
    script = Path(__file__).with_name("_torchrun_tokens.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    done = subprocess.run(
        [*cmd, str(script), str(tmp_path / "d.chute"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    ds = chute.open(tmp_path / "d.chute")
    for name, view in (
        ("windows", chute.windows(ds, "tokens", 17)),
        ("pack", chute.pack(ds, "tokens", 32)),
    ):
        a, b = ranks[0][name], ranks[1][name]
        assert len(a) == len(b)  # equal steps (the last one padded by wrapping around)
        want = Counter(map(tuple, view.gather(np.arange(len(view)))["tokens"].tolist()))
        got = Counter(map(tuple, a + b))
        assert set(got) == set(want) and sum(got.values()) - sum(want.values()) < 2 * 3
    for name in ("batch_tokens", "dataloader"):
        a, b = ranks[0][name], ranks[1][name]
        assert a["steps"] == b["steps"]
        assert set(a["docs"]) | set(b["docs"]) == {d for d, n in enumerate(lengths) if n}
    assert ranks[0]["dataloader"] == ranks[0]["batch_tokens"]  # the same order
