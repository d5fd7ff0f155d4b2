"""What a user's mistake raises: a ChuteError naming the file or field and what to do, never
a bare OSError or a misleading message; and Python numbers a field holds are accepted.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from _faults import (
    recorded_case,  # noqa: F401 - autouse: records the case
    run_chute,
)

import chute

# ------------------------------------------------- a symlink loop in a dataset


def test_symlink_loop_in_dataset_is_a_chute_error(tmp_path: Path) -> None:
    """``x.npy -> x.npy``: a ChuteError (docs/reliability.md), not a bare ``OSError``."""
    path = tmp_path / "d.chute"
    chute.write(path, {"x": np.arange(5)})
    (path / "x.npy").unlink()
    os.symlink("x.npy", path / "x.npy")
    with pytest.raises(chute.ChuteError) as info:
        chute.open(path)
    assert isinstance(info.value, chute.FormatError), repr(info.value)
    assert "x.npy" in str(info.value)


@pytest.mark.slow  # a fresh interpreter
def test_symlink_loop_in_dataset_cli_info_one_line(tmp_path: Path) -> None:
    path = tmp_path / "d.chute"
    chute.write(path, {"x": np.arange(5)})
    (path / "x.npy").unlink()
    os.symlink("x.npy", path / "x.npy")
    proc = run_chute("info", str(path))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]


# ------------------------------------ Python numbers into float32 / int fields


def _write_one(tmp_path: Path, schema: dict, sample: dict) -> chute.Dataset:
    path = tmp_path / "n.chute"
    with chute.Writer(path, schema) as w:
        w.append(sample)
    return chute.open(path)


@pytest.mark.parametrize("value", [0.5, 0.1, 1 / 3, 1e-30])
def test_python_float_fits_float32_field(tmp_path: Path, value: float) -> None:
    ds = _write_one(tmp_path, {"x": chute.fields.Tensor((), "float32")}, {"x": value})
    assert float(ds[0]["x"]) == float(np.float32(value))


def test_python_float_lists_fit_float32_fields(tmp_path: Path) -> None:
    """Tokenizers and feature code emit Python lists."""
    schema = {"v": chute.Ragged("float32"), "t": chute.fields.Tensor((3,), "float16")}
    ds = _write_one(tmp_path, schema, {"v": [0.1, 0.2, 0.3], "t": [0.1, 0.2, 0.3]})
    assert ds[0]["v"].tolist() == np.array([0.1, 0.2, 0.3], np.float32).tolist()
    assert ds[0]["t"].tolist() == np.array([0.1, 0.2, 0.3], np.float16).tolist()


def test_python_ints_follow_the_field_dtype(tmp_path: Path) -> None:
    ds = _write_one(
        tmp_path,
        {"ids": chute.Ragged("int32"), "f": chute.fields.Tensor((), "float32")},
        {"ids": [1, 2, 70000], "f": 3},
    )
    assert ds[0]["ids"].tolist() == [1, 2, 70000] and float(ds[0]["f"]) == 3.0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (chute.fields.Tensor((), "uint8"), 300),  # out of range
        (chute.fields.Tensor((), "int32"), 1.5),  # a float into an int field: not same_kind
        (chute.fields.Tensor((), "float32"), 1e300),  # overflows to inf
        (chute.fields.Tensor((), "int8"), -129),
    ],
)
def test_python_numbers_that_do_not_fit_are_refused(
    tmp_path: Path, field: chute.fields.Tensor, value: float
) -> None:
    """The guard that must stay: range-checked, numpy's ``same_kind`` rules."""
    with pytest.raises(chute.SchemaError):
        _write_one(tmp_path, {"x": field}, {"x": value})


# --------------------------------------------- length and dtype change at once


def test_length_and_dtype_change_names_the_dtype(tmp_path: Path) -> None:
    """(2,) float32 then (3,) float64: the error names the dtype, not the shape; a length change
    alone becomes ragged, so the real cause is the dtype."""
    with pytest.raises(chute.SchemaError) as info, chute.Writer(tmp_path / "s.chute") as w:
        w.append({"x": np.zeros(2, np.float32)})
        w.append({"x": np.zeros(3, np.float64)})
    msg = str(info.value)
    assert "float64" in msg and "float32" in msg, msg
    assert "'x'" in msg and "sample 1" in msg, msg


