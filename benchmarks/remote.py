"""Datasets in object storage, side by side in one run, from one local S3-protocol server (moto
on 127.0.0.1, started here): chute (``chute.write`` to ``s3://``, ``chute.open(url)``,
``chute.Loader(shuffle="parts")``), chute reading the same dataset from a local folder,
MosaicML Streaming (``MDSWriter`` + ``StreamingDataset``, endpoint from ``S3_ENDPOINT_URL``)
and LitData (``BinaryWriter`` + ``StreamingDataset``, endpoint in ``storage_options``), all
with 2 loader workers, reading the same samples (CIFAR-like uint8[3,32,32] + int64 label).

Each row is a subprocess (``benchmarks/_remote_row.py``): Streaming and LitData run from
their own venvs (they need other numpy versions than chute), found at ``.venv-streaming`` and
``.venv-litdata`` in the repository root (or ``--streaming-python`` / ``--litdata-python``);
a library that is missing or fails is printed as skipped, with the reason. The server runs in
this process, so every row pays the same for it, and counts the bytes of its GET answers:
that is "downloaded". This process also samples each row's cache folder (peak disk; while
writing, chute's staging and Streaming's local shards are there too: "write: peak disk", the
local disk a remote write needs, against a part's size) and its process tree's PSS (peak
memory).

moto is a Python server and the machine may be shared: compare the ratios of one run, not
the rates. ``python benchmarks/remote.py [--samples 102400] [--part-samples 20480]``
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "store"))

from _common import TreeMemory, table, write_json

from chute.bench.measure import _pss

ROOT = Path(__file__).resolve().parents[1]
ROW_SCRIPT = Path(__file__).resolve().parent / "_remote_row.py"
BUCKET = "chute-bench"
COLUMNS = [
    ("name", "row", ""),
    ("open_s", "open s", ".3f"),
    ("first_batch_s", "first batch s", ".3f"),
    ("cold_samples_per_s", "cold samples/s", ",.0f"),
    ("warm_samples_per_s", "warm samples/s", ",.0f"),
    ("downloaded_mb", "downloaded MB", ".1f"),
    ("write_peak_disk_mb", "write: peak disk MB", ".1f"),
    ("peak_disk_mb", "read: peak disk MB", ".1f"),
    ("peak_pss_mb", "peak PSS MB", ".0f"),
    ("note", "note", ""),
]


def counting_server() -> Any:
    """The tests' moto server (tests/store/_s3server.py), counting the bytes it answers GETs
    with (bodies as they are sent, so ranged and repeated reads count what they cost)."""
    from _s3server import S3Server

    class CountingServer(S3Server):
        get_bytes = 0

        def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
            body = super().__call__(environ, start_response)
            return self._count(body) if environ["REQUEST_METHOD"] == "GET" else body

        def _count(self, body: Iterable[bytes]) -> Iterator[bytes]:
            for chunk in body:
                self.get_bytes += len(chunk)  # one werkzeug thread per request: += races are rare
                yield chunk

    return CountingServer()


class RowMonitor(TreeMemory):
    """:class:`TreeMemory` of a child process tree (not this one: it holds the server), plus
    the peak size of the row's cache folder."""

    def __init__(self, pid: int, folder: Path) -> None:
        super().__init__(0.05)
        self.pid, self.folder, self.peak_disk = pid, folder, 0

    def sample(self) -> tuple[int, int]:
        try:
            root = self._psutil.Process(self.pid)
            pids = [self.pid] + [c.pid for c in root.children(recursive=True)]
        except self._psutil.Error:
            return 0, 0
        total = anon = 0
        for pid in pids:
            try:
                p, a = _pss(pid)
            except OSError:  # the process just ended
                continue
            total, anon = total + p, anon + a
        return total, anon

    def record(self) -> None:
        super().record()
        self.peak_disk = max(self.peak_disk, folder_bytes(self.folder))


