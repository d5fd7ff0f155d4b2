"""The tree stays `ruff` clean and `mypy src/chute` clean: both are part of the test command CI
runs, so a change that breaks either fails CI."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    path = shutil.which(name) or str(Path(sys.executable).with_name(name))
    if not Path(path).exists():
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]')")
    return path


@pytest.mark.parametrize("args", [["check", "--quiet", "."], ["format", "--check", "--quiet", "."]])
def test_ruff_is_clean(args):
    result = subprocess.run([_tool("ruff"), *args], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_mypy_is_clean():
    result = subprocess.run(
        [_tool("mypy"), "src/chute"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
