"""Measuring one contender: time to first batch, throughput, peak memory, and a checksum.

Time to first batch runs from the cold open (the contender's ``open``: loading arrays, opening
files, starting workers) to the first batch in hand. Throughput is the steady state: the samples
after the first batch over the time after it. Memory is the peak PSS of this process and all
its children (DataLoader workers), sampled every 20 ms or more and after the last batch, above
what the tree used before the open; PSS splits shared pages between the processes mapping them,
so forked workers sharing one copy are not counted twice. The checksum hashes every batch's
bytes, field by field, in the order received: equal checksums mean the same samples in the
same order, each exactly once.

A contender still running after ``time_limit`` seconds is stopped after its current batch (some
layouts read a sample in tens of milliseconds: a full epoch could take hours); its throughput is
measured over what it read, and its checksum is compared with the reference's after as many
batches.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import xxhash

from ..errors import require
from .contenders.contender import Batch, Contender, Setup, files_under

MB = 1e6


@dataclass
class Result:
    """One row of the bench: what was measured, or why nothing was."""

    name: str
    note: str
    status: str = "ok"  # "ok", "skipped" or "failed"
    reason: str = ""
    first_batch_s: float | None = None
    samples_per_s: float | None = None
    mb_per_s: float | None = None
    epoch_s: float | None = None
    samples: int = 0
    batches: int = 0
    stopped: bool = False  # hit the time limit before the end of the epoch
    checksum: str = ""
    checksum_ok: bool | None = None  # set by the harness against the reference
    prefix: list[str] = field(default_factory=list, repr=False)  # digest after each batch
    peak_pss_mb: float | None = None
    peak_anon_mb: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class BatchHash:
    """xxh3-64 over the raw bytes of each batch's fields, in the bench's field order."""

    def __init__(self, fields: list[str]):
        self._fields = fields
        self._h = xxhash.xxh3_64()
        self.samples = 0
        self.prefix: list[str] = []  # the digest after each batch

    def update(self, batch: Batch) -> int:
        rows = 0
        for name in self._fields:
            self._h.update(_bytes(batch[name]).data)
            rows = len(batch[name])
        self.samples += rows
        self.prefix.append(self._h.hexdigest())
        return rows

    def hexdigest(self) -> str:
        return self._h.hexdigest()


class SampleSetHash(BatchHash):
    """An order-independent digest, for contenders that cannot read in the bench's order: the
    sum mod 2**64 of each sample's xxh3-64 (over its fields' bytes in the bench's order). Equal
    digests and sample counts mean the same samples, each once, in any order."""

    def __init__(self, fields: list[str]):
        super().__init__(fields)
        self._sum = 0

    def update(self, batch: Batch) -> int:
        rows = len(batch[self._fields[0]])
        flat = [_bytes(batch[n]).reshape(rows, -1) for n in self._fields]
        for row in np.concatenate(flat, axis=1) if len(flat) > 1 else flat[0]:
            self._sum += xxhash.xxh3_64_intdigest(row.data)
        self.samples += rows
        self.prefix.append(self.hexdigest())
        return rows

    def hexdigest(self) -> str:
        return f"{self._sum % 2**64:016x}"


def set_digest(setup: Setup) -> str:
    """The :class:`SampleSetHash` of the whole sample, read from the bench's chute copy."""
    h = SampleSetHash(list(setup.fields))
    for _, rows in setup.chunks(1):
        h.update(rows)
    return h.hexdigest()


def _bytes(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        # bfloat16 has no numpy dtype: hash the bytes through a uint8 view
        return x.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8)


