"""Sparse or lying files must not make chute allocate unbounded memory.

Every call runs in ONE subprocess (one start of torch for all cases, see
``_faults.capped_cases``) whose address space is capped, per call, at what it maps after
setting the case up plus the dataset's files plus a margin: a regression fails with a
MemoryError instead of eating the machine. Expected: O(batch) memory for the order (a
permutation that is not materialised), a bounded manifest, and a ``ChuteError`` before any
allocation the data on disk cannot justify.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _faults import (
    GiB,
    capped_cases,
    recorded_case,  # noqa: F401 - autouse: records the case
    sparse_bytes_dataset,
    sparse_tensor_dataset,
)

import chute

pytestmark = pytest.mark.slow  # a fresh interpreter under a memory cap

MARGIN = 3 * GiB // 2  # headroom for threads' stacks and arenas, torch, numpy
# No wall-clock bound: the address-space cap is what tells O(batch) from O(dataset) (a
# materialised permutation or a read of the whole file fails it), and capped_cases' timeout
# only guards against a hang.


def _cases(tmp: Path) -> list[tuple[str, str, int, str]]:
    """(case, setup statement, address space allowed beyond the setup, expression)."""
    small = sparse_tensor_dataset(tmp / "1g.chute", GiB)
    big = sparse_tensor_dataset(tmp / "10g.chute", 10 * GiB)
    ragged = sparse_bytes_dataset(tmp / "ragged.chute", 10 * GiB)
    manifest = tmp / "manifest.chute"
    chute.write(manifest, {"x": np.arange(4)})
    obj = json.loads((manifest / "chute.json").read_text())
    obj["metadata"] = {"pad": "@PAD@"}  # 100 MB: a metadata list of 50M numbers
    text = json.dumps(obj).replace('"@PAD@"', "[" + "0," * 50_000_000 + "0]")
    (manifest / "chute.json").write_text(text)

    cases = []
    for name, path, n in (("1GiB", small, GiB), ("10GiB", big, 10 * GiB)):
        for shuffle in (True, False):
            cases.append(
                (
                    f"loader-{name}-{shuffle}",
                    f"ds = chute.open({str(path)!r})",
                    n + MARGIN,
                    f"tuple(next(iter(chute.Loader(ds, 32, shuffle={shuffle}, "
                    "num_workers=2)))['x'].shape)",
                )
            )
    cases.append(
        (
            "dataloader-1GiB",
            f"ds = chute.open({str(small)!r})",
            GiB + MARGIN,
            "tuple(next(iter(chute.dataloader(ds, 32, num_workers=0, pin_memory=False)))"
            "['x'].shape)",
        )
    )
    for block in (None, 4096):
        cases.append(
            (
                f"order-{block}",
                f"order = chute.Order({10 * GiB}, 32, seed=3, block_size={block})",
                MARGIN,
                "(len(order), tuple(next(order.batches())[:4].tolist()), "
                "order.state_dict()['consumed'])",
            )
        )
    setup = f"ds = chute.open({str(ragged)!r})"
    cases.append(("getitem-10GiB", setup, 10 * GiB + MARGIN, "ds[0]['b'].shape"))
    cases.append(("gather-10GiB", setup, 10 * GiB + MARGIN, "ds.gather([0])['b'].values.shape"))
    cases.append(
        (
            "manifest-100MB",
            "import pickle",
            512 << 20,
            f"len(pickle.dumps(chute.open({str(manifest)!r})))",
        )
    )
    return cases


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[Any, dict[str, Any]]:
    cases = _cases(tmp_path_factory.mktemp("dos"))
    code = f"""
        for case, setup, extra, expr in {cases!r}:
            ns = {{"chute": chute, "np": np}}
            exec(setup, ns)
            cap(extra)
            outcome(lambda: eval(expr, ns), case)
            ns.clear()
    """
    return capped_cases(code, timeout=300)


def _get(outcomes: dict, case: str) -> dict[str, Any]:
    assert case in outcomes, f"case {case} never reported: {outcomes['_run']}"
    return outcomes[case]


def _assert_ok(res: dict, what: str) -> None:
    assert "ok" in res, f"{what}: {res}"


def _assert_chute_error(res: dict, what: str) -> None:
    assert "error" in res and res["chute"], f"{what}: expected a ChuteError, got {res}"
    assert "MemoryError" not in res["error"], f"{what}: {res}"


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("size", ["1GiB", "10GiB"])
def test_sparse_file_loader_first_batch_bounded(outcomes, size: str, shuffle: bool) -> None:
    """``next(iter(chute.Loader(ds, 32)))`` over 2**30 (10 * 2**30) uint8 samples held by a
    sparse file: 182 s and 17.3 GB uncapped, a MemoryError capped, today."""
    _assert_ok(_get(outcomes, f"loader-{size}-{shuffle}"), f"Loader, {size}, shuffle={shuffle}")


def test_sparse_file_dataloader_first_batch_bounded(outcomes) -> None:
    _assert_ok(_get(outcomes, "dataloader-1GiB"), "chute.dataloader first batch, 1 GiB")


@pytest.mark.parametrize("block_size", [None, 4096])
def test_order_of_billions_is_bounded(outcomes, block_size: int | None) -> None:
    """``chute.Order(10 * 2**30, 32)``: the first batch, ``len()`` and ``state_dict`` without
    materialising the 80 GiB permutation."""
    _assert_ok(_get(outcomes, f"order-{block_size}"), f"Order(10 GiB, block_size={block_size})")


def test_sparse_ragged_sample_getitem_raises_before_allocating(outcomes) -> None:
    """One Bytes sample of 10 GiB held by a sparse file: ``ds[0]`` raises before allocating it."""
    _assert_chute_error(_get(outcomes, "getitem-10GiB"), "ds[0] of a 10 GiB sparse sample")


def test_sparse_ragged_sample_gather_raises_before_allocating(outcomes) -> None:
    """The same through ``gather`` (no 20 GiB of int64 index temporaries)."""
    _assert_chute_error(_get(outcomes, "gather-10GiB"), "gather([0]) of a 10 GiB sparse sample")


def test_huge_manifest_is_bounded(outcomes) -> None:
    """A 100 MB manifest (a metadata list of 50M numbers): open it in bounded memory or refuse
    it with a ChuteError; if it opens, a worker must not be sent 100 MB per pickle."""
    res = _get(outcomes, "manifest-100MB")
    if "ok" in res:
        assert int(res["ok"]) < 8 << 20, f"the dataset pickles to {int(res['ok'])} bytes"
    else:
        _assert_chute_error(res, "chute.open of a 100 MB manifest")
