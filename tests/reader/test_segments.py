"""The segmented copy behind the variable-size gathers: the compiled loop (numba) and numpy's
copies give the same rows for any dtype, row shape and segment layout; numba is imported on
the first gather, never by ``import chute``."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import chute
from chute.columns import segments


def _case(rng: np.random.Generator, dtype: str, inner: tuple[int, ...], mean: int):
    src = rng.integers(0, 100, (5000, *inner)).astype(dtype)
    lengths = rng.integers(0, 2 * mean + 1, 40)
    starts = rng.integers(0, len(src) - lengths + 1)
    order = rng.permutation(len(lengths))  # segments written out of order
    at = (np.cumsum(lengths[order]) - lengths[order])[np.argsort(order)]
    return src, starts.astype(np.int64), lengths.astype(np.int64), at.astype(np.int64)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize(
    ("dtype", "inner"), [("int32", ()), ("uint8", ()), ("float64", (3,)), ("bool", (2, 2))]
)
@pytest.mark.parametrize("mean", [2, 1000])  # numpy: one flat take / slice by slice
@pytest.mark.parametrize("contiguous", [True, False])
def test_copy_matches_slices(
    compiled: bool, dtype: str, inner: tuple[int, ...], mean: int, contiguous: bool
) -> None:
    if compiled:
        pytest.importorskip("numba")
    rng = np.random.default_rng(mean)
    src, starts, lengths, at = _case(rng, dtype, inner, mean)
    if contiguous:  # one run from 0: the batch of one part
        at = np.cumsum(lengths) - lengths
    out = np.zeros((int(lengths.sum()), *inner), dtype)
    segments.copy_segments(src, starts, lengths, at, out, compiled=compiled)
    want = np.zeros_like(out)
    for s, n, a in zip(starts, lengths, at, strict=True):
        want[a : a + n] = src[s : s + n]
    assert np.array_equal(out, want)


def test_compiled_copy_refuses_a_segment_outside_its_arrays() -> None:
    pytest.importorskip("numba")
    src, out = np.arange(10, dtype=np.int32), np.zeros(6, np.int32)
    one = np.array([0], np.int64)
    for starts, lengths, at in [(8, 3, 0), (-1, 2, 0), (0, 3, 4), (0, 2, -1)]:
        with pytest.raises(chute.SampleIndexError, match="segment 0"):
            segments.copy_segments(src, one + starts, one * 0 + lengths, one * 0 + at, out)
    assert not out.any()  # nothing written


def test_numba_is_imported_at_the_first_gather_only(tmp_path) -> None:
    pytest.importorskip("numba")
    path = chute.write(tmp_path / "d.chute", {"t": [np.arange(i + 1) for i in range(5)]})
    code = (
        "import sys, chute; before = 'numba' in sys.modules; "
        f"chute.open({str(path)!r}).gather([4, 0]); print(before, 'numba' in sys.modules)"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert got.stdout.split() == ["False", "True"]
