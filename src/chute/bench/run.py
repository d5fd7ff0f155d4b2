"""The bench harness: copy a sample of the user's data into every contender's store, then run
each contender for one epoch in the same shuffled order, batch size and worker count."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .. import format as fmt
from .. import kinds
from .._args import check_int, default_workers
from .._torch import as_numpy
from ..errors import DatasetNotFoundError, SchemaError
from ..order import Order
from ..reader.opening import open as open_dataset
from ..store.url import is_url
from ..writer.writer import Writer
from .contenders import CONTENDERS, Contender, Setup
from .machine import machine
from .measure import Result, measure
from .report import BenchReport

CHUNK_BYTES = 64 << 20  # rows copied per step while writing the stores


def _chunks(
    ds: Any, names: Sequence[str], n: int, row_bytes: int, as_array: Callable = as_numpy
) -> Callable:
    """``chunks(multiple)``: (start, {field: rows}) over ``ds[:n]``, ~CHUNK_BYTES at a time.

    Rows are numpy arrays (bfloat16 as its 16 bits, what the stores hold) unless ``as_array``
    says otherwise.
    """

    def chunks(multiple: int) -> Iterator[tuple[int, dict[str, Any]]]:
        step = max(multiple, (CHUNK_BYTES // max(1, row_bytes)) // multiple * multiple)
        for start in range(0, n, step):
            batch = ds[start : min(n, start + step)]
            yield start, {k: as_array(batch[k]) for k in names}

    return chunks


def _open_source(source: str | os.PathLike, work: Path, log: Callable[[str], None]) -> Any:
    if is_url(source):  # a dataset in object storage: read through its cache, URL intact
        return open_dataset(source)
    path = Path(source)
    if (path / fmt.MANIFEST).is_file():
        return open_dataset(path)
    if not path.exists():
        raise DatasetNotFoundError(f"{path} does not exist (expected a chute dataset or a source)")
    log(f"converting {path} to chute first (any source chute.convert accepts)")
    from ..conversion import convert  # lazily: it imports every source reader

    return open_dataset(convert(path, work / "source.chute"))


def _available(c: Contender) -> str | None:
    """None when the contender can run, else why not."""
    missing = [m for m in c.requires if importlib.util.find_spec(m) is None]
    return f"not installed: {c.install}" if missing else None


def run_bench(
    source: str | os.PathLike,
    *,
    max_bytes: float = 2e9,
    batch_size: int = 256,
    workers: int | None = None,
    seed: int = 0,
    cold: bool = False,
    time_limit: float | None = 60.0,
    work_dir: str | os.PathLike | None = None,
    contenders: Sequence[Contender] = CONTENDERS,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> BenchReport:
    """Benchmark every contender on a sample of ``source`` (a chute dataset or any source
    :func:`chute.convert` accepts); see ``docs/benchmarks.md``.

    The first ``max_bytes`` of the fixed-shape fields are copied into each store under
    ``work_dir`` (a temporary folder, removed afterwards). ``cold=True`` empties the page cache
    before each contender; otherwise each starts with its files read once (warm). A contender
    still reading after ``time_limit`` seconds is stopped (None: no limit), see
    :mod:`chute.bench.measure`.
    """
    batch_size = check_int("batch_size", batch_size, 1)
    workers = default_workers() if workers is None else check_int("workers", workers, 0)
    parent = Path(work_dir) if work_dir is not None else None
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="chute-bench-", dir=parent))
    try:
        n_stores = len({c.write for c in contenders if c.write is not None})
        report, copy = _copy_sample(source, root, int(max_bytes), n_stores, log)
        report.config = {
            "batch_size": batch_size,
            "workers": workers,
            "seed": seed,
            "cache": "cold" if cold else "warm",
            "time_limit_s": time_limit,
        }
        with open_dataset(copy) as ds:
            n, names = len(ds), list(ds.schema)
            setup = Setup(
                root=root,
                copy=copy,
                fields=kinds.fixed_fields(ds.schema),
                num_samples=n,
                batch_size=batch_size,
                workers=workers,
                seed=seed,
                batches=tuple(Order(n, batch_size, shuffle=True, seed=seed).plan()),
                chunks=_chunks(ds, names, n, report.dataset["row_bytes"]),
            )
            written = _write_stores(contenders, setup, log)
        for c in contenders:
            report.results.append(_run_one(c, setup, written, cold, time_limit, report, log))
        _check(report.results, n)
        return report
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _copy_sample(
    source: str | os.PathLike, root: Path, max_bytes: int, n_stores: int, log: Callable
) -> tuple[BenchReport, Path]:
    """Copy the first ``max_bytes`` of the fixed-shape fields into a fresh chute dataset."""
    src = _open_source(source, root, log)
    fields = kinds.fixed_fields(src.schema)
    if not fields:
        raise SchemaError(
            f"{source} has no fixed-shape (chute.fields.Tensor) field; chute bench compares "
            "fixed-shape fields only"
        )
    for k in src.schema.keys() - fields.keys():
        log(f"field {k!r} is {src.schema[k].kind}: not benchmarked (fixed-shape fields only)")
    row_bytes = sum(f.row_nbytes() for f in fields.values())
    n = min(len(src), max(1, max_bytes // max(1, row_bytes)))
    need = n * row_bytes * (n_stores + 1)
    free = shutil.disk_usage(root).free
    if need > free:
        raise OSError(
            f"chute bench needs ~{need / 1e9:.1f} GB in {root.parent} ({n_stores + 1} copies of "
            f"{n * row_bytes / 1e9:.1f} GB) but {free / 1e9:.1f} GB are free; lower --max-bytes "
            "or pass --work-dir on a bigger disk"
        )
    copy = root / "bench.chute"
    log(f"copying {n:,} of {len(src):,} samples ({n * row_bytes / 1e6:,.0f} MB) to {root}")
    with src, Writer(copy, schema=fields) as w:
        for _, rows in _chunks(src, list(fields), n, row_bytes, as_array=lambda t: t)(1):
            w.extend(rows)  # tensors: a bfloat16 field stays bfloat16
    dataset = {
        "source": str(source),
        "samples": n,
        "source_samples": len(src),
        "fields": {k: kinds.field_to_json(f) for k, f in fields.items()},
        "row_bytes": row_bytes,
        "bytes": n * row_bytes,
    }
    return BenchReport(dataset, {}, machine()), copy


def _write_stores(
    contenders: Sequence[Contender], setup: Setup, log: Callable
) -> dict[Callable, Path | Exception]:
    """Write each store once (contenders may share one); a failure is kept, not raised."""
    written: dict[Callable, Path | Exception] = {}
    for c in contenders:
        if c.write is None or c.write in written or _available(c):
            continue
        log(f"writing the store for {c.name}")
        try:
            written[c.write] = c.write(setup)
        except Exception as exc:  # one broken store must not stop the bench
            written[c.write] = exc
    return written


def _run_one(
    c: Contender,
    setup: Setup,
    written: dict[Callable, Path | Exception],
    cold: bool,
    time_limit: float | None,
    report: BenchReport,
    log: Callable,
) -> Result:
    missing = _available(c)
    if missing:
        return Result(c.name, c.note, "skipped", missing)
    store = written.get(c.write) if c.write is not None else None
    if isinstance(store, Exception):
        return Result(c.name, c.note, "failed", _why(store))
    log(f"running {c.name}")
    try:
        r = measure(c, setup, store, cold, time_limit)
    except Exception as exc:  # reported in the table; the others run
        return Result(c.name, c.note, "failed", _why(exc))
    if r.extra.get("cache") == "posix_fadvise" and report.config["cache"] == "cold":
        log(
            "dropping the page cache is not permitted here (needs root to write "
            "/proc/sys/vm/drop_caches); evicting each store's own files with "
            "posix_fadvise(DONTNEED) instead"
        )
        report.config["cache"] = "cold (posix_fadvise)"
    return r


def _check(results: list[Result], n: int) -> None:
    """Compare checksums with the first row's (the gather limit: np.take on arrays in RAM); a
    stopped contender is compared with the reference's digest after as many batches."""
    ok = [r for r in results if r.status == "ok"]
    ref = ok[0].prefix if ok else []
    for r in ok:
        if r.extra.get("order") == "own":  # checked as a set of samples by measure()
            continue
        if 0 < r.batches <= len(ref):
            whole = r.stopped or r.samples == n
            r.checksum_ok = whole and r.checksum == ref[r.batches - 1]


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
