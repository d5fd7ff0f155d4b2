"""The names ``import chute`` offers: ``__all__`` resolves and shadows no builtin; each is
imported on first use, from the module type checkers see."""

from __future__ import annotations

import ast
import builtins
import subprocess
import sys
from pathlib import Path

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


def test_each_lazy_name_comes_from_the_module_type_checkers_see() -> None:
    tree = ast.parse(Path(chute.__file__).read_text())
    typed = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom) and imp.module:
                    typed |= {a.asname or a.name: imp.module for a in imp.names}
    assert typed == chute._WHERE


@pytest.mark.slow  # a fresh interpreter
def test_import_chute_imports_no_stage_until_a_name_is_used() -> None:
    script = (
        "import sys, chute\n"
        "print(sorted(m for m in sys.modules if m.startswith(('chute.', 'torch'))))\n"
        "chute.Loader\n"
        "print('chute.loader.loader' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["['chute.errors']", "True"]
