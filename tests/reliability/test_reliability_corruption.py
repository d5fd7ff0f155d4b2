"""Files damaged after writing: truncated, extended, bit-flipped.

``open`` compares every file's size with the manifest (and the manifest's count and shape), so
a truncated or extended file is reported by name before anything is read; ``chute verify``
recomputes the checksums and names every file whose content changed. A loader over a file
truncated after ``open`` raises (the size is checked again when the file is first mapped).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from _reliability import check_content, make_dataset, outcome_of, record

import chute
from chute import format as fmt
from chute.cli import main as cli_main

pytestmark = pytest.mark.slow  # the fault harness: real processes, signals, fuzzing


def data_files(ds: Path) -> list[Path]:
    return sorted(p for p in ds.rglob("*.npy"))


def header_len(file: Path) -> int:
    with open(file, "rb") as f:
        return chute.npy_header.read_header(f, str(file))[2]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("pristine") / "d.chute", part_size=3)


def damaged(tmp_path: Path, pristine: Path, name: str) -> Path:
    ds = tmp_path / name
    shutil.copytree(pristine, ds)
    return ds


def test_truncated_and_extended_files(tmp_path: Path, pristine: Path, record_property) -> None:
    """Every data file of a 3-part dataset, cut or grown several ways: open names the file."""
    cases = 0
    for i, rel in enumerate(p.relative_to(pristine) for p in data_files(pristine)):
        size = (pristine / rel).stat().st_size
        hdr = header_len(pristine / rel)
        for new_size in sorted({0, hdr // 2, hdr, max(hdr, size - 1), size + 1, size + 4096}):
            if new_size == size:
                continue
            ds = damaged(tmp_path, pristine, f"{i}-{new_size}.chute")
            os.truncate(ds / rel, new_size)
            with pytest.raises(chute.FormatError, match=str(ds / rel)):
                chute.open(ds)
            cases += 1
    record(
        record_property,
        "truncated / extended data file",
        "each of 30 files of a 3-part dataset, cut to 0, mid-header, header only, -1 byte, "
        "grown by 1 and 4096 bytes",
        cases,
        "all refused at open: FormatError naming the file",
    )


def test_truncated_manifest(tmp_path: Path, pristine: Path, record_property) -> None:
    size = (pristine / fmt.MANIFEST).stat().st_size
    cuts = [0, 1, size // 3, size // 2, size - 2, size - 1]
    for cut in cuts:
        ds = damaged(tmp_path, pristine, f"{cut}.chute")
        os.truncate(ds / fmt.MANIFEST, cut)
        with pytest.raises(chute.FormatError, match=fmt.MANIFEST):
            chute.open(ds)
    record(
        record_property,
        "truncated manifest",
        "chute.json cut at 6 points",
        len(cuts),
        "all refused at open: FormatError naming chute.json",
    )


def flip(file: Path, pos: int, bit: int) -> None:
    with open(file, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ (1 << bit)]))


def test_bit_flips(tmp_path: Path, pristine: Path, capsys, record_property) -> None:
    """One bit flipped in the data bytes of each file: open still works (same size), ``verify``
    and ``chute verify`` name exactly that file. A flip in a header is refused or harmless."""
    rng = np.random.default_rng(7)
    outcomes: Counter = Counter()
    files = [p.relative_to(pristine) for p in data_files(pristine)]
    for i, rel in enumerate(files):
        size, hdr = (pristine / rel).stat().st_size, header_len(pristine / rel)
        if size == hdr:  # no data bytes to flip (an empty column of this part)
            continue
        ds = damaged(tmp_path, pristine, f"data-{i}.chute")
        flip(ds / rel, int(rng.integers(hdr, size)), int(rng.integers(8)))
        chute.open(ds).close()
        with pytest.raises(chute.ChecksumError) as info:
            chute.verify(ds)
        assert str(ds / rel) in str(info.value)
        assert sum(str(ds / other) in str(info.value) for other in files) == 1
        assert cli_main(["verify", "-q", str(ds)]) == 1
        assert str(ds / rel) in capsys.readouterr().err
        outcomes["data flip: ChecksumError naming the file"] += 1
    ds = damaged(tmp_path, pristine, "header.chute")
    for k, rel in enumerate(files[:10]):  # the headers of the first part
        hdr = header_len(pristine / rel)
        # every byte of one header, 12 random bytes of each of the others
        for pos in range(hdr) if k == 0 else rng.choice(hdr, 12, replace=False).tolist():
            flip(ds / rel, pos, pos % 8)
            got = outcome_of(lambda: chute.verify(ds))
            if got == "ok":  # e.g. a flipped padding space: the data must be exactly intact
                with chute.open(ds) as d:
                    check_content(d)
            outcomes[f"header flip: {got}"] += 1
            flip(ds / rel, pos, pos % 8)  # back
    record(
        record_property,
        "bit flip",
        "1 random bit in the data of each file (+ CLI); every byte of a header, 12 random "
        "bytes of 9 more",
        outcomes.total(),
        outcomes,
    )


def test_loader_over_file_truncated_after_open(
    tmp_path: Path, pristine: Path, record_property
) -> None:
    """The dataset is opened (sizes fine), then a file is cut before the first read: the
    Loader and the gather raise naming the file; nothing is returned from it."""
    cases = 0
    for rel in ("part-00000/x.npy", "part-00001/tokens.values.npy", "part-00002/image.shapes.npy"):
        ds_path = damaged(tmp_path, pristine, f"{cases}.chute")
        ds = chute.open(ds_path)
        os.truncate(ds_path / rel, (ds_path / rel).stat().st_size - 1)
        with pytest.raises(chute.FormatError) as info:  # as itself, not wrapped
            for _ in chute.Loader(ds, batch_size=2, num_workers=2, shuffle=False):
                pass
        assert str(ds_path / rel) in str(info.value)
        with pytest.raises(chute.FormatError):
            ds.gather(np.arange(len(ds)))
        dl = chute.dataloader(ds, 2, shuffle=False, num_workers=2, multiprocessing_context="fork")
        with pytest.raises(chute.FormatError, match=str(ds_path / rel)):
            for _ in dl:
                pass
        cases += 3
    record(
        record_property,
        "file truncated after open",
        "Loader (2 threads), chute.dataloader (2 processes) and gather over a file cut "
        "before its first read",
        cases,
        "FormatError naming the file; no batch from it",
    )


TRUNCATE_WHILE_MAPPED = textwrap.dedent(
    """
    import os, sys, numpy as np, chute
    path, workers, rows, width = sys.argv[1], int(sys.argv[2]), 64, 256
    ds = chute.open(path)
    loader = chute.Loader(ds, batch_size=rows, num_workers=workers, shuffle=False)
    for k, batch in enumerate(loader):
        if k == 0:
            os.truncate(os.path.join(path, "x.npy"), 4096)
        want = (np.arange(k * rows, (k + 1) * rows) * width).astype(np.float32)
        if not np.array_equal(batch["x"].numpy()[:, 0], want):
            print("GARBAGE", k); sys.exit(3)
    print("COMPLETED, every batch intact (read before the cut)")
    """
)


@pytest.mark.parametrize("workers", [0, 2])
def test_truncated_while_mapped(tmp_path: Path, workers: int, record_property) -> None:
    """Cut a file that is already memory-mapped mid-epoch. The OS then raises SIGBUS on the
    next read of a lost page: the process dies loudly (a documented limit of mmap). Batches
    gathered before the cut may still be delivered, intact; nothing is ever delivered wrong."""
    path = tmp_path / "big.chute"  # 32 MB: far more than the loader reads ahead
    chute.write(path, {"x": np.arange(32768 * 256, dtype=np.float32).reshape(32768, 256)})
    proc = subprocess.run(
        [sys.executable, "-c", TRUNCATE_WHILE_MAPPED, str(path), str(workers)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "GARBAGE" not in proc.stdout, proc.stdout
    assert proc.returncode == -signal.SIGBUS, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    record(
        record_property,
        "file truncated while mapped",
        f"Loader with {workers} worker threads, 32 MB file cut after the first batch; every "
        "batch delivered is compared with the data written",
        1,
        "process killed by SIGBUS at the first lost page (loud); no batch ever wrong",
    )