def folder_bytes(folder: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(folder):
        for f in files:
            with suppress(OSError):  # renamed or evicted meanwhile
                total += os.stat(os.path.join(dirpath, f)).st_blocks * 512
    return total


def run_row(
    server: Any, name: str, python: str, lib: str, url: str, tmp: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """Run one row's subprocess; the server's byte counter is read at its phase marks."""
    cache = tmp / f"cache-{lib}"
    cmd = [python, str(ROW_SCRIPT), lib, url, str(cache), str(tmp / "data")]
    cmd += ["--batch-size", str(args.batch_size), "--workers", str(args.workers)]
    cmd += ["--part-samples", str(args.part_samples), "--warm-epochs", str(args.warm_epochs)]
    env = {**os.environ, "CHUTE_CACHE_DIR": str(cache)}  # chute's write staging: measured
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp, env=env
    )
    err: list[str] = []
    drain = threading.Thread(target=lambda: err.extend(proc.stderr or ()), daemon=True)
    drain.start()
    mon = RowMonitor(proc.pid, cache)
    mon.start()
    marks: dict[str, int] = {}
    write_peak = 0
    result: dict[str, Any] | None = None
    deadline = time.monotonic() + args.row_timeout
    timer = threading.Timer(args.row_timeout, proc.kill)
    timer.start()
    try:
        for line in proc.stdout or ():
            if line.startswith("@result "):
                result = json.loads(line[len("@result ") :])
            elif line.startswith("@"):
                marks[line.strip()[1:]] = server.get_bytes
                if line.strip() == "@read":  # the write is over: its peak, then the read's
                    write_peak, mon.peak_disk = mon.peak_disk, 0
        proc.wait()
    finally:
        timer.cancel()
        mon.stop()
        drain.join(5)
    if result is None:
        why = "timed out" if time.monotonic() >= deadline else f"exit {proc.returncode}"
        print("".join(err[-40:]), file=sys.stderr)
        errors = [s.strip() for s in err if re.match(r"^\w*(Error|Exception)\b", s)]
        return {"name": name, "skipped": f"{why}: {(errors or [''])[-1][:160]}"}
    cold, warms = result["cold"], result["warm"]
    warm = sorted(warms, key=lambda e: e["seconds"])[len(warms) // 2]  # the median epoch
    mb = 1e6
    return {
        "name": name,
        "write_s": result["write_s"],
        "open_s": result["open_s"],
        "first_batch_s": cold["first_batch_s"],
        "cold_s": cold["seconds"],
        "cold_samples": cold["samples"],
        "cold_samples_per_s": cold["samples"] / cold["seconds"],
        "warm_s": warm["seconds"],
        "warm_samples": warm["samples"],
        "warm_samples_per_s": warm["samples"] / warm["seconds"],
        "warm_epochs_s": [e["seconds"] for e in warms],
        "downloaded_mb": (marks.get("warm", 0) - marks.get("read", 0)) / mb,
        "downloaded_cold_mb": (marks.get("cold", 0) - marks.get("read", 0)) / mb,
        "downloaded_warm_mb": (marks.get("warm", 0) - marks.get("cold", 0)) / mb,
        "peak_disk_mb": mon.peak_disk / mb,
        # local disk while writing to the bucket (staging); LitData's writer is not measured
        "write_peak_disk_mb": write_peak / mb if lib in ("chute", "streaming") else None,
        "peak_pss_mb": mon.peak / mb,
        "one_get_s": result.get("one_get_s"),
    }


def contender_python(flag: str | None, venv: str) -> tuple[str | None, str]:
    python = flag or str(ROOT / venv / "bin" / "python")
    if Path(python).exists():
        return python, ""
    return None, f"no {python}: make that venv (see docs/remote.md)"


def ratios(
    rows: dict[str, dict[str, Any]], get_s: float, dataset_mb: float, part_mb: float
) -> dict[str, Any]:
    chute, local = rows["chute"], rows.get("chute local folder", {})
    others = [
        r["cold_samples_per_s"]
        for n, r in rows.items()
        if n in ("MosaicML Streaming", "LitData") and "cold_samples_per_s" in r
    ]
    out: dict[str, Any] = {}
    if "cold_samples_per_s" in chute:
        out["cold_vs_best_contender"] = (
            chute["cold_samples_per_s"] / max(others) if others else None
        )
        out["first_batch_vs_one_get"] = chute["first_batch_s"] / get_s
        out["downloaded_vs_dataset"] = chute["downloaded_mb"] / dataset_mb
        out["write_disk_vs_part"] = chute["write_peak_disk_mb"] / part_mb
        if "warm_samples_per_s" in local:
            out["warm_vs_local"] = chute["warm_samples_per_s"] / local["warm_samples_per_s"]
    return out


TARGETS = {
    "cold_vs_best_contender": ("cold epoch chute / max(Streaming, LitData)", ">= 1.5"),
    "warm_vs_local": ("warm epoch chute / chute local folder", ">= 0.8"),
    "first_batch_vs_one_get": ("first batch / one GET of a part", "<= 2"),
    "downloaded_vs_dataset": ("bytes downloaded / dataset bytes (1 node)", "<= 1.1"),
    "write_disk_vs_part": ("local disk while writing to s3:// / one part", "<= 3"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=102_400, help="5 parts of 20,480")
    ap.add_argument(
        "--part-samples",
        type=int,
        default=20_480,
        help="~63 MB parts / shards (MDSWriter's default size_limit is 64 MiB)",
    )
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--warm-epochs", type=int, default=3, help="the median one is shown")
    ap.add_argument("--row-timeout", type=float, default=300.0, help="seconds, per row")
    ap.add_argument("--streaming-python", help="default: .venv-streaming/bin/python")
    ap.add_argument("--litdata-python", help="default: .venv-litdata/bin/python")
    ap.add_argument("--rows", default="chute,local,streaming,litdata", help="which rows to run")
    ap.add_argument("--plot", help="write a bar chart here (e.g. docs/remote.png)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "remote.json"))
    args = ap.parse_args()

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = counting_server()
    server.create_bucket(BUCKET)
    os.environ.update(
        AWS_ENDPOINT_URL=server.endpoint,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_REGION="us-east-1",
        AWS_DEFAULT_REGION="us-east-1",
    )
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        os.environ.pop(var, None)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (args.samples, 3, 32, 32), dtype=np.uint8)
    labels = rng.integers(0, 10, args.samples).astype(np.int64)
    dataset_mb = (images.nbytes + labels.nbytes) / 1e6

    streaming_py, streaming_why = contender_python(args.streaming_python, ".venv-streaming")
    litdata_py, litdata_why = contender_python(args.litdata_python, ".venv-litdata")
    plan = [
        ("chute", sys.executable, "chute", f"s3://{BUCKET}/chute/train.chute", ""),
        ("chute local folder", sys.executable, "chute-local", "", ""),
        ("MosaicML Streaming", streaming_py, "streaming", f"s3://{BUCKET}/mds", streaming_why),
        ("LitData", litdata_py, "litdata", f"s3://{BUCKET}/litdata", litdata_why),
    ]
    rows: dict[str, dict[str, Any]] = {}
    get_s, part_key = float("nan"), "part-00000/image.npy"  # its largest file
    with tempfile.TemporaryDirectory(prefix="chute-remote-bench-") as tmp_str:
        tmp = Path(tmp_str)
        (tmp / "data").mkdir()
        np.save(tmp / "data" / "image.npy", images)
        np.save(tmp / "data" / "label.npy", labels)
        import chute

        local = chute.write(
            tmp / "cache-chute-local" / "train.chute",
            {"image": images, "label": labels},
            part_size=args.part_samples,
        )
        wanted = {"local": "chute-local"}
        chosen = {wanted.get(r, r) for r in args.rows.split(",")}
        for name, python, lib, url, why in plan:
            if lib not in chosen:
                continue
            print(f"... {name}", file=sys.stderr, flush=True)
            if python is None:
                rows[name] = {"name": name, "skipped": why}
                continue
            rows[name] = run_row(server, name, python, lib, url or str(local), tmp, args)
            if lib == "chute":  # measured by the row's process, after its epochs
                get_s = rows[name].get("one_get_s", get_s)
    server.stop()

    notes = {"LitData": "obstore client given allow_http for http://127.0.0.1"}
    for name, r in rows.items():
        r.setdefault("note", f"skipped: {r['skipped']}" if "skipped" in r else notes.get(name, ""))
    part_mb = dataset_mb * min(1.0, args.part_samples / args.samples)
    out = ratios(rows, get_s, dataset_mb, part_mb)
    print(
        f"{args.samples:,} samples uint8[3,32,32] + int64 label = {dataset_mb:.1f} MB, "
        f"parts of {args.part_samples} samples, batch {args.batch_size}, "
        f"{args.workers} workers; one GET of a part ({part_key}): {get_s * 1e3:.1f} ms"
    )
    print(table(list(rows.values()), COLUMNS))
    print()
    for key, (what, target) in TARGETS.items():
        value = out.get(key)
        shown = "-" if value is None else f"{value:.2f}"
        print(f"{what:<45} {shown:>6}   target {target}")
    path = write_json(
        args.out,
        {
            "samples": args.samples,
            "part_samples": args.part_samples,
            "batch_size": args.batch_size,
            "workers": args.workers,
            "dataset_mb": dataset_mb,
            "one_get_s": get_s,
            "one_get_key": part_key,
            "rows": list(rows.values()),
            "ratios": out,
            "targets": {k: t for k, (_, t) in TARGETS.items()},
        },
    )
    print(f"wrote {path}")
    if args.plot:
        plot(list(rows.values()), args.plot)


def plot(rows: list[dict[str, Any]], path: str) -> None:
    """Cold and warm samples/s per row, side by side (log scale: they differ 100x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if "cold_samples_per_s" in r]
    names = [r["name"] for r in rows][::-1]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for k, (key, label, color) in enumerate(
        [("cold_samples_per_s", "cold epoch", "#dd8452"), ("warm_samples_per_s", "warm", "#4c72b0")]
    ):
        ys = [i + 0.2 - 0.4 * k for i in range(len(names))]
        rates = [r[key] for r in rows][::-1]
        ax.barh(ys, rates, height=0.38, color=color, label=label)
        for y, v in zip(ys, rates, strict=True):
            ax.text(v, y, f" {v:,.0f}", va="center", fontsize=7)
    ax.set_yticks(range(len(names)), names)
    ax.set_xscale("log")
    ax.set_xlabel("samples/s (one moto S3 server on 127.0.0.1, 2 workers; shared machine)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
