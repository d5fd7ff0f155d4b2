"""``chute info`` and ``chute verify``: through main() and as real subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chute.cli import main


def flip_last_byte(file: Path) -> None:
    raw = bytearray(file.read_bytes())
    raw[-1] ^= 0xFF
    file.write_bytes(bytes(raw))


def run_cli(*args: str, module: bool = True) -> subprocess.CompletedProcess:
    """``python -m chute ARGS`` or, with ``module=False``, the ``chute`` console script."""
    if module:
        cmd = [sys.executable, "-m", "chute", *args]
    else:
        script = shutil.which("chute", path=os.path.dirname(sys.executable))
        assert script, "the `chute` console script is not installed next to this Python"
        cmd = [script, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_info(mixed_parts, capsys):
    path, _ = mixed_parts
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path}: 12 samples, 3 part(s)," in out and "on disk" in out
    lines = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:]}
    assert lines["x"] == ["tensor", "float32", "(2,", "3)"]
    assert lines["label"] == ["tensor", "int64", "()"]
    assert lines["tokens"] == ["ragged", "int32", "(?)"]
    assert lines["image"] == ["ragged", "uint8", "(?,", "?,", "3)"]
    assert lines["blob"] == ["bytes"] and lines["text"] == ["string"]
    assert "metadata: {'n': 12}" in out


def test_verify_ok_and_corrupt(mixed_parts, capsys):
    path, _ = mixed_parts
    assert main(["verify", "-q", str(path)]) == 0
    assert f"{path}: OK" in capsys.readouterr().out
    flip_last_byte(path / "part-00002" / "x.npy")
    assert main(["verify", "-q", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("chute verify: error:") and "checksum mismatch" in err
    assert str(path / "part-00002" / "x.npy") in err


@pytest.mark.parametrize("command", ["info", "verify"])
def test_errors_are_one_line_and_exit_1(tmp_path, mixed, capsys, command):
    path, _ = mixed
    assert main([command, str(tmp_path / "missing")]) == 1
    assert "no such dataset folder" in capsys.readouterr().err
    os.truncate(path / "tokens.values.npy", 3)
    assert main([command, str(path)]) == 1
    err = capsys.readouterr().err
    assert "tokens.values.npy" in err and "truncated" in err and "Traceback" not in err


def test_unknown_version(mixed, capsys):
    path, _ = mixed
    manifest = json.loads((path / "chute.json").read_text())
    manifest["version"] = 99
    (path / "chute.json").write_text(json.dumps(manifest))
    assert main(["info", str(path)]) == 1
    assert "format version 99 is not supported" in capsys.readouterr().err


def test_usage_errors():
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    with pytest.raises(SystemExit):
        main(["info"])


def test_subprocess_info_and_verify(mixed):
    path, _ = mixed
    proc = run_cli("info", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "12 samples" in proc.stdout and "image" in proc.stdout
    flip_last_byte(path / "label.npy")
    proc = run_cli("verify", "--quiet", str(path), module=False)
    assert proc.returncode == 1
    assert "checksum mismatch" in proc.stderr and "label.npy" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
