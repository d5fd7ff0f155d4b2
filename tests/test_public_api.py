"""The names ``import chute`` offers: ``__all__`` resolves and shadows no builtin."""

from __future__ import annotations

import builtins
import subprocess
import sys

import pytest

import chute


def test_all_resolves_and_shadows_no_builtin() -> None:
    assert [name for name in chute.__all__ if not hasattr(chute, name)] == []
    assert set(chute.__all__) & set(dir(builtins)) == set()
    assert callable(chute.open) and "open" not in chute.__all__


@pytest.mark.slow  # a fresh interpreter
def test_star_import_keeps_the_builtin_open() -> None:
    script = "from chute import *\nassert open is __builtins__.open\nprint(Loader.__name__)\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Loader"
