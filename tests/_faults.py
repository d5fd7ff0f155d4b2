"""Tools for tests that build a fault or a hostile input by hand: subprocess runs with a
memory cap, hand-made (sparse, oversized) datasets, a small real filesystem, and the fixture
that records each such test's case for docs/reliability.md.

Everything here uses chute's public API, real files and real processes only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import chute

GiB = 1 << 30


@pytest.fixture(autouse=True)
def recorded_case(request: pytest.FixtureRequest, record_property: Any) -> None:
    """Records the case a test guards, for docs/reliability.md (scripts/reliability_report.py):
    the test's name as words and its parameters. Autouse in each module that imports it."""
    node = request.node
    record_property("fault", node.originalname.removeprefix("test_").replace("_", " "))
    record_property("inputs", node.callspec.id if hasattr(node, "callspec") else "")
    record_property("cases", 1)
    record_property("outcome", "a clear ChuteError or the right data")


def run_python(
    code: str, *, timeout: float = 60, env: dict[str, str] | None = None, cwd: Any = None
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (this venv), output captured."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd,
    )


def run_chute(*args: str, timeout: float = 60, cwd: Any = None) -> subprocess.CompletedProcess[str]:
    """``python -m chute ARGS`` in a fresh interpreter, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "chute", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


MEMORY_CAP = """
import resource, sys, json, time
import chute, numpy as np, torch

def _vm_bytes():
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize")

_HARD = resource.getrlimit(resource.RLIMIT_AS)[1]

def cap(extra):
    # Address space (soft limit) capped at what the process maps now plus `extra` bytes: a
    # call that tries to allocate what the data cannot justify fails with MemoryError
    # instead of eating the machine.
    resource.setrlimit(resource.RLIMIT_AS, (_vm_bytes() + int(extra), _HARD))

def uncap():
    resource.setrlimit(resource.RLIMIT_AS, (_HARD, _HARD))

def outcome(fn, case=None):
    # Run fn(); print one JSON line: {"ok": repr} or {"error": class names, "message"}.
    t0 = time.perf_counter()
    try:
        got = fn()
    except BaseException as exc:
        names = [c.__name__ for c in type(exc).__mro__]
        res = {"error": names, "chute": isinstance(exc, chute.ChuteError),
               "message": str(exc)[:500], "s": time.perf_counter() - t0}
    else:
        res = {"ok": repr(got)[:200], "s": time.perf_counter() - t0}
    uncap()
    res["case"] = case
    print(json.dumps(res), flush=True)
"""


def capped(code: str, *, timeout: float = 60) -> dict[str, Any]:
    """Run ``MEMORY_CAP + code`` (which must call ``outcome``) and return its JSON line."""
    return capped_cases(code, timeout=timeout)[None]


def capped_cases(code: str, *, timeout: float = 60) -> dict[Any, dict[str, Any]]:
    """Run ``MEMORY_CAP + code``, which calls ``outcome(fn, case)`` once per case, in one
    interpreter (one start of torch for all): case -> its JSON line. A case the process never
    reported (it crashed) is missing, and its test fails on that; ``"_run"`` holds the exit
    code and the end of stderr."""
    proc = run_python(MEMORY_CAP + textwrap.dedent(code), timeout=timeout)
    lines = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no outcome (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}"
    out: dict[Any, dict[str, Any]] = {res.pop("case"): res for res in lines}
    out["_run"] = {"rc": proc.returncode, "stderr": proc.stderr[-3000:]}
    return out


def edit_manifest(path: Path, fn: Callable[[dict[str, Any]], None]) -> None:
    """Change ``path/chute.json`` in place with ``fn(obj)``."""
    file = path / "chute.json"
    obj = json.loads(file.read_text())
    fn(obj)
    file.write_text(json.dumps(obj))


def npy_header(dtype: Any, shape: tuple[int, ...]) -> bytes:
    """The .npy v1 header of an array of ``dtype`` and ``shape`` (C order)."""
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf,
        {
            "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
            "fortran_order": False,
            "shape": shape,
        },
    )
    return buf.getvalue()


def sparse_npy(file: Path, dtype: Any, shape: tuple[int, ...]) -> int:
    """Make ``file`` a .npy of ``shape`` whose data is a hole (no disk used); its size."""
    header = npy_header(dtype, shape)
    nbytes = len(header) + int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    with open(file, "wb") as f:
        f.write(header)
        f.truncate(nbytes)
    return nbytes


def sparse_tensor_dataset(path: Path, n: int) -> Path:
    """A dataset of ``n`` uint8 samples (field ``x``) held by a sparse file: a few KB on disk,
    ``n`` bytes as the reader sees it."""
    chute.write(path, {"x": np.zeros(4, np.uint8)})
    size = sparse_npy(path / "x.npy", "<u1", (n,))

    def fix(obj: dict[str, Any]) -> None:
        obj["num_samples"] = n
        obj["parts"][0]["num_samples"] = n
        obj["parts"][0]["files"]["x.npy"]["bytes"] = size

    edit_manifest(path, fix)
    return path


def sparse_bytes_dataset(path: Path, sample_bytes: int) -> Path:
    """A dataset of one Bytes sample (field ``b``) of ``sample_bytes`` bytes, held by a sparse
    values file."""
    chute.write(path, {"b": [b"abcd"]})
    vsize = sparse_npy(path / "b.values.npy", "<u1", (sample_bytes,))
    offsets = np.array([0, sample_bytes], "<i8")
    with open(path / "b.offsets.npy", "wb") as f:
        f.write(npy_header("<i8", (2,)))
        f.write(offsets.tobytes())
    osize = (path / "b.offsets.npy").stat().st_size

    def fix(obj: dict[str, Any]) -> None:
        files = obj["parts"][0]["files"]
        files["b.values.npy"]["bytes"] = vsize
        files["b.offsets.npy"]["bytes"] = osize

    edit_manifest(path, fix)
    return path


# ---------------------------------------------------------------------------- small filesystem


def mount_small_fs(where: Path, size_mb: int) -> Callable[[], None] | str:
    """Mount a real ``size_mb`` filesystem at ``where`` (tmpfs; else a loop-mounted ext4
    image). Returns the function that unmounts it, or why it could not be mounted."""
    where.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None:
        return "no mount command"
    tmpfs = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if tmpfs.returncode == 0:
        return lambda: _umount(where)
    image = where.with_suffix(".img")
    try:
        with open(image, "wb") as f:
            f.truncate(size_mb << 20)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
        subprocess.run(
            ["mount", "-o", "loop", str(image), str(where)], check=True, capture_output=True
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        image.unlink(missing_ok=True)
        return f"cannot mount a small filesystem: tmpfs: {tmpfs.stderr.strip()}; ext4 loop: {exc}"

    def undo() -> None:
        _umount(where)
        image.unlink(missing_ok=True)

    return undo


def _umount(where: Path) -> None:
    # Lazy: a writer that leaked a descriptor (disk full during an append) must not make the
    # unmount fail.
    subprocess.run(["umount", "-l", str(where)], capture_output=True)
