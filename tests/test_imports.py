"""No import circle inside chute: every ``import`` of src/chute (at module level or inside a
function, which only defers the circle) forms a graph without cycles, but for one documented
pattern: a field kind (``chute/format/``) delegates its reading and writing to the reader and
writer stages with imports inside its methods (``docs/field_kinds.md``), so that a kind's
behaviour has one home while the stages keep their code."""

from __future__ import annotations

import ast
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


def _deferred(tree: ast.AST) -> set[int]:
    """ids of the import statements of ``tree`` inside a function or ``if TYPE_CHECKING:``."""
    inside = set()
    for block in ast.walk(tree):
        typing_only = isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        if typing_only or isinstance(block, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside |= {
                id(n) for n in ast.walk(block) if isinstance(n, (ast.Import, ast.ImportFrom))
            }
    return inside


def import_graph(kinds_deferred: bool = True) -> dict[str, set[str]]:
    """Module -> the chute modules it imports; ``kinds_deferred=False`` leaves out the
    imports inside the methods of ``chute.format``'s kinds (the pattern above)."""
    mods = _modules()
    known = set(mods)
    graph = {}
    for name, (path, package) in mods.items():
        edges: set[str] = set()
        tree = ast.parse(path.read_text())
        skip = set() if kinds_deferred or not name.startswith("chute.format.") else _deferred(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skip:
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


def test_the_graph_sees_chutes_imports() -> None:
    graph = import_graph()
    assert "chute.writer.var_batch" in graph["chute.writer.images"]
    assert "chute.image.decode" in graph["chute.loader.decode"]  # inside a function
    assert "chute.format" in graph["chute.writer.values"]  # `from .. import format`
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle() -> None:
    assert cycles(import_graph(kinds_deferred=False)) == []


def test_only_the_kinds_defer_imports_into_the_stages() -> None:
    """The one circle of the full graph runs through the kinds' deferred imports."""
    full = import_graph()
    (circle,) = cycles(full) or [[]]
    assert not circle or any(m.startswith("chute.format.") for m in circle)