# -------------------------------------------- chute.open on a file or a source


def test_open_hdf5_file_says_file_and_convert_command(tmp_path: Path) -> None:
    h5py = pytest.importorskip("h5py")
    src = tmp_path / "data.h5"
    with h5py.File(src, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(chute.DatasetNotFoundError) as info:
        chute.open(src)
    msg = str(info.value)
    assert "no such dataset folder" not in msg, msg
    assert "chute convert" in msg and "HDF5" in msg, msg


def test_open_plain_file_says_it_is_a_file(tmp_path: Path) -> None:
    src = tmp_path / "notes.txt"
    src.write_text("hello")
    with pytest.raises(chute.DatasetNotFoundError) as info:
        chute.open(src)
    msg = str(info.value)
    assert "no such" not in msg and "file" in msg, msg


@pytest.mark.slow  # a fresh interpreter
def test_cli_info_on_npy_folder_gives_convert_hint(tmp_path: Path) -> None:
    folder = tmp_path / "npydir"
    folder.mkdir()
    np.save(folder / "x.npy", np.arange(4))
    proc = run_chute("info", str(folder))
    assert proc.returncode != 0
    assert "chute convert" in proc.stderr, proc.stderr


# --------------------------------------------------------- writing over a file


def test_write_over_a_file_gives_advice_that_works(tmp_path: Path) -> None:
    target = tmp_path / "afile.txt"
    target.write_text("keep me")
    with pytest.raises(chute.DatasetExistsError) as first:
        chute.write(target, {"x": np.arange(3)})
    assert str(target) in str(first.value)
    if "overwrite=True" in str(first.value):  # then following it must work
        chute.write(target, {"x": np.arange(3)}, overwrite=True)
        assert len(chute.open(target)) == 3
    else:
        assert target.read_text() == "keep me"


# ------------------------------------------------ a URL as a local destination


@pytest.fixture
def no_cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No request may reach a real bucket, whatever credentials this machine has: every
    AWS_* / GOOGLE_* / AZURE_* variable is cleared, S3 points at a server on 127.0.0.1 that
    refuses everything (403), GCS at a key file that does not exist."""
    import http.server
    import threading

    class Refuse(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _refuse(self) -> None:
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _refuse

    for var in list(os.environ):
        if var.startswith(("AWS_", "GOOGLE_", "AZURE_")):
            monkeypatch.delenv(var)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "hermetic")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hermetic")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("GOOGLE_SERVICE_ACCOUNT", str(tmp_path / "no-such-key.json"))
    yield
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("url", ["s3://bucket/x.chute", "gs://b/x.chute", "https://h/x.chute"])
def write_to_url_is_an_error(tmp_path: Path, monkeypatch, no_cloud, url: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(chute.ChuteError) as info:
        chute.write(url, {"x": np.arange(3)})
    assert url.split(":")[0] in str(info.value), str(info.value)
    assert list(tmp_path.iterdir()) == [], "a local folder was made for a URL"


def writer_and_convert_to_url_are_errors(tmp_path: Path, monkeypatch, no_cloud) -> None:
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "src.npy", np.arange(3))
    with pytest.raises(chute.ChuteError):
        chute.Writer("s3://bucket/w.chute")
    with pytest.raises(chute.ChuteError):
        chute.convert(tmp_path / "src.npy", "s3://bucket/c.chute", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.npy"]


def open_url_says_remote_is_unsupported(tmp_path: Path, monkeypatch, no_cloud) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(chute.ChuteError) as info:
        chute.open("s3://bucket/x.chute")
    assert "no such dataset folder" not in str(info.value), str(info.value)


# ---------------------------------------------- an empty dataset's index error


def test_empty_dataset_index_error_message(tmp_path: Path) -> None:
    path = tmp_path / "e.chute"
    chute.write(path, {"x": np.zeros((0, 3), np.float32)})
    ds = chute.open(path)
    assert len(ds) == 0
    for call in (lambda: ds[0], lambda: ds.gather([0])):
        with pytest.raises(chute.SampleIndexError) as info:
            call()
        msg = str(info.value).replace(str(path), "PATH")  # pytest's basetemp may be pytest-0
        assert "-0" not in msg and "empty" in msg, msg
