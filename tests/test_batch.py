"""``chute.RaggedBatch`` as users loop over it, and the memory of the ragged gather.

``for img in batch["image"]`` gives samples (as ``len(rb)`` and ``rb[i]`` do), the parts
stay reachable by name (``rb.values``, ``rb.offsets``, ``rb.shapes``), and torch's
``default_convert`` / ``pin_memory`` and ``chute.to_device`` still move it whole.
Gathering ragged / Bytes fields must be O(batch bytes) in memory (tracemalloc sees
numpy's buffers), not 16 bytes of int64 index per stored byte.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
from _faults import recorded_case  # noqa: F401 - autouse: records the case

import chute


@pytest.fixture
def ragged(tmp_path: Path) -> chute.Dataset:
    """Tokens (1-D ragged) and images (H x W x 3, several variable dims), 8 samples."""
    path = tmp_path / "r.chute"
    with chute.Writer(
        path, {"tokens": chute.Ragged("int32"), "image": chute.Ragged("uint8", (None, 3))}
    ) as w:
        for i in range(8):
            w.append(
                {
                    "tokens": np.arange(i + 1, dtype=np.int32),
                    "image": np.full((i % 3 + 1, i % 2 + 2, 3), i, np.uint8),
                }
            )
    return chute.open(path)


# ------------------------------------ a RaggedBatch iterated, converted, moved


@pytest.mark.parametrize("field", ["tokens", "image"])
def test_iterating_a_ragged_batch_gives_samples(ragged: chute.Dataset, field: str) -> None:
    rb = ragged.gather(np.arange(8))[field]
    assert len(rb) == 8
    got = [tuple(x.shape) for x in rb]
    want = [tuple(rb[i].shape) for i in range(len(rb))]
    assert got == want, f"iteration gives the parts (values, offsets, shapes): {got}"
    assert all(torch.equal(a, b) for a, b in zip(list(rb), rb.tolist(), strict=True))


def test_parts_by_name_still_work(ragged: chute.Dataset) -> None:
    rb = ragged.gather(np.arange(8))["image"]
    assert isinstance(rb.values, torch.Tensor) and rb.values.dim() == 1
    assert rb.offsets.tolist()[0] == 0 and len(rb.offsets) == 9
    assert rb.shapes is not None and tuple(rb.shapes.shape) == (8, 3)
    tok = ragged.gather(np.arange(8))["tokens"]
    assert tok.shapes is None and int(tok.offsets[-1]) == len(tok.values)


def _same(a: chute.RaggedBatch, b: chute.RaggedBatch) -> None:
    assert isinstance(a, chute.RaggedBatch), type(a)
    assert len(a) == len(b)
    for x, y in zip(a.tolist(), b.tolist(), strict=True):
        assert torch.equal(x.cpu(), y.cpu())


def test_default_convert_keeps_a_ragged_batch(ragged: chute.Dataset) -> None:
    """torch's ``default_convert`` (a DataLoader with ``batch_size=None``) rebuilds NamedTuples
    from their iteration: it must still give the same RaggedBatch."""
    batch = ragged.gather(np.arange(8))
    out = torch.utils.data.default_convert(batch)
    _same(out["image"], batch["image"])
    _same(out["tokens"], batch["tokens"])
    dl = torch.utils.data.DataLoader([batch], batch_size=None)
    _same(next(iter(dl))["image"], batch["image"])


def test_to_device_keeps_a_ragged_batch(ragged: chute.Dataset) -> None:
    """``chute.to_device`` to a non-CUDA device type moves every tensor with ``.to()``
    (``"meta"``: no copy, shapes kept), rebuilding the RaggedBatch."""
    batch = ragged.gather(np.arange(8))
    (moved,) = list(chute.to_device([batch], "meta"))
    rb = moved["image"]
    assert isinstance(rb, chute.RaggedBatch)
    assert rb.values.device.type == "meta" and rb.values.shape == batch["image"].values.shape
    assert rb.offsets.shape == batch["image"].offsets.shape


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinning needs CUDA")
def test_pin_memory_keeps_a_ragged_batch(ragged: chute.Dataset) -> None:
    from torch.utils.data._utils.pin_memory import pin_memory

    batch = ragged.gather(np.arange(8))
    pinned = pin_memory(batch)
    _same(pinned["image"], batch["image"])
    assert pinned["image"].values.is_pinned()
    (on_gpu,) = list(chute.to_device([batch], "cuda"))
    _same(on_gpu["image"], batch["image"])


def test_default_collate_of_ragged_batches_does_not_scramble(ragged: chute.Dataset) -> None:
    """``default_collate`` of two equal-sized RaggedBatches (a DataLoader of chute batches)
    keeps working: parts collated by name, or a clear error; never samples stacked as parts."""
    a = ragged.gather(np.arange(4))["image"]
    b = ragged.gather(np.arange(4))["image"]
    try:
        out = torch.utils.data.default_collate([a, b])
    except (TypeError, RuntimeError, chute.ChuteError):
        return  # refusing is fine
    assert isinstance(out, chute.RaggedBatch)
    assert torch.equal(out.values[0], a.values) and torch.equal(out.offsets[1], b.offsets)


# ------------------------------------------------ ragged / bytes gather memory


@pytest.mark.parametrize("part_size", [None, 64])
def test_bytes_gather_memory_is_o_batch_bytes(tmp_path: Path, part_size: int | None) -> None:
    """256 samples of ~100 KB: 25 MB of data, gathered without ~400 MB of int64 temporaries."""
    rng = np.random.default_rng(0)
    blobs = [rng.bytes(100_000 + int(rng.integers(0, 1000))) for _ in range(256)]
    path = tmp_path / "b.chute"
    chute.write(path, {"b": blobs}, part_size=part_size)
    ds = chute.open(path)
    idx = rng.permutation(256)
    ds.gather(idx[:4])  # map the files first
    data = sum(len(b) for b in blobs)
    tracemalloc.start()
    try:
        rb = ds.gather(idx)["b"]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rb[7].numpy().tobytes() == blobs[idx[7]]
    assert peak < 3 * data, f"peak {peak / 1e6:.0f} MB to gather {data / 1e6:.0f} MB"


def test_ragged_gather_memory_is_o_batch_bytes(tmp_path: Path) -> None:
    """A 1-D ragged int32 field: 256 samples of ~25k values (25 MB)."""
    rows = [np.full(25_000 + i, i, np.int32) for i in range(256)]
    path = tmp_path / "t.chute"
    chute.write(path, {"t": rows})
    ds = chute.open(path)
    ds.gather([0])
    tracemalloc.start()
    try:
        rb = ds.gather(np.arange(255, -1, -1))["t"]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(rb, chute.RaggedBatch) and rb[0].tolist() == rows[255].tolist()
    data = sum(r.nbytes for r in rows)
    assert peak < 3 * data, f"peak {peak / 1e6:.0f} MB to gather {data / 1e6:.0f} MB"
