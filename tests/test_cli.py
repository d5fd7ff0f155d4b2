"""The ``chute`` command line: ``info``, ``verify``, ``convert``, ``upload``, ``download`` and
``bench``, through main() and as real subprocesses."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import chute
from chute.bench import CONTENDERS
from chute.cli import BENCH_CONTENDERS, build_parser, main


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


@pytest.mark.slow  # fresh interpreters
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


def test_version_and_plain_help(capsys):
    import chute

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out == f"chute {chute.__version__}\n"
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "data loading for PyTorch" in out and "convert" in out and "--version" in out
    assert "``" not in out  # plain text, no reStructuredText markup


def _sources(tmp_path: Path) -> dict[str, Path]:
    import h5py
    import numpy as np
    import zarr

    x = np.zeros((5, 2), np.float32)
    np.save(tmp_path / "c.npy", x)
    np.savez(tmp_path / "d.npz", x=x)
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f["x"] = x
    zarr.open_group(tmp_path / "b.zarr", mode="w").create_array("x", data=x)
    return {
        "an HDF5 file": tmp_path / "a.h5",
        "a Zarr store": tmp_path / "b.zarr",
        "an .npy file": tmp_path / "c.npy",
        "an .npz archive": tmp_path / "d.npz",
    }


@pytest.mark.parametrize("command", ["info", "verify"])
def test_a_source_given_as_dataset_says_how_to_convert(tmp_path, capsys, command):
    for noun, path in _sources(tmp_path).items():
        assert main([command, str(path)]) == 1
        err = capsys.readouterr().err
        dst = path.with_suffix(".chute")
        assert err == (
            f"chute {command}: error: {path} is {noun}, not a chute dataset: "
            f"convert it with `chute convert {path} {dst}`\n"
        )
        assert main(["convert", "-q", str(path), str(dst)]) == 0  # the advice works
        assert main([command, str(dst)]) == 0
        capsys.readouterr()
    odd = tmp_path / "my data.h5"  # the command to copy is quoted for the shell
    (tmp_path / "a.h5").rename(odd)
    assert main([command, str(odd)]) == 1
    assert f"`chute convert '{odd}' '{tmp_path / 'my data.chute'}'`" in capsys.readouterr().err
    (tmp_path / "unfinished").mkdir()  # a folder of .npy: maybe a write that did not finish
    (tmp_path / "c.npy").rename(tmp_path / "unfinished" / "x.npy")
    assert main([command, str(tmp_path / "unfinished")]) == 1
    assert "has no chute.json (an unfinished write leaves none)" in capsys.readouterr().err


def test_bench_refuses_unwritable_outputs_before_running(mixed, tmp_path, capsys):
    path, _ = mixed
    for option in ("--json", "--plot"):
        for out, why in [
            (tmp_path / "missing" / "r.out", f"the folder {tmp_path / 'missing'} does not exist"),
            (tmp_path, "is a folder; give a file name"),
        ]:
            assert main(["bench", str(path), "--time-limit", "1", option, str(out)]) == 1
            # one line, before any contender ran (they log to stderr as they go)
            assert capsys.readouterr() == ("", f"chute bench: error: {option} {out}: {why}\n")


@pytest.mark.parametrize("args", [["--workers", "-3"], ["--batch-size", "0"]])
def test_bench_bad_counts_are_usage_errors(mixed, capsys, args):
    path, _ = mixed
    with pytest.raises(SystemExit) as info:
        main(["bench", str(path), *args])
    assert info.value.code == 2 and f"argument {args[0]}: must be >=" in capsys.readouterr().err


def test_convert_part_size(tmp_path: Path, capsys) -> None:
    np.save(tmp_path / "x.npy", np.arange(100))
    dst = tmp_path / "x.chute"
    assert main(["convert", str(tmp_path / "x.npy"), str(dst), "--part-size", "30", "-q"]) == 0
    ds = chute.open(dst)
    assert [p.num_samples for p in ds.parts] == [30, 30, 30, 10]
    assert ds[99]["x"].item() == 99
    with pytest.raises(SystemExit):
        main(["convert", str(tmp_path / "x.npy"), str(dst), "--part-size", "0"])
    assert "must be >= 1" in capsys.readouterr().err


def test_upload_and_download_take_storage_options_and_workers(mixed, tmp_path: Path, capsys):
    """file:// stands for a bucket here (``tests/store/test_cli_transfer.py``: s3://)."""
    mixed, _ = mixed
    url = (tmp_path / "bucket" / "ds.chute").as_uri()
    args = ["upload", str(mixed), url, "--workers", "2", "--storage-options", "{}"]
    assert main([*args, "--compression", "zstd", "--level", "1"]) == 0
    assert "uploaded" in capsys.readouterr().out
    assert main(args) == 1
    assert "pass --overwrite to replace it" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == 0
    dst = tmp_path / "copy.chute"
    assert main(["download", url, str(dst), "--workers", "1", "--storage-options", "{}"]) == 0
    want, got = chute.open(mixed), chute.open(dst)
    assert len(got) == len(want) and got.schema == want.schema
    assert main(["download", url, str(dst)]) == 1
    assert "pass --overwrite to replace it" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["[1]", "{bad", '"s3"'])
def test_storage_options_must_be_a_json_object(value: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["download", "s3://b/ds.chute", "out", "--storage-options", value])
    assert exc.value.code == 2
    assert "--storage-options" in capsys.readouterr().err


def test_every_positional_has_help() -> None:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bare = [
        f"{name} {action.dest}"
        for name, command in sub.choices.items()
        for action in command._actions
        if not action.option_strings and not action.help
    ]
    assert bare == []


def test_bench_help_and_readme_name_the_same_contenders() -> None:
    """Every family of contender that ``chute bench`` runs is named, in the README too."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert BENCH_CONTENDERS in " ".join(readme.split())
    named = BENCH_CONTENDERS.lower().replace(" and ", ", ").removeprefix("chute vs ").split(", ")
    spelled = {"ram": "ram", "np.memmap": "memmap", "hdf5": "h5py"}
    for contender in CONTENDERS:
        name = contender.name.lower()
        assert name.startswith("chute") or any(spelled.get(n, n) in name for n in named), name
