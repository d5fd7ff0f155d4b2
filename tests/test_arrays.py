"""chute/_arrays.py, and what it is for: a fresh process's first batch imports no numpy.ma."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chute._arrays import distinct


@given(st.lists(st.integers(-(2**40), 2**40), max_size=50))
def test_distinct_is_np_unique(values):
    a = np.array(values, np.int64)
    assert np.array_equal(distinct(a), np.unique(a))
    assert distinct(a).dtype == np.int64


@pytest.mark.slow  # a fresh interpreter
def test_first_batch_of_a_fresh_process_imports_no_numpy_ma(tmp_path):
    """numpy 2's np.unique imports numpy.ma on its first call (~0.1 s holding the GIL): the
    Loader's first batch over several parts must not pay it."""
    code = f"""
import sys
import numpy as np
import chute
chute.write({str(tmp_path / "d")!r}, {{"x": np.arange(4000).reshape(1000, 4)}}, part_size=100)
ds = chute.open({str(tmp_path / "d")!r})
for shuffle in (True, "parts"):
    next(iter(chute.Loader(ds, batch_size=64, shuffle=shuffle, num_workers=2)))
print("numpy.ma" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
