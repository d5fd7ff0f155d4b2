"""chute.convert of an in-memory pyarrow Table / RecordBatch that a user built by hand: the
same refusals as a Parquet file, and buffers that break Arrow's invariants refused before a
value is read (sources/table.py validates each record batch in full)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _reliability import recorded

import chute
from chute.errors import SourceError

pa = pytest.importorskip("pyarrow")

_row = recorded(
    {
        "test_broken_buffers_are_refused_before_reading": (
            "converter: in-memory Arrow table with broken buffers",
            "a pyarrow Table / RecordBatch made with Array.from_buffers: string and list "
            "offsets that go backwards, invalid UTF-8",
            "SourceError naming the rows; nothing written",
        ),
        "test_field_name_collisions_are_refused": (
            "converter: in-memory Arrow table whose columns flatten to one field name",
            "two columns of one name; a struct member and a 'struct/member' column",
            "SourceError naming both; nothing written",
        ),
    }
)


def _offsets(*values: int) -> Any:
    return pa.py_buffer(np.array(values, np.int32).tobytes())


BROKEN = {
    "string offsets backwards": lambda: pa.Array.from_buffers(
        pa.string(), 2, [None, _offsets(0, 3, 1), pa.py_buffer(b"abc")]
    ),
    "list offsets backwards": lambda: pa.Array.from_buffers(
        pa.list_(pa.int64()), 2, [None, _offsets(0, 3, 1)], children=[pa.array([1, 2, 3])]
    ),
    "invalid UTF-8": lambda: pa.Array.from_buffers(
        pa.string(), 1, [None, _offsets(0, 2), pa.py_buffer(b"\xff\xfe")]
    ),
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
@pytest.mark.parametrize("as_batch", [False, True], ids=["table", "record_batch"])
def test_broken_buffers_are_refused_before_reading(
    tmp_path: Path, kind: str, as_batch: bool
) -> None:
    table = pa.table({"ok": [1, 2][: len(BROKEN[kind]())], "bad": BROKEN[kind]()})
    src = table.to_batches()[0] if as_batch else table
    name = "RecordBatch" if as_batch else "Table"
    with pytest.raises(SourceError, match=rf"<pyarrow\.{name}>: rows 0 to \d+ are not valid"):
        chute.convert(src, tmp_path / "out.chute", progress=False)
    assert not (tmp_path / "out.chute").exists()


def test_field_name_collisions_are_refused(tmp_path: Path) -> None:
    twice = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
    with pytest.raises(SourceError, match="column 'a' and column 'a' both become field 'a'"):
        chute.convert(twice, tmp_path / "out.chute", progress=False)
    hidden = pa.table({"s": pa.array([{"a": 1}]), "s/a": [2]})
    with pytest.raises(SourceError, match="member 'a' of struct 's' and column 's/a'"):
        chute.convert(hidden, tmp_path / "out.chute", progress=False)
    assert not (tmp_path / "out.chute").exists()
