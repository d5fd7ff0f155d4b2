"""MultiScale through the loaders on real JPEGs: every batch of an epoch at one size of the
set, drawn as a pure function of (seed, epoch, first index) (the same on a second pass and
after a resume, other sizes in other epochs); each batch's image, mask and Geometry rows
exactly what a loader with that size fixed gives for its samples (so boxes and masks scale
with it); the same batches from the Loader's threads (fresh buffers and the ring) and from
chute.dataloader's worker processes; refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("simplejpeg")
import torch
from _image_files import jpeg

import chute
from chute.errors import ArgumentError
from chute.loader.decode import with_decode

N = 40
SEED = 4
SIZES = (24, 32, (40, 48))


def _size(i: int) -> tuple[int, int]:
    return 30 + 5 * (i % 5), 52 - 3 * (i % 4)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("scales") / "d.chute"
    chute.write(
        dst,
        {
            "image": [jpeg(*_size(i), seed=i) for i in range(N)],
            "mask": [
                np.arange(h * w, dtype=np.int32).reshape(h, w) for h, w in map(_size, range(N))
            ],
        },
        schema={"image": chute.fields.Image(), "mask": chute.fields.Mask("int32")},
        part_size=9,
    )
    return dst


def _decode(op: Any) -> dict[str, Any]:
    return {
        "image": [op, chute.RandomHorizontalFlip()],
        "mask": chute.Follow("image", fill=-1),
        "geo": chute.Geometry("image"),
    }


MULTI = _decode(chute.MultiScale(SIZES, chute.ResizePad(40, center=True)))
WANT = {(24, 24), (32, 32), (40, 48)}


def _batches(loader: Any) -> list[dict[str, torch.Tensor]]:
    return [{k: v.clone() for k, v in b.items()} for b in loader]


def _same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        assert all(torch.equal(x[k], y[k]) for k in x)


def test_each_batch_at_one_size_and_as_that_size_fixed(data: Path) -> None:
    ds = chute.open(data)
    seen = set()
    for epoch in (0, 1, 2):
        loader = chute.Loader(ds, 6, seed=SEED, num_workers=0, decode=MULTI)
        loader.set_epoch(epoch)
        plan = loader.order.plan()
        for idx, batch in zip(plan, loader, strict=True):
            h, w = batch["image"].shape[-2:]
            assert (h, w) in WANT
            seen.add((h, w))
            assert tuple(batch["mask"].shape[-2:]) == (h, w)
            assert (batch["geo"][:, 4:6] == torch.tensor([h, w], dtype=torch.float64)).all()
            fixed = with_decode(ds, _decode(chute.ResizePad((h, w), center=True)), SEED)
            want = fixed.at_epoch(epoch).gather(np.asarray(idx))
            assert all(torch.equal(batch[k], want[k]) for k in ("image", "mask", "geo"))
    assert seen == WANT  # 21 batches draw every size


def test_sizes_are_a_pure_function_of_seed_epoch_and_batch(data: Path) -> None:
    def make() -> chute.Loader:
        return chute.Loader(chute.open(data), 6, seed=SEED, num_workers=2, decode=MULTI)

    loader = make()
    loader.set_epoch(1)
    full = _batches(loader)
    loader.set_epoch(1)
    _same(full, _batches(loader))  # a second pass over the epoch
    loader = make()
    loader.set_epoch(1)
    it = iter(loader)
    next(it), next(it)
    resumed = make()
    resumed.load_state_dict(loader.state_dict())
    _same(full[2:], _batches(resumed))
    sizes = [tuple(b["image"].shape[-2:]) for b in full]
    others = []
    for epoch in (2, 3, 4):
        loader.set_epoch(epoch)
        others.append([tuple(b["image"].shape[-2:]) for b in loader])
    assert any(s != sizes for s in others)


@pytest.mark.parametrize(
    "how",
    ["threads", "ring", "processes"],
)
def test_threads_ring_and_processes_give_the_same_batches(data: Path, how: str) -> None:
    ds = chute.open(data)
    base = chute.Loader(ds, 5, seed=SEED, num_workers=0, decode=MULTI)
    base.set_epoch(3)
    want = _batches(base)
    if how == "processes":
        other: Any = chute.dataloader(ds, 5, seed=SEED, num_workers=2, decode=MULTI)
    else:
        ring = {"reuse_after": 1} if how == "ring" else {}
        other = chute.Loader(ds, 5, seed=SEED, num_workers=2, decode=MULTI, **ring)
    other.set_epoch(3)
    got = _batches(other)
    _same(want, got)
    assert len({tuple(b["image"].shape) for b in got}) > 1


def test_a_batch_is_a_view_of_a_buffer_at_the_largest_size(data: Path) -> None:
    ds = with_decode(chute.open(data), MULTI, SEED)
    out = ds.empty_batch(6)
    assert tuple(out["image"].shape) == (6, 3, 40, 48)
    assert tuple(out["mask"].shape) == (6, 40, 48)
    for first in range(0, 36, 6):
        got = ds.gather(np.arange(first, first + 6), out=out)
        assert got["image"].is_contiguous()
        assert got["image"].data_ptr() == out["image"].data_ptr()
        assert got["mask"].data_ptr() == out["mask"].data_ptr()


def test_bad_multiscale_is_refused(data: Path) -> None:
    for sizes, op, match in [
        ((), chute.Resize(8), "sizes must be a non-empty"),
        ((8, 0), chute.Resize(8), "size must be a positive int"),
        ((8,), chute.RandomHorizontalFlip(), "op must be a sizing decode op"),
        ((8,), chute.Resize(8, device="cpu"), "decoded in the loader's workers"),
    ]:
        with pytest.raises(ArgumentError, match=match):
            chute.MultiScale(sizes, op)
    twice = [chute.MultiScale((8,), chute.Resize(8)), chute.MultiScale((8,), chute.Resize(8))]
    with pytest.raises(ArgumentError, match="one MultiScale per decode= list"):
        chute.Loader(chute.open(data), 2, decode={"image": twice})
