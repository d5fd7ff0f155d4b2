"""Issue 15, item 4: sparse or lying files must not make chute allocate unbounded memory.

Each call runs in a subprocess whose address space is capped at what it maps after ``import
chute`` plus the dataset's files plus a margin (``_issue15.capped``), so a regression fails
with a MemoryError instead of eating the machine. Expected: O(batch) memory for the order
(a permutation that is not materialised), a bounded manifest, and a ``ChuteError`` before
any allocation the data on disk cannot justify.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _issue15 import GiB, capped, sparse_bytes_dataset, sparse_tensor_dataset

MARGIN = 3 * GiB // 2  # headroom for threads' stacks and arenas, torch, numpy
FAST_S = 15.0  # "quickly": generous for 2 shared cores; today these take minutes or fail


def _assert_ok(res: dict, what: str) -> None:
    assert "ok" in res, f"{what}: {res}"
    assert res["s"] < FAST_S, f"{what} took {res['s']:.1f} s: not O(batch)"


def _assert_chute_error(res: dict, what: str) -> None:
    assert "error" in res and res["chute"], f"{what}: expected a ChuteError, got {res}"
    assert "MemoryError" not in res["error"], f"{what}: {res}"
    assert res["s"] < FAST_S, f"{what}: the error came after {res['s']:.1f} s"


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("n", [GiB, 10 * GiB], ids=["1GiB", "10GiB"])
def test_i04_sparse_file_loader_first_batch_bounded(tmp_path: Path, n: int, shuffle: bool) -> None:
    """``next(iter(chute.Loader(ds, 32)))`` over 2**30 (10 * 2**30) uint8 samples held by a
    sparse file: 182 s and 17.3 GB (a MemoryError) today."""
    path = sparse_tensor_dataset(tmp_path / "sparse.chute", n)
    res = capped(
        f"""
        ds = chute.open({str(path)!r})
        cap({n} + {MARGIN})
        outcome(lambda: tuple(next(iter(chute.Loader(ds, 32, shuffle={shuffle}, num_workers=2)))["x"].shape))
        """,
        timeout=120,
    )
    _assert_ok(res, f"Loader first batch, n={n}, shuffle={shuffle}")


def test_i04_sparse_file_dataloader_first_batch_bounded(tmp_path: Path) -> None:
    path = sparse_tensor_dataset(tmp_path / "sparse.chute", GiB)
    res = capped(
        f"""
        ds = chute.open({str(path)!r})
        cap({GiB} + {MARGIN})
        outcome(lambda: tuple(next(iter(chute.dataloader(ds, 32, num_workers=0, pin_memory=False)))["x"].shape))
        """,
        timeout=120,
    )
    _assert_ok(res, "chute.dataloader first batch, n=2**30")


@pytest.mark.parametrize("block_size", [None, 4096])
def test_i04_order_of_billions_is_bounded(block_size: int | None) -> None:
    """``chute.Order(10 * 2**30, 32)``: the first batch, ``len()`` and ``state_dict`` without
    materialising the 80 GiB permutation (a bare MemoryError today)."""
    res = capped(
        f"""
        cap({MARGIN})
        def first():
            order = chute.Order({10 * GiB}, 32, seed=3, block_size={block_size})
            idx = next(order.batches())
            assert len(idx) == 32 and 0 <= idx.min() and idx.max() < {10 * GiB}
            return len(order), order.state_dict()["consumed"]
        outcome(first)
        """,
        timeout=120,
    )
    _assert_ok(res, f"Order(10 GiB, block_size={block_size})")


def test_i04_sparse_ragged_sample_getitem_raises_before_allocating(tmp_path: Path) -> None:
    """One Bytes sample of 10 GiB held by a sparse file: ``ds[0]`` allocates 10 GiB today."""
    path = sparse_bytes_dataset(tmp_path / "ragged.chute", 10 * GiB)
    res = capped(
        f"""
        ds = chute.open({str(path)!r})
        cap({10 * GiB} + {MARGIN})
        outcome(lambda: ds[0]["b"].shape)
        """,
        timeout=120,
    )
    _assert_chute_error(res, "ds[0] of a 10 GiB sparse sample")


def test_i04_sparse_ragged_sample_gather_raises_before_allocating(tmp_path: Path) -> None:
    """The same through ``gather`` (20 GiB today: the int64 index temporaries, then the copy)."""
    path = sparse_bytes_dataset(tmp_path / "ragged.chute", 10 * GiB)
    res = capped(
        f"""
        ds = chute.open({str(path)!r})
        cap({10 * GiB} + {MARGIN})
        outcome(lambda: ds.gather([0])["b"].values.shape)
        """,
        timeout=120,
    )
    _assert_chute_error(res, "gather([0]) of a 10 GiB sparse sample")


def test_i04_huge_manifest_is_bounded(tmp_path: Path) -> None:
    """A 100 MB manifest (a metadata list of 50M numbers): open it in bounded memory or refuse
    it with a ChuteError; if it opens, a worker must not be sent 100 MB per pickle."""
    import chute
    import numpy as np

    path = tmp_path / "big.chute"
    chute.write(path, {"x": np.arange(4)})
    obj = json.loads((path / "chute.json").read_text())
    obj["metadata"] = {"pad": "@PAD@"}
    text = json.dumps(obj).replace('"@PAD@"', "[" + "0," * 50_000_000 + "0]")
    (path / "chute.json").write_text(text)
    res = capped(
        f"""
        import pickle
        cap(512 << 20)
        outcome(lambda: len(pickle.dumps(chute.open({str(path)!r}))))
        """,
        timeout=120,
    )
    if "ok" in res:
        assert int(res["ok"]) < 8 << 20, f"the dataset pickles to {int(res['ok'])} bytes"
        assert res["s"] < FAST_S, res
    else:
        _assert_chute_error(res, "chute.open of a 100 MB manifest")
