"""Wrong ``dtype=``, ``pad_to=`` and ``pad_multiple=`` in both loaders: refused when the
loader is made, with a chute error naming the field; a sample longer than ``pad_to`` named
with its index and length, suggesting ``max_length=``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _faults import recorded_case  # noqa: F401 - autouse: records the case

import chute
from chute.errors import ArgumentError, ArgumentValueError


@pytest.fixture(scope="module")
def ds(tmp_path_factory: pytest.TempPathFactory) -> chute.Dataset:
    path = tmp_path_factory.mktemp("args") / "d.chute"
    chute.write(
        path,
        {
            "tokens": [np.arange(i % 9, dtype=np.int32) for i in range(30)],
            "y": np.arange(30),
            "name": [f"s{i}" for i in range(30)],
            "blob": [bytes(i % 4) for i in range(30)],
            "grid": [np.zeros((1 + i % 3, 1 + i % 2), np.float32) for i in range(30)],
        },
    )
    return chute.open(path)


LOADERS = [chute.Loader, chute.dataloader]


def make(loader: Any, ds: Any, **kw: Any) -> Any:
    return loader(ds, 4, num_workers=0, pin_memory=False, **kw)


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize(
    ("dtype", "field", "says"),
    [
        ({"nope": torch.int64}, "nope", "does not have"),
        ({"name": torch.int64}, "name", "string field is not cast"),
        ({"blob": "int64"}, "blob", "bytes field is not cast"),
        ({"tokens": "object"}, "tokens", "is not a dtype"),
        ({"y": "no such dtype"}, "y", "is not a dtype"),
        ({"y": 3}, "y", "is not a dtype"),
    ],
)
def test_a_field_that_cannot_be_cast_is_named(ds, loader, dtype, field, says):
    with pytest.raises(ArgumentError, match=f"dtype= .*{field!r}") as info:
        make(loader, ds, dtype=dtype)
    assert says in str(info.value)


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize(
    ("kw", "error", "says"),
    [
        ({"pad_to": 8}, ArgumentError, "pass pad= too"),
        ({"pad_multiple": 8}, ArgumentError, "pass pad= too"),
        ({"pad": 0, "pad_to": 8, "pad_multiple": 4}, ArgumentError, "not both"),
        ({"pad": 0, "pad_to": 0}, ArgumentValueError, "pad_to must be >= 1"),
        ({"pad": 0, "pad_multiple": 2.5}, ArgumentError, "pad_multiple must be an int"),
    ],
)
def test_a_width_without_pad_or_out_of_range_is_refused(ds, loader, kw, error, says):
    narrow = chute.open(ds.path, fields=["tokens", "y"])
    with pytest.raises(error, match=says):
        make(loader, narrow, **kw)


@pytest.mark.parametrize("loader", LOADERS)
def test_a_field_varying_in_several_dimensions_has_no_single_width(ds, loader):
    with pytest.raises(ArgumentValueError, match=r"field 'grid'.*several dimensions"):
        make(loader, ds, pad=0, pad_to=8)


@pytest.mark.parametrize("loader", LOADERS)
def test_a_sample_longer_than_pad_to_is_named(ds, loader):
    narrow = chute.open(ds.path, fields=["tokens", "y"])
    with pytest.raises(ArgumentValueError, match="max_length=6") as info:
        list(make(loader, narrow, pad=0, pad_to=6, shuffle=False))
    # samples 0-3 are shorter; sample 7 (7 rows) is the first longer one, in the second batch
    assert "field 'tokens': sample 7 has 7 rows, more than pad_to=6" in str(info.value)
    fine = make(loader, narrow, pad=0, pad_to=6, max_length=6)  # max_length cuts first
    assert {b["tokens"].shape[1] for b in fine} == {6}


def test_a_sample_longer_than_pad_to_in_a_worker_thread(tmp_path: Path) -> None:
    """From a worker thread the error keeps its class (the Loader's NOTE)."""
    chute.write(tmp_path / "t", {"t": [np.arange(n) for n in (1, 2, 30, 3)]})
    loader = chute.Loader(chute.open(tmp_path / "t"), 2, num_workers=2, pad=0, pad_to=8)
    with pytest.raises(ArgumentValueError, match="sample 2 has 30 rows"):
        list(loader)


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize(
    ("pad", "says"),
    [
        ({"tokens": 0, "lables": -100}, r"names field 'lables', which the dataset does not have"),
        ({"tokens": "0"}, r"pad=\{'tokens': '0'\}: pad= takes a number per field"),
        ({"tokens": 2**40}, r"pad=1099511627776 for field 'tokens' \(int32\)"),
        ({"grid": 0.5, "tokens": -1.5}, r"for field 'tokens' \(int32\): needs an integer"),
    ],
)
def test_a_pad_per_field_that_does_not_fit_is_named(ds, loader, pad, says):
    with pytest.raises(chute.SchemaError, match=says) as info:
        make(loader, ds, pad=pad)
    if "lables" in pad:  # the fields there are, to pick from
        assert "['blob', 'grid', 'name', 'tokens', 'y']" in str(info.value)


@pytest.mark.parametrize("loader", LOADERS)
def test_a_pad_per_field_names_the_fields_of_what_is_loaded(ds, loader):
    rows = chute.pack(chute.open(ds.path, fields=["tokens"]), "tokens", 8, labels="next")
    with pytest.raises(chute.SchemaError, match="does not have; its fields are") as info:
        make(loader, rows, pad={"loss_mask": 0})
    assert "['cu_seqlens', 'labels', 'position_ids', 'tokens']" in str(info.value)


@pytest.mark.parametrize("loader", LOADERS)
def test_max_length_over_packed_or_windowed_rows_is_refused(ds, loader):
    tokens = chute.open(ds.path, fields=["tokens"])
    for rows in (chute.pack(tokens, "tokens", 8), chute.windows(tokens, "tokens", 4)):
        with pytest.raises(ArgumentValueError, match=r"tokens each already.*length="):
            make(loader, rows, max_length=2, batch_tokens=16)
