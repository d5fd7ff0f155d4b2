"""The conformance check every field kind passes: :func:`check_field_kind`.

A kind's test calls it with a few samples; it writes them, opens the dataset and reads them
back every way chute reads (``ds[i]``, slices, ``gather``, the :class:`~chute.Loader`, a
:func:`~chute.mix`, and Ray Data when Ray is installed), checking each against the samples and
against each other. ``docs/field_kinds.md`` says how a kind is added.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from .batch import RaggedBatch
from .columns.encoded_images import EncodedImages
from .kinds import Field, Tensor, field_from_json, field_to_json
from .reader.mix import mix
from .reader.opening import open as open_dataset
from .writer.arrays import write

FIELD = "x"  # the field under test; "i" holds each sample's index


def check_field_kind(
    kind: Field,
    samples: Sequence[Any],
    tmp_path: str | os.PathLike,
    expect: Callable[[Any], Any] | None = None,
    *,
    ray: bool = True,
) -> None:
    """Check field kind ``kind`` end to end on ``samples`` (at least 4, written as field
    ``"x"`` in parts of 3), in folder ``tmp_path``; an AssertionError names what differs.

    ``expect(sample)``: what ``ds[i]`` gives for a written sample (default: the sample, as an
    array, ``str`` or bytes). Checked: the manifest entry's JSON round trip; ``ds[i]`` for
    every ``i``; ``ds[a:b]`` within and across parts; ``gather`` of shuffled, repeated indices
    over several parts; a :class:`~chute.Loader` epoch; a :func:`~chute.mix` of two copies
    (``gather`` and ``mix[i]``); and, with Ray installed and ``ray`` true, ``chute.ray.read``
    (a running Ray is used, else a local one is started).
    """
    n = len(samples)
    assert n >= 4, "check_field_kind needs at least 4 samples (several parts)"
    entry = field_to_json(kind)
    assert field_from_json(FIELD, json.loads(json.dumps(entry))) == kind, f"JSON: {entry}"
    folder = os.fspath(tmp_path)
    schema = {FIELD: kind, "i": Tensor((), "int64")}
    paths = [os.path.join(folder, f"{name}.chute") for name in ("a", "b")]
    for path in paths:
        write(path, {FIELD: list(samples), "i": np.arange(n)}, schema=schema, part_size=3)
    ds = open_dataset(paths[0])
    assert ds.schema[FIELD] == kind, f"schema read back: {ds.schema[FIELD]!r}"
    want = [expect(s) if expect is not None else s for s in samples]
    got = [ds[i][FIELD] for i in range(n)]
    for i in range(n):
        _same(got[i], want[i], f"ds[{i}]")
        _same(ds[i - n][FIELD], want[i], f"ds[{i - n}]")
    for a, b in ((0, 2), (1, n), (0, n), (2, 2)):
        _same_batch(ds[a:b][FIELD], got[a:b], f"ds[{a}:{b}]")
    idx = np.random.default_rng(0).permutation(np.r_[np.arange(n), [n - 1, 0]])
    _same_batch(ds.gather(idx)[FIELD], [got[i] for i in idx], f"ds.gather({idx.tolist()})")
    _check_loader(ds, got)
    _check_mix(ds, open_dataset(paths[1]), got)
    if ray and importlib.util.find_spec("ray") is not None:
        _check_ray(paths[0], ds)


def _check_loader(ds: Any, got: list[Any]) -> None:
    from .loader.loader import Loader

    seen = 0
    for batch in Loader(ds, batch_size=3, shuffle=True, seed=1, num_workers=1):
        rows = batch["i"].tolist()
        _same_batch(batch[FIELD], [got[i] for i in rows], f"Loader batch {rows}")
        seen += len(rows)
    assert seen == len(got), f"a Loader epoch gave {seen} of {len(got)} samples"


def _check_mix(a: Any, b: Any, got: list[Any]) -> None:
    m = mix({"a": a, "b": b}, seed=3)
    positions = np.arange(len(m))
    rows = m.gather(positions)["i"].tolist()
    _same_batch(m.gather(positions)[FIELD], [got[i] for i in rows], "mix.gather")
    for p in (0, len(m) - 1):
        sample = m[p]
        _same(sample[FIELD], got[int(sample["i"])], f"mix[{p}]")


def _check_ray(path: str, ds: Any) -> None:
    import ray

    from .ray import read

    if not ray.is_initialized():
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    stored = ds.gather(np.arange(len(ds)))[FIELD]
    for row in read(path).iter_rows():
        i = int(row["i"])
        want = stored.sample(i) if isinstance(stored, RaggedBatch) else stored[i]
        # by value: Ray gives a scalar as int64 and an empty list as float64
        _same(row[FIELD], want, f"chute.ray.read row {i}", dtype=False)


def _same_batch(batch: Any, want: list[Any], what: str) -> None:
    """Batch value ``batch`` (tensor, RaggedBatch, EncodedImages, list of str) holds ``want``."""
    assert len(batch) == len(want), f"{what}: {len(batch)} samples, want {len(want)}"
    for k, w in enumerate(want):
        if isinstance(batch, EncodedImages):
            row = batch.decode(k)
        else:
            row = batch.sample(k) if isinstance(batch, RaggedBatch) else batch[k]
        _same(row, w, f"{what}, sample {k}")


def _same(got: Any, want: Any, what: str, dtype: bool = True) -> None:
    """``got`` equals ``want``: shape, values and (``dtype``) dtype."""
    if isinstance(want, str) or isinstance(got, str):
        assert got == want, f"{what}: {got!r} != {want!r}"
        return
    g, w = _array(got), _array(want)
    assert g.shape == w.shape and (g.dtype == w.dtype or not dtype), (
        f"{what}: {g.dtype} {g.shape} != {w.dtype} {w.shape}"
    )
    assert np.array_equal(g, w, equal_nan=g.dtype.kind in "fc"), f"{what}: values differ"


def _array(value: Any) -> np.ndarray:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return np.frombuffer(bytes(value), np.uint8)
    if isinstance(value, torch.Tensor):
        t = value.float() if value.dtype == torch.bfloat16 else value
        return t.numpy()
    return np.asarray(value)
