"""Every import of chute points down: the ``import`` statements of src/chute (at module level,
inside a function, which only defers a circle, or under ``TYPE_CHECKING``) form a graph
without a circle, in which no module imports one of a higher layer (:data:`LAYERS`, the order
ARCHITECTURE.md draws). The on-disk spec (``chute.format``) imports no torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import chute

ROOT = Path(chute.__file__).parent


def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (its file, whether it is a package's ``__init__``)."""
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (path, package)
    return out


def _targets(name: str, package: bool, node: ast.AST, known: set[str]) -> set[str]:
    """The chute modules an import statement of module ``name`` imports."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names} & known
    assert isinstance(node, ast.ImportFrom)
    here = name.split(".") if package else name.split(".")[:-1]
    base = here[: len(here) - node.level + 1] if node.level else []
    prefix = ".".join(base + ([node.module] if node.module else []))
    got = set()
    for a in node.names:  # `from pkg import mod` imports pkg.mod; `from mod import f`, mod
        sub = f"{prefix}.{a.name}" if prefix else a.name
        got.add(sub if sub in known else prefix)
    return got & known


def import_graph() -> dict[str, set[str]]:
    """Module -> the chute modules it imports."""
    mods = _modules()
    known = set(mods)
    graph = {}
    for name, (path, package) in mods.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _targets(name, package, node, known)
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


LAYERS = [
    ["errors", "_args", "_arrays", "_compat", "npy_header", "format"],
    ["_torch", "batch", "buffers", "device", "image"],
    ["columns"],
    ["kinds", "fields"],
    ["sniff", "manifest_file", "store"],
    ["order", "reader", "writer"],
    ["sources", "loader", "engines"],
    [
        "conversion",
        "cached_build",
        "transfer",
        "ray",
        "testing",
        "bench",
        "demo",
        "cli",
        "_cli_types",
        "",
    ],
    ["__main__"],
]
"""chute's layers, bottom first, by top-level module or package ("" is ``chute/__init__``): the
spec; torch, batch and image helpers; the array code on a field's files; the field kinds and
the manifest schema; the manifest file and storage; the stages; what feeds and drives them;
the entry points and the package's face; ``python -m chute``. A module imports its own layer
or lower ones only."""

RANK = {top: i for i, layer in enumerate(LAYERS) for top in layer}


def _top(module: str) -> str:
    """``chute.reader.mix`` -> ``reader``; ``chute`` -> ``""``."""
    return module.split(".")[1] if "." in module else ""


def upward(graph: dict[str, set[str]]) -> list[str]:
    """The imports from a module to one of a higher layer, as ``a -> b``."""
    return sorted(
        f"{a} -> {b}"
        for a, bs in graph.items()
        for b in bs
        if RANK.get(_top(a), -1) < RANK.get(_top(b), -1)
    )


def test_the_graph_sees_chutes_imports() -> None:
    graph = import_graph()
    assert "chute.columns.var_batch" in graph["chute.columns.image_values"]
    assert "chute.image.batch_decode" in graph["chute.loader.decode"]  # inside a function
    assert "chute.kinds" in graph["chute.writer.schema_inference"]  # `from .. import kinds`
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert upward({"chute.format.spec": {"chute.kinds.registry"}}) == [
        "chute.format.spec -> chute.kinds.registry"
    ]


def test_no_import_circle() -> None:
    assert cycles(import_graph()) == []


def test_every_module_has_a_layer() -> None:
    """A new top-level module or package takes its place in :data:`LAYERS` (and in
    ARCHITECTURE.md's list)."""
    assert {_top(m) for m in import_graph()} - set(RANK) == set()
    assert set(RANK) - {_top(m) for m in import_graph()} == set()


def test_every_import_points_down() -> None:
    assert upward(import_graph()) == []


def test_the_format_loads_no_torch() -> None:
    """The on-disk spec reads without torch (and ``import chute`` itself defers every stage)."""
    code = (
        "import sys, chute.format; print(sorted(m for m in sys.modules if m.startswith('torch')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
