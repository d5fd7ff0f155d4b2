"""File descriptors: a mapped file holds none, so a dataset of many parts reads under a low
``ulimit -n``; a process out of descriptors gets an error naming the limit, never "corrupt".
Each case runs in a child process whose RLIMIT_NOFILE is lowered (real files, real limits)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
from _reliability import recorded

import chute

_row = recorded(
    {
        "test_many_parts_read_under_a_low_descriptor_limit": (
            "descriptors: many parts",
            "600 parts read one by one under ulimit -n 256",
            "every sample read; < 64 fds open (a FormatError 'corrupt' before)",
        ),
        "test_out_of_descriptors_names_the_limit": (
            "descriptors: none left",
            "every descriptor taken, then ds[i]",
            "DescriptorLimitError naming the limit, never 'corrupt'",
        ),
    }
)

CHILD = textwrap.dedent(
    """
    import json, os, resource, sys
    import numpy as np
    import chute

    path, limit, hog = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "hog"
    ds = chute.open(path)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    held = []
    if hog:  # use up every descriptor left
        try:
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
    try:
        total = sum(int(ds[i]["x"]) for i in range(len(ds)))
        fds = len(os.listdir("/proc/self/fd"))
        print(json.dumps({"ok": total, "fds": fds}))
    except Exception as exc:
        print(json.dumps({"error": type(exc).__name__, "chute": isinstance(exc, chute.ChuteError),
                          "message": str(exc)}))
    """
)


def run(path: Path, limit: int, hog: bool = False) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(limit), "hog" if hog else "-"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_many_parts_read_under_a_low_descriptor_limit(tmp_path: Path) -> None:
    n = 600
    path = chute.write(tmp_path / "d.chute", {"x": np.arange(n)}, part_size=1)
    got = run(path, 256)  # 600 maps: Python's mmap would hold 600 descriptors
    assert got.get("ok") == n * (n - 1) // 2, got
    assert got["fds"] < 64, got  # no descriptor kept per map


def test_out_of_descriptors_names_the_limit(tmp_path: Path) -> None:
    path = chute.write(tmp_path / "d.chute", {"x": np.arange(10)}, part_size=5)
    got = run(path, 200, hog=True)
    assert got.get("error") == "DescriptorLimitError" and got["chute"], got
    assert "may hold 200 open files" in got["message"] and "ulimit -n" in got["message"], got
    assert "corrupt" not in got["message"] and "write the dataset again" not in got["message"]
