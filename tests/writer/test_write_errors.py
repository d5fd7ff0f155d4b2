"""Write failures from the OS, URLs as destinations, and Python numbers in typed fields.

The disk-full cases need root (a real small tmpfs: tests/writer/test_writer_disk_full.py);
here a real ``EFBIG`` from a file-size limit (``RLIMIT_FSIZE``, any user) drives the same paths:
every write path raises one :class:`chute.WriteError` (an ``OSError``, errno kept) naming the
destination, removes its temp folder and releases its lock.
"""

from __future__ import annotations

import errno
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import chute
from chute.cli import main

LIMITED = """
import resource, signal, sys
import numpy as np
import chute
from chute.writer.writer import write_part
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))  # 1 MiB a file

def report(case, fn):
    try:
        fn()
    except BaseException as exc:
        print(case, "|", type(exc).__name__, getattr(exc, "errno", None), "|", exc)
    else:
        print(case, "|", "no error")

def fill(path, rows, append):
    with chute.Writer(path, append=append) as w:
        for _ in range(1000 if rows else 10):  # 4 MB: 4 times the limit
            if rows:
                w.append({"x": np.ones(1000, np.float32)})
            else:
                w.extend({"x": np.ones((1000, 1000), np.float32)})
"""

CASES = [(rows, append) for rows in (True, False) for append in (False, True)]


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[str]]]:
    """Every write path run once, in one process whose files may not exceed 1 MiB: case ->
    [what the write raised, what a later ``Writer(append=True)`` of that path raised]."""
    root = tmp_path_factory.mktemp("limited")
    code = [LIMITED]
    for rows, append in CASES:
        path = root / f"{rows}-{append}.chute"
        if append:
            chute.write(path, {"x": np.full((10, 1000), 7, np.float32)})
        code.append(f"report('{path.name}', lambda: fill({str(path)!r}, {rows}, {append}))")
        code.append(
            f"report('{path.name}', lambda: chute.Writer({str(path)!r}, append=True).abort())"
        )
    part = root / ".p.chute.tmp-1-ab" / "part-00000"
    part.parent.mkdir()
    schema = '{"x": chute.fields.Tensor((1000,), "float32")}'
    batches = '[{"x": np.ones((1000, 1000), np.float32)}] * 10'
    code.append(f"report('part', lambda: write_part({str(part)!r}, {schema}, {batches}))")
    proc = subprocess.run(
        [sys.executable, "-c", "\n".join(code)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines():
        case, _, rest = line.partition(" | ")
        out.setdefault(case, []).append(rest)
    return root, out


def _temp_folders(path: Path) -> list[str]:
    beside = [p.name for p in path.parent.glob(f".{path.name}.tmp-*")]
    inside = [p.name for p in path.glob("*.tmp-*")] if path.is_dir() else []
    return beside + inside


@pytest.mark.parametrize(("rows", "append"), CASES)
def test_os_error_while_writing_is_a_write_error(
    limited: tuple[Path, dict[str, list[str]]], rows: bool, append: bool
) -> None:
    root, out = limited
    path = root / f"{rows}-{append}.chute"
    first, later = out[path.name]
    assert first.startswith(f"WriteError {errno.EFBIG} | cannot write {path}: "), first
    assert "part_size" in first, first  # what to do about this errno
    assert later.startswith("no error" if append else "DatasetNotFoundError"), later  # lock free
    assert _temp_folders(path) == []
    if append:
        assert len(chute.open(path)) == 10 and chute.verify(path, progress=False) > 0
    else:
        assert not path.exists()


def test_write_part_error_names_the_part(limited: tuple[Path, dict[str, list[str]]]) -> None:
    """The Dask path writes parts with ``write_part``: the same translation."""
    root, out = limited
    part = root / ".p.chute.tmp-1-ab" / "part-00000"
    assert out["part"][0].startswith(f"WriteError {errno.EFBIG} | cannot write {part}: ")


def test_write_error_is_an_os_error_that_pickles() -> None:
    exc = chute.WriteError(errno.ENOSPC, "cannot write /d.chute: full; free space", "/d/x.npy")
    assert isinstance(exc, OSError) and isinstance(exc, chute.ChuteError)
    assert str(exc) == "cannot write /d.chute: full; free space"
    back = pickle.loads(pickle.dumps(exc))  # from a worker process (Dask)
    assert type(back) is chute.WriteError and str(back) == str(exc)
    assert (back.errno, back.filename) == (errno.ENOSPC, "/d/x.npy")
    assert issubclass(chute.NotWritableError, chute.WriteError)
    assert issubclass(chute.NotWritableError, PermissionError)


# ---------------------------------------------------------------------------- URLs


def test_cache_refuses_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """chute.cache builds local datasets: a URL is refused, never a local folder 's3:'."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(chute.ArgumentValueError, match=r"remote datasets.*chute\.open"):
        chute.cache("s3://bucket/c.chute", lambda: {"x": np.arange(3)}, progress=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", ["s3:/not-a-url", "C:x", "a://b"])
def test_only_scheme_slash_slash_is_a_url(tmp_path: Path, path: str) -> None:
    from chute._args import is_url

    assert is_url(path) == ("://" in path)


# ---------------------------------------------------------------------------- advice


def test_cli_convert_onto_a_file_does_not_offer_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.save(tmp_path / "x.npy", np.arange(3))
    target = tmp_path / "notes.txt"
    target.write_text("keep")
    assert main(["convert", str(tmp_path / "x.npy"), str(target), "-q"]) == 1
    err = capsys.readouterr().err
    assert "--overwrite" not in err and "overwrite=True" not in err and "a file" in err, err
    assert target.read_text() == "keep"


# ---------------------------------------------------------------------------- Python numbers


@pytest.mark.parametrize(
    ("dtype", "value", "ok"),
    [
        ("uint8", 5, True),  # a Python int has no signedness
        ("uint8", 255, True),
        ("uint8", -1, False),
        ("uint64", 2**64 - 1, True),
        ("uint64", -1, False),
        ("int8", True, True),
        ("float32", float("nan"), True),
        ("float32", float("-inf"), True),
        ("float16", 70000, False),  # an int that overflows float16
        ("float32", 1e40, False),
        ("bool", 1, False),  # an int into bool: not same_kind
        ("complex64", 1 + 2j, True),
        ("float32", 1j, False),
    ],
)
def test_python_numbers_follow_the_field_dtype(
    tmp_path: Path, dtype: str, value: object, ok: bool
) -> None:
    path = tmp_path / "n.chute"
    schema = {"x": chute.fields.Tensor((), dtype)}
    if ok:
        with chute.Writer(path, schema) as w:
            w.append({"x": value})
        got = chute.open(path)[0]["x"].item()
        assert got == value or (got != got and value != value)
    else:
        with pytest.raises(chute.SchemaError) as info, chute.Writer(path, schema) as w:
            w.append({"x": value})
        msg = str(info.value)
        assert "'x'" in msg and "sample 0" in msg and dtype in msg, msg
        assert not path.exists()


def test_python_number_out_of_range_names_its_sample_in_a_batch(tmp_path: Path) -> None:
    schema = {"x": chute.fields.Tensor((2,), "uint8")}
    with (
        pytest.raises(chute.SchemaError, match=r"sample 11: .*value 300"),
        chute.Writer(tmp_path / "b.chute", schema) as w,
    ):
        w.extend({"x": [[1, 2]] * 10})
        w.extend({"x": [[1, 2], [3, 300]]})


def test_arrays_keep_the_strict_rule(tmp_path: Path) -> None:
    """Only native Python numbers follow the field: an int64 array into uint8 is refused even
    when every value fits."""
    with (
        pytest.raises(chute.SchemaError, match="dtype int64 does not fit"),
        chute.Writer(tmp_path / "a.chute", {"x": chute.fields.Tensor((), "uint8")}) as w,
    ):
        w.append({"x": np.int64(5)})
