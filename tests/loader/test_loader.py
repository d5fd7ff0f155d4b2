"""chute.Loader: content and order, buffer lifetimes, errors, shutdown, epochs and passes,
resume, validation."""

from __future__ import annotations

import gc
import inspect
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from typing import Any

import numpy as np
import pytest
import torch

import chute
from chute._args import usable_cpus
from chute.errors import (
    ArgumentError,
    ArgumentValueError,
    SchemaError,
    StaleIteratorError,
    WorkerError,
)

N = 203  # not a multiple of the batch sizes used: the last batch is short


def loader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("chute-loader")]


def gather_threads(workers: int) -> int:
    """The threads a plain gather starts: with no CPU to spare, the consumer takes one's place."""
    cpus = usable_cpus()
    return cpus - 1 if workers >= cpus > 1 else workers


@pytest.fixture(autouse=True)
def no_thread_leak():
    yield
    assert loader_threads() == []  # without gc.collect(): stopping must not wait for the GC


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> chute.Dataset:
    """x[i] = i (mod 256) everywhere, y[i] = i, tok[i] = [i] * (i % 5), s[i] = str(i)."""
    path = tmp_path_factory.mktemp("loader") / "d.chute"
    idx = np.arange(N)
    chute.write(
        path,
        {
            "x": np.broadcast_to((idx % 256).astype(np.uint8)[:, None, None], (N, 3, 4)).copy(),
            "y": idx,
            "tok": [np.full(i % 5, i, np.int32) for i in idx],
            "s": [str(i) for i in idx],
        },
        schema={
            "x": chute.fields.Tensor((3, 4), "uint8"),
            "y": chute.fields.Tensor((), "int64"),
            "tok": chute.Ragged("int32"),
            "s": chute.String(),
        },
    )
    return chute.open(path)


def check_batch(batch: dict, idx: np.ndarray) -> None:
    assert batch["y"].tolist() == idx.tolist()
    assert torch.equal(
        batch["x"], torch.from_numpy(idx % 256).to(torch.uint8)[:, None, None].expand(-1, 3, 4)
    )
    assert [t.tolist() for t in batch["tok"].tolist()] == [[i] * (i % 5) for i in idx.tolist()]
    assert batch["s"] == [str(i) for i in idx.tolist()]


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_one_epoch_in_order_with_right_content(ds, workers):
    loader = chute.Loader(ds, 16, seed=7, num_workers=workers)
    expected = loader.order.plan()
    batches = [(b["y"].clone(), b) for b in loader]
    assert len(batches) == len(loader) == len(expected) == 13
    for (y, _), idx in zip(batches, expected, strict=True):
        assert y.tolist() == idx.tolist()
    assert sorted(torch.cat([y for y, _ in batches]).tolist()) == list(range(N))
    for b in loader:  # content, checked while each batch is still valid
        check_batch(b, b["y"].numpy())
    assert loader.order.epoch == 2


