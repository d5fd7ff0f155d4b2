"""chute.dataloader: a real torch DataLoader, batched __getitems__, Order-driven, flat memory."""

from __future__ import annotations

import functools
import gc
import inspect
import itertools
import os
import signal
import sys
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import torch

import chute
from chute.device import to_device
from chute.errors import (
    ArgumentError,
    ArgumentValueError,
    SchemaError,
    StaleIteratorError,
    WorkerError,
)
from chute.loader.dataloader import ChuteDataLoader, dataloader
from chute.loader.loader import Loader
from chute.order import Order

N = 103


@pytest.fixture(scope="module")
def ds(tmp_path_factory: pytest.TempPathFactory) -> chute.Dataset:
    path = tmp_path_factory.mktemp("tc") / "small.chute"
    chute.write(
        path,
        {
            "x": np.arange(N * 3, dtype=np.float32).reshape(N, 3),
            "y": np.arange(N),
            "tok": [np.arange(i % 5, dtype=np.int32) + i for i in range(N)],
            "name": [f"s{i}" for i in range(N)],
        },
    )
    return chute.open(path)


# Module-level callables: worker processes under spawn import them by name.
def add_pid(batch: dict[str, Any]) -> dict[str, Any]:
    batch["pid"] = torch.tensor(os.getpid())
    return batch


def double_x(sample: dict[str, Any]) -> dict[str, Any]:
    return {"x": sample["x"] * 2, "y": sample["y"], "sample_pid": os.getpid()}


_hoard: list[torch.Tensor] = []  # per worker process


