"""The shared-memory slots of chute.dataloader's workers (chute/loader/handoff.py): a slot is
written again only once its batch was copied out, a batch received stays valid, nothing is left
in /dev/shm after the workers are gone, killed or not."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import torch

import chute
from chute.batch import RaggedBatch
from chute.errors import WorkerError
from chute.loader.dataloader import dataloader
from chute.loader.handoff import Handoff

N = 96


@pytest.fixture(scope="module")
def ds(tmp_path_factory: pytest.TempPathFactory) -> chute.Dataset:
    path = tmp_path_factory.mktemp("handoff") / "h.chute"
    chute.write(
        path,
        {
            # 8 samples: 96 KB, copied out into pooled buffers
            "image": (np.arange(N * 3 * 64 * 64) % 251).astype(np.uint8).reshape(N, 3, 64, 64),
            "y": np.arange(N),
            "tok": [np.arange(i % 7, dtype=np.int32) + i for i in range(N)],
        },
    )
    return chute.open(path)


def received(message: Any) -> Any:
    """What the main process gets for a worker's message: it is unpickled from torch's queue."""
    return ForkingPickler.loads(ForkingPickler.dumps(message))


def batch_of(k: int) -> dict[str, Any]:
    return {
        "x": torch.full((256, 256), k, dtype=torch.float32),  # 256 KB: a pooled buffer
        "tok": RaggedBatch(torch.arange(k + 1), torch.tensor([0, k + 1])),
        "name": [f"b{k}"],
        "k": k,
    }


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (
        torch.equal(a["x"], b["x"])
        and torch.equal(a["tok"].values, b["tok"].values)
        and torch.equal(a["tok"].offsets, b["tok"].offsets)
        and a["name"] == b["name"]
        and a["k"] == b["k"]
    )


def test_a_slot_is_written_again_only_after_its_batch_was_copied_out() -> None:
    h = Handoff(1, 2, multiprocessing.get_context("fork"))
    first, second, third = batch_of(1), batch_of(2), batch_of(3)
    m1, m2 = h.pack(first, 0), h.pack(second, 0)
    assert m1 is not first and m2 is not second  # in slots 0 and 1
    assert h.pack(third, 0) is third  # both slots are on their way: torch's hand-off instead
    got1 = received(m1)  # slot 0 copied out and given back
    assert same(got1, first) and isinstance(got1["tok"], RaggedBatch)
    m4 = h.pack(batch_of(4), 0)  # written into slot 0, over batch 1
    assert m4 is not None and same(got1, first)  # what was received is its own copy
    got2, got4 = received(m2), received(m4)
    assert same(got2, second) and same(got4, batch_of(4))
    got4["x"] += 1  # writable, and no slot changes
    assert same(received(h.pack(batch_of(5), 0)), batch_of(5))
    for k in range(6, 12):  # the buffers of batches dropped are reused, of those kept never
        assert same(received(h.pack(batch_of(k), 0)), batch_of(k))
    assert same(got1, first) and same(got2, second)


def test_a_lent_slot_comes_back_once_nothing_refers_to_its_batch() -> None:
    h = Handoff(1, 2, multiprocessing.get_context("fork"), lend=True)
    got1, got2 = received(h.pack(batch_of(1), 0)), received(h.pack(batch_of(2), 0))
    assert same(got1, batch_of(1)) and same(got2, batch_of(2))
    third = batch_of(3)
    h.give_back()
    assert h.pack(third, 0) is third  # both batches are held: their slots stay lent
    view = got1["x"][1:].numpy()  # a view of batch 1 holds its slot
    del got1
    h.give_back()
    assert h.pack(third, 0) is third
    del view
    h.give_back()  # slot 0 comes back; written again, batch 2 (slot 1) is untouched
    got4 = received(h.pack(batch_of(4), 0))
    assert same(got4, batch_of(4)) and same(got2, batch_of(2))
    del got2
    h.give_back()  # slot 1, the next in turn, comes back; batch 4 (slot 0) is untouched
    assert same(received(h.pack(batch_of(5), 0)), batch_of(5)) and same(got4, batch_of(4))
    assert h.pack(third, 0) is third


def test_a_batch_gathered_into_its_reserved_slot_is_sent_without_a_copy(ds: chute.Dataset) -> None:
    h = Handoff(1, 1, multiprocessing.get_context("fork"))
    idx = np.array([5, 1, 90, 7])
    out = h.reserve(0, {"image": (torch.uint8, (4, 3, 64, 64)), "y": (torch.int64, (4,))})
    assert out is not None
    batch = ds.gather(idx, out=out)
    assert batch["image"].data_ptr() == out["image"].data_ptr()  # gathered into the slot
    batch["twice"] = batch["y"] * 2  # made after: copied into the slot behind the gathered
    got = received(h.pack(batch, 0))
    want = ds.gather(idx)
    assert torch.equal(got["image"], want["image"]) and torch.equal(got["y"], want["y"])
    assert torch.equal(got["twice"], want["y"] * 2)
    assert torch.equal(got["tok"].values, want["tok"].values)
    big = h.reserve(0, {"image": (torch.uint8, (32, 3, 64, 64)), "y": (torch.int64, (32,))})
    assert big is not None  # the slot again, grown: the new arena goes with the message
    got = received(h.pack(ds.gather(np.arange(32), out=big), 0))
    assert torch.equal(got["image"], ds.gather(np.arange(32))["image"])


def test_a_reserved_slot_is_given_back_when_no_batch_comes() -> None:
    h = Handoff(1, 1, multiprocessing.get_context("fork"))
    assert h.reserve(0, {"x": (torch.float32, (256, 256))}) is not None
    assert h.reserve(0, {"x": (torch.float32, (256, 256))}) is None  # the only slot is taken
    h.unreserve(0)  # the gather failed
    assert same(received(h.pack(batch_of(1), 0)), batch_of(1))  # the slot is free again


def test_what_bytes_do_not_describe_goes_through_torch() -> None:
    h = Handoff(1, 2, multiprocessing.get_context("fork"))
    grad = torch.ones(3, requires_grad=True)
    param = torch.nn.Parameter(torch.zeros(2))
    got = received(h.pack({"grad": grad, "param": param, "plain": torch.arange(3)}, 0))
    assert got["grad"].requires_grad and isinstance(got["param"], torch.nn.Parameter)
    assert torch.equal(got["plain"], torch.arange(3))


def test_batches_kept_over_epochs_stay_intact(ds: chute.Dataset) -> None:
    dl = dataloader(ds, 8, seed=4, num_workers=2, persistent_workers=True, prefetch_factor=1)
    kept = []
    for epoch in range(3):
        dl.set_epoch(epoch)
        kept.append(list(dl))  # every batch held while the workers go on through the slots
    for batches in kept:
        assert sorted(int(y) for b in batches for y in b["y"]) == list(range(N))
        for b in batches:
            want = ds.gather(b["y"])
            assert torch.equal(b["image"], want["image"])
            assert torch.equal(b["tok"].values, want["tok"].values)


def held_shm() -> set[str]:
    """What in /dev/shm this process maps or holds open (segments, named semaphores): the
    machine's /dev/shm itself is shared with whatever else runs."""
    held = set()
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/dev/shm/"):
            held.add(parts[5])
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile (the directory's own fd)
            continue
        if target.startswith("/dev/shm/"):
            held.add(target)
    return held


def named_by(pids: set[int]) -> set[str]:
    """Shared-memory segments that torch named after one of ``pids`` and left in /dev/shm."""
    return {
        n for n in os.listdir("/dev/shm") if n.split("_")[:2] in [["torch", str(p)] for p in pids]
    }


def kill_on_batch_3(batch: dict[str, Any]) -> dict[str, Any]:
    if 24 in batch["y"].tolist():
        os.kill(os.getpid(), signal.SIGKILL)
    return batch


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs Linux /dev/shm and /proc")
@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_nothing_is_left_in_dev_shm_after_a_worker_is_killed(
    ds: chute.Dataset, context: str
) -> None:
    before = held_shm()
    dl = dataloader(
        ds,
        8,
        shuffle=False,
        num_workers=2,
        batch_transform=kill_on_batch_3,
        multiprocessing_context=context,
        persistent_workers=True,
    )
    it = iter(dl)  # starts the workers
    pids = {os.getpid()} | {c.pid for c in psutil.Process().children()}
    try:
        list(it)
    except WorkerError as exc:  # (not pytest.raises: its traceback would keep torch's queues)
        assert "killed by SIGKILL" in str(exc)
    else:
        raise AssertionError("the worker was not killed")
    assert held_shm() - before  # the probe sees the slots this process read from
    del dl, it
    gc.collect()
    assert held_shm() - before == set()
    assert named_by(pids) == set()