def test_block_shuffle_reads_few_blocks_per_batch(ds):
    loader = chute.Loader(ds, 20, seed=5, num_workers=2, block_size=20)
    ys = [b["y"].tolist() for b in loader]
    assert sorted(y for batch in ys for y in batch) == list(range(N))
    # a batch of 20 comes from one window of 4 blocks of 20 (two when it straddles windows)
    assert all(len({y // 20 for y in batch}) <= 8 for batch in ys)


def test_unshuffled_and_drop_last(ds):
    loader = chute.Loader(ds, 50, shuffle=False, drop_last=True, num_workers=2)
    ys = [b["y"].tolist() for b in loader]
    assert ys == [list(range(i, i + 50)) for i in range(0, 200, 50)]


@pytest.fixture(scope="module")
def ds_fixed(ds, tmp_path_factory) -> chute.Dataset:
    """The fixed-shape fields of ``ds`` only: small batches are then gathered in groups."""
    path = tmp_path_factory.mktemp("loader") / "fixed.chute"
    chute.write(path, {k: ds[:][k] for k in ("x", "y")})
    return chute.open(path)


def check_fixed(batch: dict, idx: np.ndarray) -> None:
    assert batch["y"].tolist() == idx.tolist()
    assert batch["x"][:, 1, 2].tolist() == (idx % 256).tolist()


CONFIGS = [(0, 1, None, 1), (0, 3, None, 1), (2, 1, 1, 1), (2, 2, 4, 1), (3, 3, 2, 1)]
GROUPED = [(1, 1, 2, 3), (2, 2, 1, 3), (2, 4, 5, 2), (3, 1, None, 4)]


@pytest.mark.parametrize(
    ("fields", "workers", "keep", "prefetch", "group"),
    [("all", *c) for c in CONFIGS] + [("fixed", *c) for c in CONFIGS + GROUPED],
)
def test_batch_stays_valid_until_reuse_after_more_are_asked_for(
    ds, ds_fixed, monkeypatch, fields, workers, keep, prefetch, group
):
    # fixed-shape fields only: gathered in groups of `group` batches of 8 x 20 bytes
    monkeypatch.setattr(chute.loader.loader, "GROUP_BYTES", 160 * group)
    data, check = (ds, check_batch) if fields == "all" else (ds_fixed, check_fixed)
    loader = chute.Loader(data, 8, seed=1, num_workers=workers, prefetch=prefetch, reuse_after=keep)
    assert loader.group == (group if workers else 1)
    assert loader.ring_size >= keep + (loader.prefetch or 0)
    plan = loader.order.plan()
    held: list[tuple[dict, np.ndarray]] = []
    slots = set()
    for k, batch in enumerate(loader):
        slots.add(batch["x"].data_ptr())
        held = [*held, (batch, plan[k])][-keep:]  # the last `keep` batches must all be intact
        if workers:
            time.sleep(0.001)  # give the workers every chance to run ahead
        for b, idx in held:
            check(b, idx)
    assert len(slots) == loader.ring_size  # the ring is reused, never grown


@pytest.mark.parametrize(
    ("fields", "workers", "group"),
    [("all", 0, 1), ("all", 1, 1), ("all", 3, 1), ("fixed", 0, 1), ("fixed", 2, 3)],
)
def test_batches_are_fresh_by_default(ds, ds_fixed, monkeypatch, fields, workers, group):
    """What torch users do: list(loader), a batch kept for visualisation, several epochs."""
    monkeypatch.setattr(chute.loader.loader, "GROUP_BYTES", 160 * group)  # 8 x 20 bytes a batch
    data, check = (ds, check_batch) if fields == "all" else (ds_fixed, check_fixed)
    loader = chute.Loader(data, 8, seed=1, num_workers=workers)
    assert (loader.reuse_after, loader.ring_size, loader.group) == (
        None,
        None,
        group if workers else 1,
    )
    plan = loader.order.plan()
    kept = list(loader)
    later = list(loader)  # another epoch gathered meanwhile: nothing kept may change
    assert len(kept) == len(later) == len(plan) == 26
    for batch, idx in zip(kept, plan, strict=True):
        check(batch, idx)
    assert len({b["x"].data_ptr() for b in kept + later}) == 52  # never a reused buffer
    kept[0]["x"].fill_(0)  # the user's to modify, and nobody else's
    assert all(b["x"].any() for b in kept[1:] + later)


@pytest.mark.parametrize(("workers", "group"), [(0, 1), (1, 1), (2, 3)])
def test_fresh_buffers_are_recycled_only_once_nothing_refers_to_them(
    ds_fixed, monkeypatch, workers, group
):
    monkeypatch.setattr(chute.loader.loader, "GROUP_BYTES", 160 * group)  # 8 x 20 bytes a batch
    loader = chute.Loader(ds_fixed, 8, seed=4, num_workers=workers)
    cap = (loader._items + 2) * group  # batches in the pool's buffers, at most
    plan = loader.order.plan()
    kept: list[tuple[np.ndarray, int, Any]] = []  # (indices, how, what is kept)
    seen = set()
    for epoch in range(3):
        for k, batch in enumerate(loader):
            seen.add(batch["x"].data_ptr())
            if epoch == 0 and k % 4 == 0:  # kept as the batch, a view, or a numpy array
                how = k // 4 % 3
                kept.append((plan[k], how, [batch, batch["x"][1:3], batch["y"].numpy()][how]))
            if workers:
                time.sleep(0.001)  # let the workers run ahead
    assert len(seen) <= cap + len(kept) * group  # a plain loop reuses a few buffers
    for idx, how, what in kept:  # and never one that something still refers to
        if how == 0:
            check_fixed(what, idx)
        elif how == 1:
            assert what[:, 1, 2].tolist() == (idx[1:3] % 256).tolist()
        else:
            assert what.tolist() == idx.tolist()
    del kept, what, batch
    list(loader)  # an epoch held at once, then dropped: the pool keeps only a few buffers
    assert all(len(bufs) - 1 <= loader._items + 2 for bufs in loader._buffers.bufs.values())


def anonymous_mb() -> float:
    """``Anonymous`` of this process, from /proc/self/smaps_rollup, in MB."""
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Anonymous:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no Anonymous line in /proc/self/smaps_rollup")


@pytest.fixture(scope="module")
def ds_images(tmp_path_factory) -> chute.Dataset:
    """48 MB of images and their labels."""
    path = tmp_path_factory.mktemp("loader") / "images.chute"
    n = 4096
    chute.write(path, {"image": np.ones((n, 3, 64, 64), np.uint8), "label": np.arange(n)})
    return chute.open(path)


@pytest.mark.skipif(
    not os.path.exists("/proc/self/smaps_rollup"), reason="needs Linux /proc/self/smaps_rollup"
)
@pytest.mark.parametrize("workers", [0, 2])
def test_keeping_one_field_keeps_only_that_fields_buffers(ds_images, workers):
    """An evaluation loop keeps the labels of every batch: that must not keep the images."""
    loader = chute.Loader(ds_images, 64, num_workers=workers)
    assert workers == 0 or loader.group > 1  # batches grouped: a kept label keeps its group's
    for _ in loader:  # the pool's buffers are made (and faulted in) in this epoch
        pass
    before = anonymous_mb()
    labels = [batch["label"] for batch in loader]
    grew = anonymous_mb() - before
    assert torch.equal(torch.cat(labels).sort().values, torch.arange(len(ds_images)))
    # 32 KB of labels kept; a buffer shared with the images kept 37-47 of their 48 MB. The
    # bound leaves room for allocator noise on a busy machine (8 MB seen), not for that.
    assert grew < 16, f"keeping the labels grew anonymous memory by {grew:.0f} MB"


def test_transform_on_grouped_batches(ds_fixed, monkeypatch):
    monkeypatch.setattr(chute.loader.loader, "GROUP_BYTES", 3 * 16 * 20)
    loader = chute.Loader(ds_fixed, 16, num_workers=2, transform=lambda b: b["y"] * 2)
    assert loader.group == 3
    out = [y.tolist() for y in loader]
    assert [len(y) for y in out] == [16] * 12 + [11]
    assert sorted(v for y in out for v in y) == [2 * i for i in range(N)]


def test_transform_runs_in_workers_with_one_torch_thread(ds):
    seen = []
    main_threads = torch.get_num_threads()

    def transform(batch):
        seen.append((threading.current_thread().name, torch.get_num_threads()))
        return batch["x"].float().mean(dim=(1, 2)), batch["y"]

    loader = chute.Loader(ds, 32, num_workers=2, transform=transform)
    for mean, y in loader:
        assert torch.allclose(mean, (y % 256).float())
    assert {name for name, _ in seen} <= {"chute-loader-0", "chute-loader-1"}
    assert {n for _, n in seen} == {1}
    assert torch.get_num_threads() == main_threads

    def peek():
        seen.append(("new thread", torch.get_num_threads()))

    t = threading.Thread(target=peek)
    t.start()
    t.join()
    assert seen[-1][1] == main_threads  # threads started later get the usual default


class FailOnce:
    """A transform that raises on the batch holding sample 5, the first time only."""

    def __init__(self):
        self.failed = False

    def __call__(self, batch):
        if 5 in batch["y"].tolist() and not self.failed:
            self.failed = True
            raise KeyError("no sample five, please")
        return batch


@pytest.mark.parametrize(("workers", "grouped"), [(0, False), (2, False), (2, True)])
def test_worker_error_reaches_the_caller_with_its_traceback(
    ds, ds_fixed, monkeypatch, workers, grouped
):
    monkeypatch.setattr(
        chute.loader.loader, "GROUP_BYTES", 3 * 4 * 20
    )  # fixed only: 3 batches/gather
    data = ds_fixed if grouped else ds
    loader = chute.Loader(data, 4, shuffle=False, num_workers=workers, transform=FailOnce())
    assert loader.group == (3 if grouped else 1)
    got = []
    with pytest.raises(WorkerError, match=r"batch 1 of epoch 0 \(samples \[4, 5, 6, 7\]\)") as err:
        for b in loader:
            got.append(b["y"].tolist())
    assert got == [[0, 1, 2, 3]]  # batches before the failing one arrive in order
    cause = err.value.__cause__
    assert isinstance(cause, KeyError)
    assert "__call__" in {f.name for f in traceback.extract_tb(cause.__traceback__)}
    assert loader_threads() == []
    assert loader.state_dict()["consumed"] == 4  # the failed batch was not consumed
    loader.load_state_dict(loader.state_dict())  # continue: resume at the failed batch
    again = [b["y"].tolist() for b in loader]
    assert again[0] == [4, 5, 6, 7] and len(again) == len(loader) - 1


def test_break_del_and_gc_stop_the_workers(ds):
    loader = chute.Loader(ds, 4, num_workers=3, transform=lambda batch: batch)  # 3 threads
    for _ in loader:
        assert len(loader_threads()) == 3
        break
    assert loader_threads() == []

    it = iter(loader)  # never advanced
    assert len(loader_threads()) == 3
    del it
    assert loader_threads() == []

    it = iter(loader)
    next(it)
    cycle = [it]
    cycle.append(cycle)
    del it, cycle
    gc.collect()
    assert loader_threads() == []


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts fds in /proc")
def test_no_fd_leak(ds):
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    loader = chute.Loader(ds, 8, num_workers=2)
    list(loader)  # the first pass maps the files
    before = fds()
    for _ in range(3):
        list(loader)
        for _ in loader:
            break
    assert fds() == before


@pytest.mark.slow  # a fresh interpreter
def test_exit_with_a_live_iterator_is_clean(ds):
    script = (
        "import sys, chute\n"
        "it = iter(chute.Loader(chute.open(sys.argv[1]), 4, num_workers=2))\n"
        "next(it)\n"
    )
    for _ in range(5):  # a race at exit (a map unmapped under a worker) shows in some runs
        proc = subprocess.run(
            [sys.executable, "-c", script, str(ds.path)], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr  # frozen daemon threads, unmapped files


@pytest.mark.parametrize("workers", [0, 2])
def test_a_new_iter_ends_the_previous_one_which_then_raises(ds, workers):
    loader = chute.Loader(ds, 4, num_workers=workers)
    first = iter(loader)
    next(first)
    second = iter(loader)  # one pass at a time: a fresh one, of the whole epoch
    with pytest.raises(StaleIteratorError, match=r"ended after 1 batches: iter\(\) was called"):
        next(first)
    with pytest.raises(StaleIteratorError):  # every time, not once
        next(first)
    assert len(list(second)) == len(loader)
    assert loader_threads() == []
    with pytest.raises(StaleIteratorError, match="one pass at a time"):
        list(zip(loader, loader, strict=False))  # torch allows it; a short epoch is worse
    assert issubclass(StaleIteratorError, chute.ChuteError)


@pytest.mark.parametrize("workers", [0, 2])
def test_an_iterator_that_ended_itself_is_not_stale(ds, workers):
    loader = chute.Loader(ds, 4, num_workers=workers)
    done = iter(loader)
    assert len(list(done)) == len(loader)
    closed = iter(loader)
    next(closed)
    loader.close()  # the user's own close: the iterator just ends
    assert list(closed) == []
    iter(loader)
    assert list(done) == [] and list(closed) == []


def test_state_changes_end_a_live_pass(ds):
    loader = chute.Loader(ds, 4, num_workers=2)
    it = iter(loader)
    next(it)
    loader.set_epoch(0)  # the same epoch: the pass goes on
    next(it)
    loader.set_epoch(5)
    assert loader_threads() == []
    with pytest.raises(StaleIteratorError, match=r"set_epoch\(5\)"):
        next(it)
    it = iter(loader)
    next(it)
    with pytest.raises(ArgumentValueError):  # a bad state leaves the live pass alone
        loader.load_state_dict({"epoch": 0})
    next(it)
    loader.load_state_dict(loader.state_dict())
    assert loader_threads() == []
    with pytest.raises(StaleIteratorError, match="load_state_dict"):
        next(it)


def test_a_peek_leaves_the_epoch_whole(ds):
    """``next(iter(loader))`` is the epoch's first batch; the loop then runs the whole epoch."""
    loader = chute.Loader(ds, 8, seed=2, num_workers=2)
    plan = [idx.tolist() for idx in loader.order.plan()]
    peek = next(iter(loader))["y"].tolist()
    whole = [b["y"].tolist() for b in loader]
    assert peek == plan[0] and whole == plan
    assert len(list(loader)) == len(loader)  # then epoch 1, whole
    assert loader.order.epoch == 2


def finish_without_stopiteration(loader, how: str) -> None:
    """Take every batch of the epoch without running the iterator to its end."""
    if how == "zip":
        for _ in zip(range(len(loader)), loader, strict=False):  # the last next() is never made
            pass
    else:
        list(itertools.islice(loader, len(loader)))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("how", ["zip", "islice"])
def test_an_epoch_taken_without_stopiteration_is_over(ds, workers, how):
    loader = chute.Loader(ds, 16, seed=3, num_workers=workers)
    finish_without_stopiteration(loader, how)
    assert (loader.state_dict()["epoch"], loader.state_dict()["consumed"]) == (0, N)
    epoch1 = [b["y"].tolist() for b in loader]  # the next epoch, whole: not an empty one
    want = chute.Order(N, 16, seed=3)
    want.set_epoch(1)
    assert epoch1 == [idx.tolist() for idx in want.plan()]
    assert loader.order.epoch == 2


@pytest.mark.parametrize("workers", [0, 2])
def test_resuming_a_checkpoint_from_the_last_step_yields_an_empty_rest(ds, workers):
    """Documented exception: a state saved after the last batch of epoch 4 puts the loader on
    a finished epoch 4, and the training loop's set_epoch(4) keeps it there."""
    loader = chute.Loader(ds, 16, seed=3, num_workers=workers)
    loader.set_epoch(4)
    finish_without_stopiteration(loader, "zip")
    state = loader.state_dict()
    resumed = chute.Loader(ds, 16, seed=3, num_workers=workers)
    resumed.load_state_dict(state)
    resumed.set_epoch(4)
    assert list(resumed) == [] and resumed.order.epoch == 5
    resumed.set_epoch(5)
    assert len(list(resumed)) == len(loader)
    loader.set_epoch(4)  # without a checkpoint loaded, set_epoch(4) runs epoch 4 again, whole
    assert len(list(loader)) == len(loader) and loader.order.epoch == 5


def test_ctrl_c_while_waiting_stops_the_workers(ds):
    def slow(batch):
        time.sleep(0.3)
        return batch

    loader = chute.Loader(ds, 4, num_workers=2, transform=slow)
    main = threading.main_thread().ident
    timer = threading.Timer(0.1, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        for _ in loader:
            pass
    timer.join()
    assert loader_threads() == []
    assert time.perf_counter() - t0 < 5


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_is_exact(ds, workers):
    loader = chute.Loader(ds, 8, seed=3, num_workers=workers)
    loader.set_epoch(2)
    full = loader.order.plan()
    it = iter(loader)
    first = [next(it)["y"].tolist() for _ in range(5)]
    state = loader.state_dict()
    assert state["epoch"] == 2 and state["consumed"] == 40
    del it

    resumed = chute.Loader(ds, 8, seed=3, num_workers=workers)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)  # the training loop's call keeps the position
    rest = [b["y"].tolist() for b in resumed]
    assert first + rest == [idx.tolist() for idx in full]
    assert resumed.state_dict()["epoch"] == 3


def test_resume_on_two_ranks_from_one(ds):
    single = chute.Loader(ds, 10, seed=4, num_workers=1)
    it = iter(single)
    seen = [next(it)["y"].clone() for _ in range(7)]
    state = single.state_dict()
    del it
    for rank in range(2):
        loader = chute.Loader(ds, 10, seed=4, num_workers=2, rank=rank, world_size=2)
        loader.load_state_dict(state)
        seen += [b["y"].clone() for b in loader]
    # 133 samples remained, over 2 ranks: one padded sample, wrapped from the epoch's start
    padded = int(single.order.global_order(0)[0])
    assert sorted(torch.cat(seen).tolist()) == sorted([*range(N), padded])


def test_stats(ds):
    loader = chute.Loader(ds, 16, num_workers=2)
    assert loader.stats().batches == 0
    ds.gather([0])  # the compiled gathers loaded (once per process: not the loader's time)
    for _ in loader:
        time.sleep(0.005)  # a "training step": the loader keeps up, so little waiting
    s = loader.stats()
    assert (s.batches, s.samples, s.workers) == (13, N, gather_threads(2))
    assert 0 < s.wait_s < s.total_s and s.busy_s + s.helped_s > 0  # (a pass of 1 work item)
    assert 0 <= s.wait_fraction < 0.5 and 0 <= s.worker_utilization <= 1
    assert "13 batches" in str(s) and "waited" in str(s)


def test_multi_part_dataset(tmp_path):
    path = tmp_path / "parts.chute"
    with chute.Writer(path, part_size=30) as w:
        w.extend({"y": np.arange(100), "v": np.arange(200).reshape(100, 2).astype(np.float32)})
    loader = chute.Loader(chute.open(path), 16, seed=2, num_workers=2)
    for batch in loader:
        assert torch.equal(batch["v"][:, 0], (2 * batch["y"]).float())


@pytest.mark.parametrize(("workers", "keep"), [(0, None), (2, None), (2, 1)])
def test_pad_gives_what_gather_gives(ds, workers, keep):
    loader = chute.Loader(ds, 8, seed=6, num_workers=workers, reuse_after=keep, pad=-1)
    plan = loader.order.plan()
    for batch, idx in zip(loader, plan, strict=True):
        want = ds.gather(idx, pad=-1)
        assert batch.keys() == want.keys() == {"x", "y", "tok", "tok_lengths", "s"}
        for k in ("x", "y", "tok", "tok_lengths"):
            assert torch.equal(batch[k], want[k]), k
        assert batch["s"] == want["s"]
        assert batch["tok"].shape == (len(idx), max(i % 5 for i in idx.tolist()))


@pytest.mark.parametrize("pad", ["x", 2**40, 0.5])
def test_a_bad_pad_fails_at_construction(ds, pad):
    with pytest.raises(SchemaError, match="pad="):
        chute.Loader(ds, 8, num_workers=2, pad=pad)  # int32 tokens: no string, overflow, 0.5


@pytest.mark.parametrize("workers", [0, 2])
def test_batch_size_beyond_the_dataset(ds, workers):
    loader = chute.Loader(ds, 10**12, num_workers=workers)  # slots are sized to the dataset
    assert [len(b["y"]) for b in loader] == [N]
    two = chute.Loader(ds, 10**12, num_workers=workers, rank=1, world_size=2)
    assert [len(b["y"]) for b in two] == [(N + 1) // 2]


def test_empty_dataset(tmp_path):
    path = tmp_path / "empty.chute"
    chute.write(path, {"y": np.zeros(0, np.int64)})
    loader = chute.Loader(chute.open(path), 4, num_workers=2)
    assert len(loader) == 0 and list(loader) == []


def test_rank_defaults_without_torch_distributed(ds):
    loader = chute.Loader(ds, 4, num_workers=0)
    assert (loader.order.rank, loader.order.world_size) == (0, 1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"num_workers": -1}, "num_workers must be >= 0"),
        ({"num_workers": 2, "prefetch": 0}, "prefetch must be >= 1"),
        ({"reuse_after": 0}, "reuse_after must be >= 1"),
        ({"rank": 3, "world_size": 2}, "rank must be < world_size"),
        ({"world_size": 0}, "world_size must be >= 1"),
        ({"transform": 5}, "transform must be callable"),
        ({"block_size": 0}, "block_size must be >= 1"),
    ],
)
def test_bad_arguments(ds, kwargs, match):
    args = {"batch_size": 4, **kwargs}
    with pytest.raises(ArgumentError if "callable" in match else ArgumentValueError, match=match):
        chute.Loader(ds, **args)


def test_not_a_dataset():
    with pytest.raises(ArgumentError, match="needs a chute Dataset"):
        chute.Loader(list(range(10)), 4)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the warning without CUDA")
def test_pin_memory_without_cuda_warns_and_does_not_pin(ds):
    with pytest.warns(UserWarning, match="pin_memory=True but torch sees no CUDA"):
        loader = chute.Loader(ds, 4, pin_memory=True, num_workers=1)  # as torch's DataLoader
    assert loader.pin_memory is False
    assert len(list(loader)) == len(loader)
    assert chute.Loader(ds, 4).pin_memory is False  # auto: no CUDA, no pinning


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("keep", [None, 1])
def test_pinned_batches(ds, keep):
    loader = chute.Loader(ds, 16, num_workers=2, reuse_after=keep)
    assert loader.pin_memory
    kept = []
    for batch in loader:
        assert batch["x"].is_pinned() and batch["y"].is_pinned()
        check_batch(batch, batch["y"].numpy())
        kept.append(batch)
    if keep is None:  # fresh pinned memory: every batch still intact
        for batch in kept:
            check_batch(batch, batch["y"].numpy())


def test_options_after_batch_size_are_keyword_only(ds):
    with pytest.raises(TypeError):
        chute.Loader(ds, 8, False)
    params = inspect.signature(chute.Loader).parameters.values()
    assert [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD] == [
        "ds",
        "batch_size",
    ]


@pytest.mark.parametrize("workers", [0, 2])
def test_keep_is_the_deprecated_name_of_reuse_after(ds, workers):
    with pytest.warns(DeprecationWarning, match="keep=.*use reuse_after=") as caught:
        old = chute.Loader(ds, 8, seed=1, num_workers=workers, keep=1)
    assert caught[0].filename == __file__  # points at the caller's line
    new = chute.Loader(ds, 8, seed=1, num_workers=workers, reuse_after=1)
    assert (old.reuse_after, old.ring_size) == (1, new.ring_size)
    assert [b["y"].tolist() for b in old] == [b["y"].tolist() for b in new]
    with pytest.raises(ArgumentError, match="reuse_after= alone"):
        chute.Loader(ds, 8, keep=1, reuse_after=1)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_with_no_cpu_to_spare_the_consumer_takes_a_workers_place(ds, workers):
    """A plain gather with as many workers as CPUs or more: one fewer than the CPUs start, and
    the thread iterating the loader gathers whenever it would wait; with a transform (torch
    ops in the workers' one intra-op thread) every worker starts. The batches are the same."""
    mine = chute.open(ds.path)
    gathered = []

    def spy(idx, out=None, pad=None):
        gathered.append(threading.current_thread().name)
        return chute.Dataset.gather(mine, idx, out=out, pad=pad)

    mine.gather = spy  # type: ignore[method-assign]  # the same plain Dataset, its gathers seen
    loader = chute.Loader(mine, 4, seed=1, num_workers=workers)
    plan = [idx.tolist() for idx in loader.order.plan()]  # y[i] == i
    it = iter(loader)
    assert len(loader_threads()) == gather_threads(workers)
    assert [b["y"].tolist() for b in it] == plan
    threads = {f"chute-loader-{w}" for w in range(gather_threads(workers))}
    assert set(gathered) <= {threading.current_thread().name, *threads}
    s = loader.stats()  # the consumer's own gathering counted apart from the workers'
    assert s.workers == gather_threads(workers) and 0 <= s.helped_s <= s.wait_s
    assert 0 <= s.worker_utilization <= 1
    it = iter(chute.Loader(mine, 4, num_workers=workers, transform=lambda batch: batch))
    assert len(loader_threads()) == workers
    it.close()
