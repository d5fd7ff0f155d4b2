"""A dataset on a read-only filesystem or in a folder the user cannot write: reading works
(open, gather, Loader, to_memory, verify); every kind of write fails at once with a
:class:`chute.NotWritableError` naming the destination; the dataset is untouched.

Tests often run as root, for whom ``chmod`` blocks nothing. So the check runs in a child
process that really cannot write: a read-only bind mount in a private mount namespace (the
filesystem says EROFS, even to root), and the folder made read-only (``chmod a-w``) for a
process that honours permissions (as root: with the capabilities that bypass them removed
from its bounding set by ``setpriv``). Where that cannot be arranged the test is skipped,
saying why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from _reliability import check_content, make_dataset, record

import chute

pytestmark = pytest.mark.slow  # the fault harness: real processes, signals, fuzzing

CHECK = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import chute
    folder = sys.argv[1]
    ds_path = folder + "/d.chute"
    out = {}
    ds = chute.open(ds_path)
    ds.gather(np.arange(len(ds)))
    for _ in chute.Loader(ds, batch_size=3, num_workers=2):
        pass
    ds.to_memory()[0]
    chute.verify(ds_path)
    out["read"] = "ok"
    writes = {
        "write new": lambda: chute.write(folder + "/new.chute", {"x": np.arange(3.0)}),
        "overwrite": lambda: chute.write(ds_path, {"x": np.arange(3.0)}, overwrite=True),
        "Writer": lambda: chute.Writer(folder + "/w.chute"),
        "append": lambda: chute.Writer(ds_path, append=True),
        "convert": lambda: chute.convert({"x": np.arange(3.0)}, folder + "/c.chute",
                                         progress=False),
    }
    for what, fn in writes.items():
        try:
            fn()
            out[what] = ["no error", ""]
        except Exception as exc:
            out[what] = [type(exc).__name__, str(exc)]
    print(json.dumps(out))
    """
)


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder any user may enter (pytest's tmp_path is private to its owner)."""
    folder = Path(tempfile.mkdtemp(prefix="chute-ro-"))
    folder.chmod(0o755)
    yield folder
    for p in [folder, *folder.rglob("*")]:
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
    shutil.rmtree(folder)


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


def _check(folder: Path, proc: subprocess.CompletedProcess, record_property, how: str) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out.pop("read") == "ok"
    for what, (kind, message) in out.items():
        assert kind == "NotWritableError", (what, kind, message)
        assert str(folder) in message, (what, message)
    with chute.open(folder / "d.chute") as ds:  # untouched
        check_content(ds)
    # nothing new: the lock file is make_dataset's (chute.writer.commit.DatasetLock)
    assert sorted(p.name for p in folder.iterdir()) == [".d.chute.lock", "d.chute"]
    record(
        record_property,
        "read-only dataset",
        f"{how}: open/gather/Loader/to_memory/verify, then write new / overwrite / Writer / "
        "append / convert",
        1 + len(out),
        "reads ok; every write: NotWritableError naming the folder; dataset untouched",
    )


def test_read_only_filesystem(shared_folder: Path, record_property) -> None:
    make_dataset(shared_folder / "d.chute", part_size=3)
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a read-only bind mount needs root and unshare(1)")
    mount = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && exec "$2" -c "$3" "$1"'
    probe = _run(["unshare", "-m", "sh", "-c", mount, "sh", str(shared_folder), "true", ""])
    if probe.returncode != 0:
        pytest.skip(f"cannot make a private read-only bind mount here: {probe.stderr.strip()}")
    proc = _run(
        ["unshare", "-m", "sh", "-c", mount, "sh", str(shared_folder), sys.executable, CHECK]
    )
    _check(shared_folder, proc, record_property, "read-only bind mount (EROFS, as root)")


def test_read_only_folder(shared_folder: Path, record_property) -> None:
    make_dataset(shared_folder / "d.chute", part_size=3)
    for p in [shared_folder, *shared_folder.rglob("*")]:
        if p.is_dir():
            p.chmod(0o555)
    cmd = [sys.executable, "-c", CHECK, str(shared_folder)]
    how = "folder chmod a-w, as this user"
    if os.geteuid() == 0:  # root ignores permissions unless it gives up the capabilities
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv(1) to drop CAP_DAC_OVERRIDE")
        cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", *cmd]
        how = "folder chmod a-w, as root without CAP_DAC_OVERRIDE/READ_SEARCH/FOWNER"
    _check(shared_folder, _run(cmd), record_property, how)
