"""File descriptors: a mapped file holds none, so a dataset of many parts reads under a low
``ulimit -n``; a process out of descriptors gets an error naming the limit, never "corrupt".
Each case runs in a child process whose RLIMIT_NOFILE is lowered (real files, real limits)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
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
        "test_out_of_maps_names_the_limit": (
            "maps: none left",
            "every map of vm.max_map_count taken (a 4 KiB file mapped until mmap fails), or "
            "ulimit -v just above the process, then ds[i] of an unread part",
            "MapLimitError naming vm.max_map_count, the sysctl and fewer files "
            "(was FormatError 'cannot be read ... write the dataset again')",
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


MAPS_CHILD = textwrap.dedent(
    """
    import json, os, resource, sys
    import chute
    from chute.reader.files import map_readonly

    path, how, page = sys.argv[1], sys.argv[2], sys.argv[3]
    ds = chute.open(path)
    ds[0]  # part 0 mapped; the others not yet
    held = []
    if how == "maps":  # a 4 KiB file mapped until no map is left (each one a map of its own)
        with open(page, "wb") as f:
            f.write(bytes(4096))
        fd = os.open(page, os.O_RDONLY)
        try:
            while True:
                held.append(map_readonly(fd, 4096))
        except OSError:
            pass
        os.close(fd)
    else:  # the address space limit just above what the process maps now
        with open("/proc/self/statm") as f:
            size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        resource.setrlimit(resource.RLIMIT_AS, (size + (16 << 20), hard))
    try:
        for i in range(len(ds)):
            ds[i]
        print(json.dumps({"ok": len(held)}))
    except Exception as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
    """
)


@pytest.mark.parametrize("how", ["maps", "address space"])
def test_out_of_maps_names_the_limit(tmp_path: Path, how: str) -> None:
    # 4 parts of 6.5 MB: some part after the first finds no map, or no address space, left
    path = chute.write(
        tmp_path / "d.chute", {"x": np.zeros((400, 1 << 14), np.float32)}, part_size=100
    )
    proc = subprocess.run(
        [sys.executable, "-c", MAPS_CHILD, str(path), how, str(tmp_path / "page")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got.get("error") == "MapLimitError", got
    message = got["message"]
    assert re.search(r"part-0000[1-3]/x\.npy cannot be memory-mapped", message), got
    assert "vm.max_map_count" in message and "sysctl -w vm.max_map_count=" in message, got
    assert "fields=" in message and "part_size=" in message, got
    assert "ulimit -v" in message and "the dataset is fine" in message, got
    assert "corrupt" not in message and "write the dataset again" not in message, got