def _pss(pid: int) -> tuple[int, int]:
    """(PSS, anonymous PSS) of one process in bytes; 0s when it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            text = f.read()
    except FileNotFoundError:
        return 0, 0
    except OSError:
        return _psutil_pss(pid)
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(b":")
        if key in (b"Pss", b"Pss_Anon"):
            values[key] = int(rest.split()[0]) * 1024
    return values.get(b"Pss", 0), values.get(b"Pss_Anon", values.get(b"Pss", 0))


def _psutil_pss(pid: int) -> tuple[int, int]:
    psutil = require("psutil", "bench")
    try:
        info = psutil.Process(pid).memory_full_info()
    except psutil.Error:
        return 0, 0
    pss = getattr(info, "pss", info.rss)  # not Linux: RSS is the best there is
    return pss, getattr(info, "uss", pss)


class TreeMemory:
    """Samples the PSS of this process tree in a thread, between ``start()`` and ``stop()``."""

    def __init__(self, interval: float = 0.02):
        self._psutil = require("psutil", "bench")
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.baseline = self.peak = self.baseline_anon = self.peak_anon = 0

    def sample(self) -> tuple[int, int]:
        me = self._psutil.Process()
        try:
            pids = [me.pid] + [c.pid for c in me.children(recursive=True)]
        except self._psutil.Error:
            pids = [me.pid]
        total = anon = 0
        for pid in pids:
            p, a = _pss(pid)
            total += p
            anon += a
        return total, anon

    def _run(self) -> None:
        # Reading smaps_rollup walks the page tables: ~20 ms for a process mapping 1 GB. Keep
        # the sampler under ~5% of a core, or it would slow down what it measures.
        wait = self._interval
        while not self._stop.wait(wait):
            t = time.perf_counter()
            self.record()
            wait = max(self._interval, 20 * (time.perf_counter() - t))

    def record(self) -> None:
        total, anon = self.sample()
        self.peak = max(self.peak, total)
        self.peak_anon = max(self.peak_anon, anon)

    def start(self) -> None:
        self.baseline, self.baseline_anon = self.peak, self.peak_anon = self.sample()
        self._thread = threading.Thread(target=self._run, name="chute-bench-pss", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.record()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


# ------------------------------------------------------------------------------ page cache


def warm(paths: list[Path]) -> None:
    """Read every file once, so the contender starts with its data in the page cache."""
    buf = bytearray(8 << 20)
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def drop_caches(paths: list[Path]) -> str:
    """Empty the page cache before a cold run; returns how (or raises when impossible).

    Writing ``/proc/sys/vm/drop_caches`` needs root. Without it, the store's own files are
    evicted with ``posix_fadvise(POSIX_FADV_DONTNEED)``, which any user may do to files they
    can read (clean pages only: everything is synced first).
    """
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "drop_caches"
    except OSError:
        pass
    evict(paths)
    return "posix_fadvise"


def evict(paths: list[Path]) -> None:
    """Drop these files' pages from the page cache (``posix_fadvise(DONTNEED)``; no root
    needed), so the next read comes from the disk, as after a reboot."""
    if not hasattr(os, "posix_fadvise"):
        raise OSError("cannot evict files from the page cache: no posix_fadvise on this system")
    os.sync()  # only clean pages can be dropped
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# ------------------------------------------------------------------------------ one run


def measure(
    contender: Contender,
    setup: Setup,
    store: Path | None,
    cold: bool,
    time_limit: float | None = None,
) -> Result:
    """Run one epoch of ``contender`` and measure it (see the module docstring)."""
    result = Result(contender.name, contender.note)
    files = files_under(store) if store is not None else []
    if cold:
        result.extra["cache"] = drop_caches(files)
    else:
        warm(files)
    gc.collect()
    mem = TreeMemory()
    hasher = (SampleSetHash if contender.own_order else BatchHash)(list(setup.fields))
    mem.start()
    try:
        t0 = time.perf_counter()
        loader = contender.open(setup)
        it = iter(loader)
        first = next(it, None)
        if first is None:
            raise RuntimeError(f"{contender.name} yielded no batch")
        first_rows = hasher.update(first)
        del first
        t1 = t_last = time.perf_counter()
        for batch in it:
            hasher.update(batch)
            t_last = time.perf_counter()
            if time_limit and t_last - t0 > time_limit:
                result.stopped = True
                break
        mem.record()  # before anything is freed: a short epoch may fall between two samples
        del it, loader  # workers and buffers go before the memory sampler stops
    finally:
        mem.stop()
    gc.collect()
    result.first_batch_s = t1 - t0
    result.epoch_s = t_last - t0
    rest = hasher.samples - first_rows
    result.samples_per_s = rest / (t_last - t1) if rest else hasher.samples / (t1 - t0)
    result.mb_per_s = result.samples_per_s * setup.row_nbytes / MB
    result.samples = hasher.samples
    result.batches = len(hasher.prefix)
    result.prefix = hasher.prefix
    result.checksum = hasher.hexdigest()
    result.peak_pss_mb = (mem.peak - mem.baseline) / MB
    result.peak_anon_mb = (mem.peak_anon - mem.baseline_anon) / MB
    if contender.own_order:  # checked here, untimed: the harness compares in-order digests
        result.extra["order"] = "own"
        if not result.stopped:  # a part read in its own order has no reference to match
            whole = result.samples == setup.num_samples
            result.checksum_ok = whole and result.checksum == set_digest(setup)
    return result
