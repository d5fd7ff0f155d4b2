"""Install the declared minimum version of every dependency (torch aside) in a fresh venv and
run a smoke test there: the floors in pyproject.toml are true floors only if this passes.

    python3 scripts/check_min_versions.py [--venv DIR] [--keep]

Reads ``project.dependencies`` and every runtime extra that ``[all]`` names (not ``test`` or
``dev``, which are tools), pins each ``name>=X`` to ``name==X`` (the highest floor where two
extras name one package; one pin per environment marker; wheels only: a floor without
a wheel for this Python fails here, as it would for a user), installs them with torch 2.13.0
(the torch the tests use) and chute itself without its dependencies, then runs the smoke
test: every code block of README.md and docs/*.md but the frameworks' (``tests/test_docs.py``,
which converts from each source kind), the round trip and the converters' tests. Needs the
package index (a few minutes of downloads); it is not part of the test suite.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
TORCH = "torch==2.13.0"
TOOLS = ["pytest", "pytest-timeout", "hypothesis"]  # to run the smoke test, not chute's own
SMOKE = ["tests/test_docs.py::test_code_blocks_run", "tests/test_roundtrip.py"]
SMOKE += ["tests/test_convert.py", "tests/test_cache.py", "-m", "not slow"]
# docs/frameworks.md runs accelerate, Lightning and transformers: the user's, not chute's
SMOKE += ["--deselect", "tests/test_docs.py::test_code_blocks_run[docs/frameworks.md]"]
REQUIREMENT = re.compile(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*>=\s*([^,;\s]+)\s*(;.*)?$")


def minimums() -> list[str]:
    """``name[extras]==floor`` for every dependency of chute and its runtime extras."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = re.findall(r"chute\[([^\]]*)\]", " ".join(extras["all"]))[0].split(",")
    requirements = list(project["dependencies"])
    for extra in wanted:
        requirements += [r for r in extras[extra.strip()] if not r.startswith("chute[")]
    pins: dict[tuple[str, str], tuple[str, str]] = {}
    for requirement in requirements:
        m = REQUIREMENT.match(requirement.split("#")[0].strip())
        if m is None:
            raise SystemExit(f"pyproject.toml: {requirement!r} declares no floor (name>=X)")
        name, extra, floor, marker = m.groups()
        key = (name.lower(), (marker or "").strip())  # one floor per Python, by markers
        if name != "torch" and _release(floor) >= _release(pins.get(key, ("", "0"))[1]):
            pins[key] = (f"{name}{extra or ''}=={floor}{marker or ''}", floor)
    return sorted(pin for pin, _floor in pins.values())


def _release(version: str) -> tuple[int, ...]:
    """``"2.18.7"`` as ``(2, 18, 7)``, to compare floors."""
    return tuple(int(part) for part in re.findall(r"\d+", version))


def run(*cmd: str | Path) -> None:
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, help="the venv to create (default: a temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the venv afterwards")
    args = parser.parse_args()
    venv = args.venv or Path(tempfile.mkdtemp(prefix="chute-min-"))
    pins = minimums()
    print("minimum versions:", *pins, sep="\n  ")
    try:
        run(sys.executable, "-m", "venv", "--clear", venv)
        pip = [venv / "bin" / "python", "-m", "pip", "install", "-q"]
        run(*pip, "--only-binary=:all:", TORCH, *pins)
        run(*pip, *TOOLS)
        run(*pip, "--no-deps", ROOT)  # chute itself, nothing upgraded
        run(venv / "bin" / "python", "-m", "pip", "check")
        run(venv / "bin" / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *SMOKE)
    finally:
        if not args.keep:
            shutil.rmtree(venv, ignore_errors=True)
    print("the declared minimum versions pass the smoke test")
    return 0


if __name__ == "__main__":
    sys.exit(main())
