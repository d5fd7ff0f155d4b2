"""chute/_compat.py: every private API of torch and Pillow, resolved on first use, each with a
public fallback (the image fallbacks' pixels are compared in tests/image/test_image_decode.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch.utils import _pytree
from torch.utils.data import default_collate
from torch.utils.data._utils.collate import default_collate_fn_map

import chute
from chute import _compat
from chute.device import map_tensors


@pytest.mark.slow  # a fresh interpreter
def test_import_chute_resolves_no_private_api() -> None:
    code = "import chute, chute._compat as c; print(sorted(c.RESOLVED))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_resize_fallback_writes_the_same_pixels_into_a_channels_last_out() -> None:
    src = torch.randint(
        0, 256, (1, 3, 37, 53), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    src = src.contiguous(memory_format=torch.channels_last)
    fast_out = torch.empty((1, 12, 17, 3), dtype=torch.uint8).permute(0, 3, 1, 2)
    slow_out = torch.empty_like(fast_out)
    _compat.resize_aa()(src, (12, 17), fast_out)
    _compat.fallback("resize_aa")(src, (12, 17), slow_out)
    assert torch.equal(fast_out, slow_out)


def _batch_type(name: str) -> type[chute.RaggedBatch]:
    return type(name, (chute.RaggedBatch,), {"__slots__": ()})


def test_ragged_batches_are_pytree_nodes_and_collate_by_parts() -> None:
    rb = _batch_type("Fast")(torch.arange(5), torch.tensor([0, 2, 5]))
    assert _pytree.tree_leaves(rb)[:2] == [rb.values, rb.offsets]
    both = default_collate([rb, rb])
    assert type(both) is type(rb) and both.values.shape == (2, 5)


@pytest.mark.parametrize("borrowed", ["pytree", "collate"])
def test_without_torchs_registries_a_ragged_batch_still_works(
    monkeypatch: pytest.MonkeyPatch, borrowed: str
) -> None:
    """A torch whose pytree or collate table moved: the batch type is simply not registered
    there (a pytree leaf; not in default_collate's table), everything else is unchanged."""
    monkeypatch.setitem(_compat.RESOLVED, borrowed, _compat.fallback(borrowed))
    rb = _batch_type("Fallback")(torch.arange(5), torch.tensor([0, 2, 5]))
    assert [t.tolist() for t in rb] == [[0, 1], [2, 3, 4]]
    doubled = map_tensors(rb, lambda t: t * 2)
    assert type(doubled) is type(rb) and doubled.values.tolist() == [0, 2, 4, 6, 8]
    if borrowed == "pytree":
        assert _pytree.tree_leaves(rb) == [rb]
        default_collate([rb, rb])  # the collate table still took it
    else:
        assert _pytree.tree_leaves(rb)[:2] == [rb.values, rb.offsets]
        assert type(rb) not in default_collate_fn_map  # (a parent's entry may still match)
