"""Docs that cannot rot: every object and repo file that a docstring (in src/chute/, tests/,
benchmarks/, scripts/, examples/) or a doc (README.md, ARCHITECTURE.md, CONTRIBUTING.md,
CHANGELOG.md, docs/*.md) names exists, every Markdown link resolves, and every ``python``
code block of README.md and docs/*.md runs.

What counts as a reference:

- a Sphinx role, ``:mod:`` / ``:class:`` / ``:func:`` / ``:meth:`` / ``:attr:``, resolved as
  an absolute name, then relative to the module it is written in, then under ``chute``;
- a dotted name that starts with ``chute.`` inside inline code (```chute.Loader``,
  ```` ``chute.order.plan`` ````), resolved by import and attribute access;
- a repo path: a name with a ``/`` that ends in a file extension or names a top folder of the
  repository (``docs/remote.md``, ``tests/loader/``, ``chute/loader/threads.py``,
  ``columns/gather.py``), resolved from the repository root, ``src/`` or ``src/chute/``, and a
  top-level Markdown file in capitals (README.md).

A code block preceded by ``<!-- test: skip (why) -->`` is not run (it needs CUDA, a bucket
or a cluster); keep those few. The blocks of one doc run in order, in one namespace, in a
fresh folder, with the small inputs they name made by ``tests/_doc_inputs.py``.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _doc_inputs import INPUTS

import chute

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "chute"
DOCS = sorted(
    [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    + [p for p in (ROOT / "ARCHITECTURE.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md")]
)

ROLE = re.compile(r":(mod|class|func|meth|attr):`~?([\w.]+)(?:\(\))?`")
CODE_SPAN = re.compile(r"``(.+?)``|`([^`\n]+)`")
DOTTED = re.compile(r"(?<![\w./-])chute(?:\.[A-Za-z_]\w*)+")
TOP = ("src", "docs", "tests", "benchmarks", "examples", "scripts", ".ci", "chute")
PATH = re.compile(
    r"(?<![\w./:-])((?:\.ci|[A-Za-z_][\w-]*)(?:/[\w.*-]+)+/?)"  # a/b/c.py, tests/x/test_*.py
    r"|(?<![\w./-])([A-Z][A-Z_]+\.md)\b"  # README.md, ARCHITECTURE.md
)
# file names that are the format's or the user's, not the repository's
NOT_REPO = re.compile(r"\.(chute|json|npy|npz|h5|zst|zarr|jpg|jpeg|png|txt|img)$|^part-")
DATA_FILES = {"chute.json", "chute.json.tmp"}


def _docstrings() -> Iterator[tuple[str, list[str], str]]:
    """(file relative to the root, the scopes a name in it may be relative to, text) of every
    docstring of the package (a method's scopes are its class and its module), the tests, the
    benchmarks, the scripts and the examples."""
    others = [ROOT / top for top in ("tests", "benchmarks", "scripts", "examples")]
    for file in sorted(SRC.rglob("*.py")) + sorted(f for top in others for f in top.rglob("*.py")):
        rel = file.relative_to(ROOT).as_posix()
        if file.is_relative_to(SRC):
            module = ".".join(file.relative_to(SRC.parent).with_suffix("").parts)
            module = module.removesuffix(".__init__")
            package = module if file.name == "__init__.py" else module.rsplit(".", 1)[0]
        else:  # not importable: a role names something of the file itself, or an absolute name
            module = package = "chute"
            LOCAL[rel] = _top_level_names(file)

        def walk(
            node: ast.AST, scopes: list[str], rel: str = rel
        ) -> Iterator[tuple[str, list[str], str]]:
            if isinstance(node, ast.ClassDef):
                scopes = [f"{scopes[-2]}.{node.name}", *scopes]  # the class, then its module
            kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
            if isinstance(node, kinds) and (doc := ast.get_docstring(node, clean=False)):
                yield rel, scopes, doc
            for child in ast.iter_child_nodes(node):
                yield from walk(child, scopes)

        yield from walk(_parse(file), [module, package])


@functools.cache
def _parse(file: Path) -> ast.Module:
    return ast.parse(file.read_text())


LOCAL: dict[str, set[str]] = {}  # file -> its top-level names, for the files outside the package


def _top_level_names(source: Path | ast.ClassDef) -> set[str]:
    """The names a module (or a class) defines or imports at its top level."""
    body = source.body if isinstance(source, ast.ClassDef) else _parse(source).body
    names = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                names.update(ast.literal_eval(node.value))  # promised, maybe made lazily
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _texts() -> Iterator[tuple[str, list[str], str]]:
    """(where, scopes for relative names, text) of every docstring and doc."""
    yield from _docstrings()
    for doc in DOCS:
        yield doc.relative_to(ROOT).as_posix(), [], doc.read_text()


def _resolve(name: str, scopes: list[str] = ()) -> bool:  # type: ignore[assignment]
    """Whether ``name`` imports (as a module, or an attribute of one), absolutely, relative to
    one of ``scopes`` (a class, a module, a package; a leading dot: relative to the package), or
    under ``chute``."""
    if name.startswith("."):
        return any(_resolve(importlib.util.resolve_name(name, scope)) for scope in scopes[-1:])
    for full in [name, *(f"{scope}.{name}" for scope in scopes), f"chute.{name}"]:
        parts = full.split(".")
        if _defined_in_source(parts):
            return True
        for cut in range(len(parts), 0, -1):
            try:
                obj: Any = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:]:
                if not _has(obj, attr):
                    break
                obj = getattr(obj, attr, None)
            else:
                return True
            break
    return False


def _defined_in_source(parts: list[str]) -> bool:
    """Whether ``parts`` names a module of the package, a top-level name of one, or a function or
    assignment in one of its top-level classes, read from the source: importing some modules
    would start heavy dependencies (Ray). False means "import it and see"."""
    for cut in range(len(parts), 0, -1):
        base = SRC.parent.joinpath(*parts[:cut])
        file = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if parts[0] == "chute" and file.is_file():
            break
    else:
        return False
    rest = parts[cut:]
    if len(rest) < 2:
        return not rest or rest[0] in _top_level_names(file)
    for node in _parse(file).body:
        if isinstance(node, ast.ClassDef) and node.name == rest[0] and len(rest) == 2:
            return rest[1] in _top_level_names(node)
    return False


def _has(obj: Any, attr: str) -> bool:
    """``obj.attr`` exists, or ``obj`` is a class whose instances get ``attr`` (annotated, or
    set as ``self.attr`` in its source)."""
    if hasattr(obj, attr):
        return True
    if not isinstance(obj, type):
        return False
    for cls in obj.__mro__:
        if attr in getattr(cls, "__annotations__", {}):
            return True
        try:
            if re.search(rf"\bself\.{attr}\s*[:=]", inspect.getsource(cls)):
                return True
        except (OSError, TypeError):
            continue
    return False


def _path_exists(ref: str) -> bool:
    """Whether ``ref`` (a glob allowed) names something under the root, src/ or src/chute/."""
    ref = ref.rstrip("/")
    return any(any(base.glob(ref)) for base in (ROOT, ROOT / "src", SRC))


def _code_spans(text: str) -> Iterator[str]:
    for m in CODE_SPAN.finditer(text):
        yield m.group(1) or m.group(2)


def _dead_references() -> list[str]:
    dead = []
    for where, scopes, text in _texts():
        for kind, name in ROLE.findall(text):
            if name.split(".")[0] not in LOCAL.get(where, ()) and not _resolve(name, scopes):
                dead.append(f"{where}: :{kind}:`{name}`")
        for span in _code_spans(text):
            for name in DOTTED.findall(span):
                if name not in DATA_FILES and not _resolve(name):
                    dead.append(f"{where}: `{name}`")
        for m in PATH.finditer(text):
            ref = (m.group(1) or m.group(2)).rstrip(".")  # a path that ends a sentence
            if m.group(1):
                first, last = ref.split("/", 1)[0], ref.rstrip("/").rsplit("/", 1)[-1]
                if not (first in TOP or (SRC / first).is_dir()) or NOT_REPO.search(last):
                    continue  # not a path of this repository, or a data file's name
            if not _path_exists(ref):
                dead.append(f"{where}: {ref}")
    return dead


def test_every_reference_resolves() -> None:
    dead = _dead_references()
    assert not dead, f"{len(dead)} references to nothing:\n" + "\n".join(dead)


def test_the_reference_check_finds_dead_ones() -> None:
    """The checks above can fail: a made-up object, module path and file are each caught."""
    assert not _resolve("chute.no_such_thing")
    assert not _resolve("Gone", ["chute.loader.loader"])
    assert _resolve("Loader", ["chute.loader.loader"]) and _resolve("chute.Loader.state_dict")
    assert _resolve(".threads", ["chute.loader.loader", "chute.loader"])
    assert not _path_exists("chute/no_such_module.py") and _path_exists("chute/loader/threads.py")
    found = [m.group(1) or m.group(2) for m in PATH.finditer("``reader/gone.py``, GONE.md")]
    assert found == ["reader/gone.py", "GONE.md"]


# ---------------------------------------------------------------------------------- links

REPO_URL = re.compile(r"https://github\.com/chute-dev/chute/(?:blob|tree)/main/")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _link_targets(doc: Path) -> Iterator[tuple[str, Path | None]]:
    """(link, the file of this repository it names, or None for another site) of each
    Markdown link of ``doc``: relative to the doc's folder, or a URL of the repository's
    main branch (the README's links are absolute: it is the package index's page too)."""
    for target in LINK.findall(doc.read_text()):
        path = target.split("#", 1)[0]
        if REPO_URL.match(path):
            yield target, ROOT / REPO_URL.sub("", path, count=1)
        elif path and "://" not in path and not path.startswith("mailto:"):
            yield target, doc.parent / path
        else:
            yield target, None


def test_every_link_resolves() -> None:
    dead = [
        f"{doc.relative_to(ROOT)}: {target}"
        for doc in DOCS
        for target, file in _link_targets(doc)
        if file is not None and not file.exists()
    ]
    assert not dead, f"{len(dead)} links to nothing:\n" + "\n".join(dead)


def test_readme_links_work_on_a_package_index() -> None:
    """The README is the long description on the package index, where a relative link
    leads nowhere: its links into the repository are URLs of the main branch."""
    readme = ROOT / "README.md"
    relative = [t for t, file in _link_targets(readme) if file and not REPO_URL.match(t)]
    assert relative == []
    assert any(file for _, file in _link_targets(readme))


# ------------------------------------------------------------------------- the code blocks

SKIP = re.compile(r"<!--\s*test:\s*skip\b(.*?)-->")
REASON = re.compile(r"^\s*\((.+)\)\s*$")
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _code_blocks(doc: Path) -> list[tuple[int, str, str | None]]:
    """(line, code, why it is skipped or None) of each ```python block of ``doc``."""
    text = doc.read_text()
    out = []
    for m in BLOCK.finditer(text):
        before = text[: m.start()].rstrip().rsplit("\n", 1)[-1]
        skip = SKIP.search(before)
        why = None
        if skip:
            reason = REASON.match(skip.group(1))
            assert reason, f"{doc.name}: a skip marker says why: <!-- test: skip (why) -->"
            why = reason.group(1)
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1), why))
    return out


# the docs with a block to run
RUN = [doc for doc in DOCS if any(why is None for *_, why in _code_blocks(doc))]


@pytest.mark.parametrize("doc", RUN, ids=[doc.relative_to(ROOT).as_posix() for doc in RUN])
def test_code_blocks_run(doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The doc's ```python blocks run in order, in one namespace, in a fresh folder holding
    the small inputs they name (``tests/_doc_inputs.py``); a block after
    ``<!-- test: skip (why) -->`` (a bucket, a cluster, CUDA) is not run."""
    name = doc.relative_to(ROOT).as_posix()
    blocks = _code_blocks(doc)
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": f"doc:{name}", "chute": chute, "np": np}
    namespace.update(INPUTS.get(name, lambda folder: {})(tmp_path))
    for line, code, skipped in blocks:
        if skipped:
            continue
        try:
            exec(compile(code, f"{name}:{line}", "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"{name} line {line}: the block raised {exc!r}") from exc


def test_skipped_blocks_are_few() -> None:
    skipped = [
        f"{doc.relative_to(ROOT)}:{line} ({why})"
        for doc in DOCS
        for line, _, why in _code_blocks(doc)
        if why
    ]
    assert len(skipped) <= 10, "run more doc blocks; skipped:\n" + "\n".join(skipped)


def test_a_skip_marker_says_why(tmp_path: Path) -> None:
    doc = tmp_path / "d.md"
    doc.write_text("<!-- test: skip (needs a bucket) -->\n```python\nx\n```\n\n```python\ny\n```\n")
    assert _code_blocks(doc) == [(2, "x\n", "needs a bucket"), (6, "y\n", None)]
    doc.write_text("<!-- test: skip -->\n```python\nx\n```\n")
    with pytest.raises(AssertionError, match="says why"):
        _code_blocks(doc)