def hoard(sample: dict[str, Any]) -> dict[str, Any]:
    _hoard.append(sample["x"][: ROW // 2].clone())  # a leak: 128 KB a sample, kept
    return {"y": sample["y"]}


def fail_on_sample_17(sample: dict[str, Any]) -> dict[str, Any]:
    if int(sample["y"]) == 17:
        raise KeyError("no label for 17")
    return {"y": sample["y"]}


def fail_on_a_batch(batch: dict[str, Any]) -> dict[str, Any]:
    if 17 in batch["y"].tolist():
        raise ValueError("bad batch")
    return batch


def ys(batches: Any) -> list[int]:
    return [int(v) for b in batches for v in b["y"]]


def test_is_a_real_dataloader_yielding_gathered_batches(ds: chute.Dataset) -> None:
    dl = dataloader(ds, 10, seed=3, num_workers=0)
    assert isinstance(dl, torch.utils.data.DataLoader) and isinstance(dl, ChuteDataLoader)
    assert len(dl) == 11
    plan = Order(N, 10, seed=3).plan()
    batches = list(dl)
    assert len(batches) == len(plan)
    for got, idx in zip(batches, plan, strict=True):
        want = ds.gather(idx)
        assert torch.equal(got["x"], want["x"]) and torch.equal(got["y"], want["y"])
        assert isinstance(got["tok"], chute.RaggedBatch)
        assert torch.equal(got["tok"].values, want["tok"].values)
        assert torch.equal(got["tok"].offsets, want["tok"].offsets)
        assert got["name"] == [f"s{i}" for i in idx]


@pytest.mark.parametrize(
    ("context", "persistent"),
    [("fork", False), ("fork", True), pytest.param("spawn", True, marks=pytest.mark.slow)],
)
def test_worker_processes_give_the_loader_order(
    ds: chute.Dataset, context: str, persistent: bool
) -> None:
    dl = dataloader(
        ds,
        16,
        seed=7,
        num_workers=2,
        multiprocessing_context=context,
        persistent_workers=persistent,
        batch_transform=add_pid,
    )
    ref = Loader(ds, 16, seed=7, num_workers=0)
    pids: set[int] = set()
    for epoch in range(2):
        dl.set_epoch(epoch)
        ref.set_epoch(epoch)
        batches = list(dl)
        assert ys(batches) == ys(ref)
        assert sorted(ys(batches)) == list(range(N))
        pids |= {int(b["pid"]) for b in batches}
        assert dl.state_dict()["epoch"] == epoch + 1
    assert os.getpid() not in pids
    assert len(pids) == (2 if persistent else 4)


def test_sample_transform_runs_per_sample_in_the_workers(ds: chute.Dataset) -> None:
    dl = dataloader(
        ds, 8, shuffle=False, num_workers=2, sample_transform=double_x, batch_transform=add_pid
    )
    for b in dl:
        assert b["x"].shape == (len(b["y"]), 3)
        assert torch.equal(b["x"], 2 * ds.gather(b["y"])["x"])
        assert (b["sample_pid"] == b["pid"]).all()  # ints collated by default_collate
        assert int(b["pid"]) != os.getpid()


def touch_and_report(sample: dict[str, Any]) -> dict[str, Any]:
    """Writes into every tensor of its sample (each must be writable, and its own), then
    reports what it saw: the sample as ds[i] gives it, plus this worker's pid."""
    x, tok = sample["x"], sample["tok"]
    assert x.shape == (3,) and sample["y"].shape == () and isinstance(sample["name"], str)
    seen = {"x": x.clone(), "y": sample["y"].clone(), "tok_sum": tok.sum(), "n_tok": len(tok)}
    x += 1000  # in place: a view shared with another sample, or with the map, would show it
    tok.fill_(-1)
    seen["name"] = sample["name"]
    seen["x_after"] = x.clone()
    seen["pid"] = os.getpid()
    return seen


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_sample_transform_gets_each_sample_as_ds_i_fresh_and_writable(
    ds: chute.Dataset, context: str
) -> None:
    dl = dataloader(
        ds,
        8,
        seed=2,
        num_workers=2,
        sample_transform=touch_and_report,
        multiprocessing_context=context,
        pin_memory=False,
    )
    seen: list[int] = []
    for b in dl:
        for k, i in enumerate(b["y"].tolist()):
            want = ds[i]
            assert torch.equal(b["x"][k], want["x"])
            assert torch.equal(b["x_after"][k], want["x"] + 1000)  # its own row only
            assert int(b["tok_sum"][k]) == int(want["tok"].sum())
            assert int(b["n_tok"][k]) == len(want["tok"])
            assert b["name"][k] == want["name"] == f"s{i}"
        assert int(b["pid"][0]) != os.getpid()
        seen += b["y"].tolist()
    assert sorted(seen) == list(range(N))
    assert torch.equal(ds.gather(np.arange(N))["x"], torch.arange(N * 3.0).reshape(N, 3))


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_a_failing_sample_transform_names_the_sample_in_any_context(
    ds: chute.Dataset, context: str
) -> None:
    dl = dataloader(
        ds,
        8,
        seed=1,
        num_workers=2,
        sample_transform=fail_on_sample_17,
        multiprocessing_context=context,
    )
    with pytest.raises(WorkerError, match="sample_transform failed on sample 17") as info:
        list(dl)
    assert "KeyError: 'no label for 17'" in str(info.value)


def test_collate_fn_collates_the_samples(ds: chute.Dataset) -> None:
    dl = dataloader(ds, 8, shuffle=False, num_workers=0, collate_fn=list)
    first = next(iter(dl))
    assert isinstance(first, list) and len(first) == 8
    assert first[3]["name"] == "s3" and torch.equal(first[3]["tok"], torch.arange(3) + 3)


def test_ragged_samples_without_collate_fn_is_a_clear_error(ds: chute.Dataset) -> None:
    dl = dataloader(ds, 8, shuffle=False, num_workers=0, sample_transform=dict)
    with pytest.raises(SchemaError, match="collate_fn"):
        next(iter(dl))


def test_state_counts_batches_received_not_prefetched(ds: chute.Dataset) -> None:
    dl = dataloader(ds, 10, seed=1, num_workers=2, prefetch_factor=4)
    it = iter(dl)
    head = [next(it) for _ in range(3)]
    state = dl.state_dict()
    assert (state["epoch"], state["consumed"]) == (0, 30)
    del it

    resumed = dataloader(ds, 10, seed=1, num_workers=0)
    resumed.load_state_dict(state)
    full = ys(dataloader(ds, 10, seed=1, num_workers=0))
    assert ys(head) + ys(resumed) == full
    assert resumed.state_dict()["epoch"] == 1


def test_iterating_again_starts_a_fresh_pass(ds: chute.Dataset) -> None:
    dl = dataloader(ds, 10, seed=2, num_workers=0)
    first = []
    for i, b in enumerate(dl):
        first.append(b)
        if i == 4:
            break
    assert dl.state_dict()["consumed"] == 50
    second = list(dl)
    full = ys(dataloader(ds, 10, seed=2, num_workers=0))
    assert ys(first) == full[:50] and ys(second) == full  # the whole epoch 0 again
    assert dl.state_dict()["epoch"] == 1


def test_ranks_share_the_epoch(ds: chute.Dataset) -> None:
    per_rank = [
        ys(dataloader(ds, 8, seed=5, num_workers=0, rank=r, world_size=3)) for r in range(3)
    ]
    assert len({len(r) for r in per_rank}) == 1  # same number of samples, padded
    assert set().union(*map(set, per_rank)) == set(range(N))
    assert sum(map(len, per_rank)) - N < 3


def test_epochs_differ_and_repeat_by_seed(ds: chute.Dataset) -> None:
    def epoch_ys(seed: int, epoch: int) -> list[int]:
        dl = dataloader(ds, 10, seed=seed, num_workers=0)
        dl.set_epoch(epoch)
        return ys(dl)

    assert epoch_ys(0, 1) == epoch_ys(0, 1)
    assert epoch_ys(0, 1) != epoch_ys(0, 2)
    assert epoch_ys(0, 1) != epoch_ys(1, 1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sampler": [0]}, "sampler"),
        ({"batch_sampler": [[0]]}, "batch_sampler"),
        ({"dataset": [0]}, "dataset"),
        ({"in_order": False}, "in_order"),
        ({"generator": torch.Generator().manual_seed(1)}, "generator=.*pass seed="),
    ],
)
def test_rejects_what_the_order_owns(ds: chute.Dataset, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ArgumentValueError, match=match):
        dataloader(ds, 4, **kwargs)


def finish_without_stopiteration(dl: ChuteDataLoader, how: str) -> list[int]:
    if how == "zip":  # the last next() is never made
        return ys(b for _, b in zip(range(len(dl)), dl, strict=False))
    return ys(itertools.islice(dl, len(dl)))


@pytest.mark.parametrize(
    ("how", "workers", "persistent"), [("zip", 0, False), ("islice", 2, False), ("zip", 2, True)]
)
def test_an_epoch_taken_without_stopiteration_is_over(
    ds: chute.Dataset, how: str, workers: int, persistent: bool
) -> None:
    dl = dataloader(ds, 10, seed=2, num_workers=workers, persistent_workers=persistent)
    ref = Loader(ds, 10, seed=2, num_workers=0)
    assert finish_without_stopiteration(dl, how) == ys(ref)
    assert ys(dl) == ys(ref)  # epoch 1, whole: not an empty rest of epoch 0
    assert dl.state_dict()["epoch"] == ref.state_dict()["epoch"] == 2
    # a checkpoint saved after the last step, resumed: that epoch is over
    finish_without_stopiteration(dl, how)
    resumed = dataloader(ds, 10, seed=2, num_workers=0)
    resumed.load_state_dict(dl.state_dict())
    resumed.set_epoch(2)
    assert list(resumed) == [] and resumed.state_dict()["epoch"] == 3


@pytest.mark.parametrize(("workers", "persistent"), [(0, False), (2, False), (2, True)])
def test_a_new_iter_ends_the_previous_one_which_then_raises(
    ds: chute.Dataset, workers: int, persistent: bool
) -> None:
    dl = dataloader(ds, 10, seed=1, num_workers=workers, persistent_workers=persistent)
    full = ys(Loader(ds, 10, seed=1, num_workers=0))
    first = iter(dl)
    head = ys([next(first), next(first)])
    second = iter(dl)
    with pytest.raises(StaleIteratorError, match=r"ended after 2 batches: iter\(\) was called"):
        next(first)
    assert head == full[:20] and ys(second) == full  # the newer pass: the whole epoch
    with pytest.raises(StaleIteratorError, match="one pass at a time"):
        list(zip(dl, dl, strict=False))
    it = iter(dl)
    next(it)
    dl.set_epoch(dl.state_dict()["epoch"])  # the same epoch: the pass goes on
    next(it)
    dl.set_epoch(7)
    with pytest.raises(StaleIteratorError, match=r"set_epoch\(7\)"):
        next(it)
    exhausted = iter(dl)
    list(exhausted)
    iter(dl)
    assert list(exhausted) == []  # it ended by itself: not stale


@pytest.mark.parametrize("workers", [0, 2])
def test_a_failing_sample_transform_names_the_sample(ds: chute.Dataset, workers: int) -> None:
    dl = dataloader(ds, 8, shuffle=False, num_workers=workers, sample_transform=fail_on_sample_17)
    with pytest.raises(WorkerError, match="sample_transform failed on sample 17") as info:
        list(dl)
    if workers == 0:  # from a worker process, torch re-raises it with the traceback as text
        assert isinstance(info.value.__cause__, KeyError)
    else:
        assert "KeyError: 'no label for 17'" in str(info.value)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_failing_batch_transform_names_the_batch(ds: chute.Dataset, workers: int) -> None:
    dl = dataloader(ds, 8, shuffle=False, num_workers=workers, batch_transform=fail_on_a_batch)
    with pytest.raises(WorkerError, match=r"batch of samples \[16, 17, 18, 19\]\.\.\.: ValueError"):
        list(dl)


def test_a_chute_batch_transform_is_refused_naming_the_loader_that_takes_it(
    ds: chute.Dataset,
) -> None:
    """Mosaic, MixUp, CutMix draw from (indices, seed, epoch): only chute.Loader passes them."""
    for op in (chute.MixUp(10, label="y"), chute.Mosaic()):
        with pytest.raises(
            ArgumentError, match=rf"use chute.Loader\(\.\.\., transform={type(op).__name__}"
        ):
            dataloader(ds, 8, batch_transform=op)


def test_rejects_a_non_chute_dataset() -> None:
    with pytest.raises(ArgumentError, match="chute Dataset"):
        dataloader(torch.utils.data.TensorDataset(torch.ones(3)), 2)


def test_to_device_passes_state_through(ds: chute.Dataset) -> None:
    dl = dataloader(ds, 10, seed=4, num_workers=0)
    wrapped = to_device(dl, "cpu")
    assert len(wrapped) == len(dl)
    it = iter(wrapped)
    next(it)
    next(it)
    assert wrapped.state_dict()["consumed"] == 20


# ------------------------------------------------------------- dead workers, Ctrl-C

_init_id = -1  # set by init_worker in each worker process


def init_worker(worker_id: int) -> None:
    global _init_id
    _init_id = worker_id


def report_worker(batch: dict[str, Any]) -> dict[str, Any]:
    batch["init_id"] = torch.tensor(_init_id)
    batch["ignores_sigint"] = torch.tensor(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
    return batch


def die_once_on_sample_16(flag: Path, batch: dict[str, Any]) -> dict[str, Any]:
    if 16 in batch["y"] and not flag.exists():
        flag.touch()
        os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer would
    return batch


def test_workers_ignore_sigint_and_run_the_users_worker_init_fn(ds: chute.Dataset) -> None:
    dl = dataloader(ds, 8, num_workers=2, worker_init_fn=init_worker, batch_transform=report_worker)
    batches = list(dl)
    assert {int(b["init_id"]) for b in batches} == {0, 1}
    assert all(bool(b["ignores_sigint"]) for b in batches)  # the main process stops them


@pytest.mark.parametrize("persistent", [False, True])
def test_a_killed_worker_is_named_and_the_next_iter_starts_new_ones(
    ds: chute.Dataset, tmp_path: Path, persistent: bool
) -> None:
    dl = dataloader(
        ds,
        8,
        shuffle=False,
        num_workers=2,
        batch_transform=functools.partial(die_once_on_sample_16, tmp_path / "died"),
        multiprocessing_context="fork",
        persistent_workers=persistent,
    )
    before = {c.pid for c in psutil.Process().children()}
    got: list[int] = []
    with pytest.raises(WorkerError, match=r"worker process \d+ \(killed by SIGKILL\)") as info:
        for b in dl:
            got += b["y"].tolist()
    pid = int(str(info.value).split("worker process ")[1].split()[0])
    assert pid not in before and not psutil.pid_exists(pid)
    assert isinstance(info.value.__cause__, (RuntimeError, ConnectionError, EOFError))
    # The other worker is stopped when the error is raised, though the traceback (held by
    # `info`) keeps torch's iterator alive.
    assert [c.pid for c in psutil.Process().children() if c.pid not in before] == []
    assert got == list(range(len(got))) and len(got) <= 16  # (batch 0 or 1 may be in flight)
    assert ys(dl) == list(range(N))  # new workers, a fresh pass of the epoch


def collect_garbage(worker_id: int) -> None:
    """What allocations in a forked worker trigger sooner or later; an error in a finalizer
    is printed as "Exception ignored" (pytest's hook, inherited by the fork, would hide it)."""
    sys.unraisablehook = sys.__unraisablehook__
    gc.collect()


def failed_pass(dl: ChuteDataLoader) -> str:
    """Run ``dl`` into its worker's error; check its workers are already gone. The exception
    is dropped here: its traceback cycle (which holds torch's iterator) is left to the gc."""
    before = {c.pid for c in psutil.Process().children()}
    try:
        list(dl)
    except WorkerError as exc:
        assert [c.pid for c in psutil.Process().children() if c.pid not in before] == []
        return str(exc)
    raise AssertionError("the pass did not fail")


@pytest.mark.slow  # worker processes
@pytest.mark.parametrize("persistent", [False, True])
def test_a_failed_pass_stops_its_workers_before_raising(
    ds: chute.Dataset, persistent: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    """Else the failed iterator was collected later inside the next DataLoader's forked
    workers: "Exception ignored ... AssertionError: can only test a child process"."""
    dl = dataloader(
        ds,
        8,
        shuffle=False,
        num_workers=2,
        batch_transform=fail_on_a_batch,
        multiprocessing_context="fork",
        persistent_workers=persistent,
    )
    gc.collect()  # garbage of earlier tests (their iterators) is not this test's to judge
    capfd.readouterr()
    gc.disable()  # the failed iterators stay uncollected here until the next workers fork
    try:
        first = failed_pass(dl)
        assert "ValueError: bad batch" in first
        assert failed_pass(dl) == first  # the next iter() starts new workers (also persistent)
        nxt = dataloader(
            ds,
            8,
            shuffle=False,
            num_workers=2,
            multiprocessing_context="fork",
            worker_init_fn=collect_garbage,
        )
        assert ys(nxt) == list(range(N))
    finally:
        gc.enable()
    assert "Exception ignored" not in capfd.readouterr().err


_sigint_at_fork: list[int] = []  # armed by a test: the next fork sends this process a SIGINT
_hook_registered = False


def _sigint_after_fork() -> None:
    if _sigint_at_fork:
        _sigint_at_fork.pop()
        os.kill(os.getpid(), signal.SIGINT)  # its KeyboardInterrupt is raised inside the hook


def test_ctrl_c_while_the_workers_start_is_not_lost(ds: chute.Dataset) -> None:
    """A Ctrl-C in a CPython at-fork hook used to be printed as 'Exception ignored' and dropped;
    now ``iter()`` raises it once the workers are up, and they are stopped."""
    global _hook_registered
    if not _hook_registered:  # (at-fork hooks cannot be removed: it stays disarmed)
        os.register_at_fork(after_in_parent=_sigint_after_fork)
        _hook_registered = True
    dl = dataloader(ds, 8, num_workers=2, multiprocessing_context="fork")
    handler = signal.getsignal(signal.SIGINT)
    before = {c.pid for c in psutil.Process().children()}
    _sigint_at_fork.append(signal.SIGINT)
    try:
        with pytest.raises(KeyboardInterrupt):
            iter(dl)
    finally:
        _sigint_at_fork.clear()
    assert signal.getsignal(signal.SIGINT) is handler  # restored
    assert [c.pid for c in psutil.Process().children() if c.pid not in before] == []


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pin_memory_pins_batches(ds: chute.Dataset) -> None:
    dl = dataloader(ds, 10, num_workers=2, pin_memory=True)
    for b in dl:
        assert b["x"].is_pinned() and b["tok"].values.is_pinned()


# ------------------------------------------------------------- worker memory

ROW = 64 * 1024  # float32: 256 KB a sample
BIG = 1200  # 300 MB


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> chute.Dataset:
    path = tmp_path_factory.mktemp("tc") / "big.chute"
    with chute.Writer(path) as w:
        for start in range(0, BIG, 100):
            ids = np.arange(start, start + 100)
            w.extend({"x": np.repeat(ids[:, None].astype(np.float32), ROW, 1), "y": ids})
    return chute.open(path)


def anonymous_mb(pid: int) -> float:
    """``Anonymous`` of a process, from /proc/<pid>/smaps_rollup, in MB."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no Anonymous line in /proc/{pid}/smaps_rollup")


def worker_memory(dl: ChuteDataLoader, epochs: int) -> dict[int, list[float]]:
    """Anonymous MB of each worker process after each epoch."""
    seen: dict[int, list[float]] = {}
    for epoch in range(epochs):
        dl.set_epoch(epoch)
        pids = {int(b["pid"]) for b in dl}
        for pid in pids:
            seen.setdefault(pid, []).append(anonymous_mb(pid))
    return seen


needs_smaps = pytest.mark.skipif(
    not Path("/proc/self/smaps_rollup").exists(), reason="needs Linux /proc/<pid>/smaps_rollup"
)


@needs_smaps
@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_worker_memory_stays_flat_over_epochs(big: chute.Dataset, context: str) -> None:
    dl = dataloader(
        big,
        32,
        num_workers=2,
        multiprocessing_context=context,
        persistent_workers=True,
        batch_transform=add_pid,
    )
    mem = worker_memory(dl, 3)
    assert len(mem) == 2 and all(len(m) == 3 for m in mem.values())
    # Each worker gathered ~300 MB over epochs 2-3, in 8 MB batches; an allocator may keep a
    # batch or two, any leak or copy-on-write of the data would be hundreds of MB.
    for pid, (after1, _, after3) in mem.items():
        assert after3 - after1 < 24, f"worker {pid} Anonymous grew {after1:.0f} -> {after3:.0f} MB"


@needs_smaps
def test_the_memory_probe_sees_a_leak(big: chute.Dataset) -> None:
    """Negative control: a sample_transform that keeps what it reads grows a worker's memory."""
    dl = dataloader(
        big,
        32,
        num_workers=2,
        multiprocessing_context="fork",
        persistent_workers=True,
        sample_transform=hoard,
        batch_transform=add_pid,
    )
    mem = worker_memory(dl, 3)
    assert all(after3 - after1 > 48 for after1, _, after3 in mem.values()), mem


def test_options_after_batch_size_are_keyword_only(ds: chute.Dataset) -> None:
    with pytest.raises(TypeError):
        dataloader(ds, 8, False)
    params = inspect.signature(dataloader).parameters.values()
    assert [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD] == [
        "ds",
        "batch_size",
    ]
