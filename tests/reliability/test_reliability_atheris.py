"""Coverage-guided fuzzing (atheris / libFuzzer) of the manifest parser + ``open`` and of the
.npy header reader, seeded with valid files. Optional: skipped unless atheris is installed
(``pip install atheris``). libFuzzer exits its process when done, so each run is a child.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _reliability import make_dataset, record

from chute import format as fmt

pytest.importorskip("atheris", reason="atheris is not installed (optional fuzzer)")

pytestmark = pytest.mark.slow  # the fault harness: real processes, signals, fuzzing

RUNS = 2000

HARNESS = textwrap.dedent(
    """
    import sys
    import numpy as np, torch  # imported before instrumentation: not fuzz targets
    import atheris
    with atheris.instrument_imports(include=["chute"]):
        import chute
        from chute.npy_header import read_header
    from pathlib import Path
    import io

    target, dataset = sys.argv[1], Path(sys.argv[2])

    def manifest(data: bytes) -> None:
        (dataset / "chute.json").write_bytes(data)
        try:
            with chute.open(dataset) as ds:
                idx = np.arange(min(len(ds), 16))
                ds.gather(idx)
                for i in idx:
                    ds[int(i)]
        except chute.ChuteError:
            pass

    def header(data: bytes) -> None:
        try:
            read_header(io.BytesIO(data), "fuzz.npy")
        except chute.ChuteError:
            pass

    atheris.Setup(sys.argv[:1] + sys.argv[3:], manifest if target == "manifest" else header)
    atheris.Fuzz()
    """
)


@pytest.mark.parametrize("target", ["manifest", "header"])
def test_atheris(tmp_path: Path, target: str, record_property) -> None:
    ds = make_dataset(tmp_path / "d.chute", part_size=3)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    if target == "manifest":
        (corpus / "valid").write_bytes((ds / fmt.MANIFEST).read_bytes())
    else:
        for f in sorted(ds.rglob("*.npy"))[:5]:
            (corpus / f.name).write_bytes(f.read_bytes()[:256])
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            HARNESS,
            target,
            str(ds),
            f"-runs={RUNS}",
            "-max_total_time=20",
            "-rss_limit_mb=4096",
            "-timeout=10",
            str(corpus),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    done = re.search(r"Done (\d+) runs", proc.stderr)
    runs = int(done.group(1)) if done else RUNS
    record(
        record_property,
        "coverage-guided fuzzing (atheris)",
        "manifest bytes -> open + reads, seeded with a valid manifest"
        if target == "manifest"
        else ".npy header bytes -> read_header, seeded with valid headers",
        runs,
        "no exception other than ChuteError, no crash, no hang (10 s), RSS < 4 GB",
    )
