"""chute.write / chute.Writer on real files: inference, promotion, errors, atomic commit."""

from __future__ import annotations

import json
import multiprocessing
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from _reliability import leftovers

import chute
from chute.errors import (
    ArgumentError,
    ArgumentValueError,
    DatasetExistsError,
    DatasetNotFoundError,
    SchemaError,
)
from chute.writer import writer as cw
from chute.writer.commit import exchange

FORK = multiprocessing.get_context("fork")


# ---------------------------------------------------------------------------- writing


def test_write_arrays_tensors_and_lists(tmp_path, check_sample):
    x = np.random.default_rng(0).normal(size=(7, 3)).astype(np.float32)
    y = torch.arange(7, dtype=torch.int16)
    words = [f"w{i}" for i in range(7)]
    path = chute.write(tmp_path / "d.chute", {"x": x, "y": y, "w": words, "n": list(range(7))})
    assert path == tmp_path / "d.chute"
    ds = chute.open(path)
    assert ds.schema == {
        "x": chute.fields.Tensor((3,), "float32"),
        "y": chute.fields.Tensor((), "int16"),
        "w": chute.String(),
        "n": chute.fields.Tensor((), "int64"),
    }
    for i in range(7):
        check_sample(ds[i], {"x": x[i], "y": y[i], "w": words[i], "n": np.int64(i)})


def test_write_with_a_schema_for_some_fields_infers_the_others(tmp_path):
    """schema= may declare a few fields; the others are inferred as without it, in the
    arrays' order; a field the schema names but the arrays lack is still an error."""
    docs = [np.arange(k, dtype=np.int32) for k in (3, 1, 4)]
    path = chute.write(
        tmp_path / "d.chute",
        {"label": np.arange(3), "tokens": docs, "name": ["a", "b", "c"]},
        schema={"tokens": chute.fields.Ragged("int32")},
    )
    ds = chute.open(path)
    assert list(ds.schema) == ["label", "tokens", "name"]
    assert ds.schema["tokens"] == chute.fields.Ragged("int32")
    assert ds[2]["tokens"].tolist() == [0, 1, 2, 3] and ds[1]["name"] == "b"
    assert int(ds[2]["label"]) == 2
    with pytest.raises(SchemaError, match="missing"):
        chute.write(
            tmp_path / "e.chute",
            {"label": np.arange(3)},
            schema={"label": chute.fields.Tensor((), "int64"), "other": chute.fields.Bytes()},
        )


def test_write_in_chunks_equals_one_go(tmp_path):
    data = {"x": np.arange(1000 * 5, dtype=np.int32).reshape(1000, 5), "t": np.arange(1000)}
    chute.write(tmp_path / "one.chute", data)
    chute.write(tmp_path / "many.chute", data, chunk_bytes=100)  # ~4 samples per extend
    for name in ("x.npy", "t.npy"):
        assert (tmp_path / "one.chute" / name).read_bytes() == (
            tmp_path / "many.chute" / name
        ).read_bytes()


def test_early_writeback_keeps_every_byte(tmp_path, monkeypatch):
    # Writeback starts every WRITEBACK_BYTES of a file: with a tiny threshold it runs after
    # nearly every write, in every file (values, offsets, data), and must not change a byte.
    from chute.writer import field_files as columns

    monkeypatch.setattr(columns, "WRITEBACK_BYTES", 100)
    rng = np.random.default_rng(0)
    data = {"x": rng.normal(size=(500, 7)), "r": [np.arange(i % 13) for i in range(500)]}
    chute.write(tmp_path / "d.chute", data, chunk_bytes=300)
    assert chute.verify(tmp_path / "d.chute") > 0
    ds = chute.open(tmp_path / "d.chute")
    assert np.array_equal(ds.gather(range(500))["x"].numpy(), data["x"])
    assert [ds[i]["r"].tolist() for i in (0, 12, 499)] == [[], list(range(12)), list(range(5))]
    with open(tmp_path / "f.bin", "wb") as f:  # also on a file with nothing dirty
        columns.start_writeback(f.fileno(), 0, 1 << 20)


def test_write_from_memmap_input(tmp_path):
    src = tmp_path / "src.npy"
    np.save(src, np.arange(4096, dtype=np.float64).reshape(512, 8))
    arr = np.load(src, mmap_mode="r")
    chute.write(tmp_path / "d.chute", {"x": arr}, chunk_bytes=1000)
    assert np.array_equal(chute.open(tmp_path / "d.chute").gather(range(512))["x"].numpy(), arr)


def test_append_and_extend_mix(tmp_path, check_sample):
    path = tmp_path / "d.chute"
    with chute.Writer(path) as w:
        w.append({"x": np.float32(1.5), "s": "a"})
        w.extend({"x": np.array([2.5, 3.5], np.float32), "s": ["b", "c"]})
        w.extend({"x": [np.float32(4.5)], "s": ["d"]})
        w.extend({"x": np.zeros(0, np.float32), "s": []})
        assert len(w) == 4
        assert w.schema == {"x": chute.fields.Tensor((), "float32"), "s": chute.String()}
    ds = chute.open(path)
    assert ds.gather(range(4))["s"] == ["a", "b", "c", "d"]
    assert ds.gather(range(4))["x"].tolist() == [1.5, 2.5, 3.5, 4.5]


def test_schema_inference_kinds(tmp_path):
    path = tmp_path / "d.chute"
    with chute.Writer(path) as w:
        w.append({"f": 1.0, "i": 3, "b": True, "s": "é", "raw": b"\x00", "c": 1j, "a": [1, 2]})
    assert chute.open(path).schema == {
        "f": chute.fields.Tensor((), "float64"),
        "i": chute.fields.Tensor((), "int64"),
        "b": chute.fields.Tensor((), "bool"),
        "s": chute.String(),
        "raw": chute.Bytes(),
        "c": chute.fields.Tensor((), "complex128"),
        "a": chute.fields.Tensor((2,), "int64"),
    }


def test_declared_schema_accepts_safe_casts_and_refuses_lossy_ones(tmp_path):
    schema = {"x": chute.fields.Tensor((3,), "float32")}
    with chute.Writer(tmp_path / "ok.chute", schema) as w:
        w.append({"x": [1, 2, 3]})  # Python ints that fit exactly
        w.append({"x": np.array([1, 2, 3], np.int16)})  # safe numpy cast
        w.append({"x": np.array([1, 2, 3], ">f4")})  # big-endian input, stored little-endian
    ds = chute.open(tmp_path / "ok.chute")
    assert ds.gather([0, 1, 2])["x"].tolist() == [[1, 2, 3]] * 3
    raw = (tmp_path / "ok.chute" / "x.npy").read_bytes()
    assert b"'descr': '<f4'" in raw[:128]
    for bad in (np.zeros(3, np.float64), torch.zeros(3, dtype=torch.float64), [1e40, 0, 0]):
        with (
            pytest.raises(SchemaError, match=r"field 'x', sample 0: dtype float64 does not fit"),
            chute.Writer(tmp_path / "bad.chute", schema) as w,
        ):
            w.append({"x": bad})
        assert not (tmp_path / "bad.chute").exists()


def test_bfloat16_and_exotic_dtypes(tmp_path, check_sample):
    samples = [
        {
            "bf": torch.tensor([i, -0.5], dtype=torch.bfloat16),
            "h": np.array([i, np.nan], np.float16),
            "z": np.array([1 + 1j * i], np.complex64),
            "u": np.uint64(2**64 - 1 - i),
            "flag": np.array([i % 2 == 0, True]),
        }
        for i in range(4)
    ]
    path = tmp_path / "d.chute"
    with chute.Writer(path) as w:
        for s in samples:
            w.append(s)
    ds = chute.open(path)
    assert ds.schema["bf"] == chute.fields.Tensor((2,), "bfloat16")
    for i, s in enumerate(samples):
        check_sample(ds[i], s)
    assert ds.gather([3, 1])["bf"].dtype == torch.bfloat16


def test_nan_and_inf_are_data(tmp_path):
    x = np.array([np.nan, np.inf, -np.inf, -0.0])
    chute.write(tmp_path / "d.chute", {"x": x})
    got = chute.open(tmp_path / "d.chute").gather(range(4))["x"].numpy()
    assert got.tobytes() == x.tobytes()


def test_metadata_round_trip_and_refusal(tmp_path):
    meta = {"classes": ["a", "b"], "nested": {"k": 1.5}, "unicode": "日本"}
    chute.write(tmp_path / "d.chute", {"x": [1]}, metadata=meta)
    assert chute.open(tmp_path / "d.chute").metadata == meta
    for bad in ({"x": object()}, {"x": float("nan")}):
        with pytest.raises(SchemaError, match="metadata must be JSON"):
            chute.write(tmp_path / "m.chute", {"x": [1]}, metadata=bad)
        assert not (tmp_path / "m.chute").exists() and not leftovers(tmp_path / "m.chute")


def test_empty_datasets(tmp_path):
    schema = {
        "x": chute.fields.Tensor((3,), "int8"),
        "t": chute.Ragged("int16"),
        "s": chute.String(),
    }
    with chute.Writer(tmp_path / "a.chute", schema):
        pass
    ds = chute.open(tmp_path / "a.chute")
    assert len(ds) == 0 and ds.schema == schema
    assert ds.gather([])["x"].shape == (0, 3)
    chute.write(tmp_path / "b.chute", {"x": np.zeros((0, 2, 2), np.uint8)})
    assert chute.open(tmp_path / "b.chute").schema == {"x": chute.fields.Tensor((2, 2), "uint8")}
    with pytest.raises(SchemaError, match="pass schema="), chute.Writer(tmp_path / "c.chute"):
        pass
    assert not (tmp_path / "c.chute").exists() and not leftovers(tmp_path / "c.chute")


# ---------------------------------------------------------------------------- parts


def test_part_size_splits_into_parts(tmp_path):
    path = tmp_path / "d.chute"
    with chute.Writer(path, part_size=4) as w:
        w.extend({"x": np.arange(10)})
        w.append({"x": 10})
    assert sorted(p.name for p in path.iterdir()) == [
        "chute.json",
        "part-00000",
        "part-00001",
        "part-00002",
    ]
    ds = chute.open(path)
    assert ds.gather(range(11))["x"].tolist() == list(range(11))


def test_write_with_part_size_round_trips_a_dict_of_arrays(tmp_path, check_sample):
    x = np.arange(10 * 3, dtype=np.float32).reshape(10, 3)
    words = [f"w{i}" * i for i in range(10)]  # a ragged field too, "" first
    # rows of ~76 bytes: chunks of 3 samples, which straddle the parts of 4
    path = chute.write(tmp_path / "d.chute", {"x": x, "w": words}, part_size=4, chunk_bytes=230)
    manifest = json.loads((path / "chute.json").read_text())
    assert [(p["name"], p["num_samples"]) for p in manifest["parts"]] == [
        ("part-00000", 4),
        ("part-00001", 4),
        ("part-00002", 2),
    ]
    ds = chute.open(path)
    for i in range(10):
        check_sample(ds[i], {"x": x[i], "w": words[i]})
    chute.verify(path)


@pytest.mark.parametrize("part_size", [0, -1, 2.5, True])
def test_bad_part_size(tmp_path, part_size):
    with pytest.raises(ArgumentValueError, match="part_size"):
        chute.Writer(tmp_path / "d.chute", part_size=part_size)
    assert not leftovers(tmp_path / "d.chute")
    with pytest.raises(ArgumentValueError, match="part_size"):
        chute.write(tmp_path / "d.chute", {"x": np.arange(3)}, part_size=part_size)
    assert not leftovers(tmp_path / "d.chute") and not (tmp_path / "d.chute").exists()


def test_parallel_write_part_and_commit(tmp_path):
    """The low-level API parallel writers (Dask tasks) use: one part per thread, one commit."""
    path = tmp_path / "d.chute"
    schema = {"x": chute.fields.Tensor((2,), "float32"), "t": chute.Ragged("int64")}
    staging = cw.new_staging_dir(path)
    infos: list = [None] * 3

    def task(k: int) -> None:
        batches = (
            {"x": np.full((3, 2), 10 * k + b, np.float32), "t": [np.arange(k + b)] * 3}
            for b in range(2)
        )
        infos[k] = cw.write_part(staging / f"part-{k:05d}", schema, batches)

    threads = [threading.Thread(target=task, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not path.exists()  # nothing is visible before the commit
    with pytest.raises(DatasetNotFoundError):
        chute.open(staging)
    assert cw.commit(staging, path, schema, infos, metadata={"tasks": 3}) == path
    ds = chute.open(path)
    assert len(ds) == 18 and ds.metadata == {"tasks": 3}
    assert ds[9]["x"].tolist() == [11.0, 11.0]  # task 1, batch 1
    assert ds[9]["t"].tolist() == [0, 1]
    assert not staging.exists()


def test_write_part_checks_its_folder_and_schema(tmp_path):
    staging = cw.new_staging_dir(tmp_path / "d.chute")
    with pytest.raises(SchemaError, match="part-00000"):
        cw.write_part(staging / "evil", {"x": chute.fields.Tensor()}, [])
    with pytest.raises(SchemaError, match=r"field 'x', sample 2: shape \(2,\)"):
        cw.write_part(
            staging / "part-00000",
            {"x": chute.fields.Tensor((3,), "float32")},
            [{"x": np.zeros((2, 3), np.float32)}, {"x": [np.zeros(2, np.float32)]}],
        )


def test_append_adds_parts_atomically(tmp_path):
    path = tmp_path / "d.chute"
    chute.write(path, {"x": np.arange(3), "s": ["a", "b", "c"]}, metadata={"m": 1})
    with chute.Writer(path, append=True, metadata={"k": 2}) as w:
        w.extend({"x": np.arange(3, 5), "s": ["d", "e"]})
        assert len(chute.open(path)) == 3  # not visible before the commit
    with chute.Writer(path, append=True, part_size=1) as w:
        w.extend({"x": np.arange(5, 7), "s": ["f", "g"]})
    ds = chute.open(path)
    assert ds.metadata == {"m": 1, "k": 2}
    assert ds.gather(range(7))["s"] == list("abcdefg")
    assert ds.gather(range(7))["x"].tolist() == list(range(7))
    assert sorted(p.name for p in path.glob("part-*")) == ["part-00001", "part-00002", "part-00003"]
    chute.verify(path)


def test_failed_append_leaves_the_dataset_as_it_was(tmp_path):
    path = tmp_path / "d.chute"
    chute.write(path, {"x": np.arange(3)})
    before = sorted(p.name for p in path.rglob("*"))
    with pytest.raises(RuntimeError, match="boom"), chute.Writer(path, append=True) as w:
        w.append({"x": 9})
        raise RuntimeError("boom")
    with (
        pytest.raises(SchemaError, match=r"field 'x', sample 1: dtype float64"),
        chute.Writer(path, append=True) as w,
    ):
        w.extend({"x": [7, 8.5]})
    assert sorted(p.name for p in path.rglob("*")) == before
    assert chute.open(path).gather(range(3))["x"].tolist() == [0, 1, 2]


def test_append_errors(tmp_path):
    path = tmp_path / "d.chute"
    chute.write(path, {"x": np.arange(3)})
    with pytest.raises(SchemaError, match="differs from the dataset's"):
        chute.Writer(path, {"x": chute.fields.Tensor((), "float32")}, append=True)
    with pytest.raises(ArgumentValueError, match="exclude each other"):
        chute.Writer(path, append=True, overwrite=True)
    with pytest.raises(DatasetNotFoundError):
        chute.Writer(tmp_path / "missing.chute", append=True)


def _append_rounds(path: Path, who: int, rounds: int, start) -> None:
    start.wait()
    for r in range(rounds):
        with chute.Writer(path, append=True, part_size=10) as w:
            w.extend({"id": 1000 * who + 100 * r + np.arange(20)})


def test_concurrent_appenders_keep_every_sample(tmp_path):
    # Two processes appending at once take turns: neither commit drops the other's parts (each
    # would otherwise have read the manifest once and lost the other's samples, silently).
    path = tmp_path / "d.chute"
    chute.write(path, {"id": np.arange(5)})
    start = FORK.Event()
    procs = [FORK.Process(target=_append_rounds, args=(path, who, 6, start)) for who in (1, 2)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    want = [1000 * who + 100 * r + i for who in (1, 2) for r in range(6) for i in range(20)]
    ds = chute.open(path)
    assert sorted(ds.gather(range(len(ds)))["id"].tolist()) == list(range(5)) + want
    chute.verify(path)


def _in_thread(fn) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


HOLDING_APPENDER = """
import sys, chute
w = chute.Writer(sys.argv[1], append=True)
w.append({"id": 99})
print("holding", flush=True)
sys.stdin.readline()
"""


@pytest.mark.slow  # processes
@pytest.mark.timeout(60)
def test_a_second_appender_waits_and_a_killed_one_releases_the_lock(tmp_path):
    path = tmp_path / "d.chute"
    chute.write(path, {"id": np.arange(3)})
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDING_APPENDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline() == "holding\n"
    go = threading.Event()
    go.set()
    waiter = _in_thread(lambda: _append_rounds(path, 1, 1, go))
    waiter.join(0.3)
    assert waiter.is_alive()  # waits for the appender in the other process
    proc.kill()  # SIGKILL: the kernel drops its lock
    proc.wait()
    waiter.join(30)
    assert not waiter.is_alive()
    ds = chute.open(path)
    assert ds.gather(range(len(ds)))["id"].tolist() == [0, 1, 2, *range(1000, 1020)]


@pytest.mark.timeout(60)
def test_a_commit_waits_for_an_appender(tmp_path):
    # overwrite=True (and every commit onto the path) takes the appenders' lock
    path = tmp_path / "d.chute"
    chute.write(path, {"id": np.arange(3)})
    with chute.Writer(path, append=True) as w:
        w.append({"id": 3})
        replacer = _in_thread(lambda: chute.write(path, {"id": [7, 8]}, overwrite=True))
        replacer.join(0.3)
        assert replacer.is_alive()
    replacer.join(30)
    assert chute.open(path).gather(range(2))["id"].tolist() == [7, 8]


def _sleep_until(event) -> None:
    event.wait(30)


@pytest.mark.timeout(60)
def test_a_forked_child_does_not_keep_the_lock(tmp_path):
    # A DataLoader worker forked while a Writer appends inherits the lock's descriptor: it
    # must not keep the lock after the writer commits, or the next append waits for it.
    path = tmp_path / "d.chute"
    chute.write(path, {"id": np.arange(3)})
    done = FORK.Event()
    with chute.Writer(path, append=True) as w:
        child = FORK.Process(target=_sleep_until, args=(done,))
        child.start()
        w.append({"id": 3})
    with chute.Writer(path, append=True) as w:  # the child is still alive
        w.append({"id": 4})
    assert child.is_alive()
    done.set()
    child.join(30)
    assert len(chute.open(path)) == 5


def test_exchange_swaps_two_folders(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "f").write_text(d.name)
    if not exchange(a, b):
        pytest.skip("no renameat2(RENAME_EXCHANGE) here: writers replace with two renames")
    assert ((a / "f").read_text(), (b / "f").read_text()) == ("b", "a")
    with pytest.raises(FileNotFoundError):
        exchange(a, tmp_path / "missing")


# ---------------------------------------------------------------------------- promotion


def test_length_change_promotes_to_ragged(tmp_path):
    path = tmp_path / "d.chute"
    with chute.Writer(path) as w:
        for n in (3, 3, 0, 5):
            w.append({"t": np.arange(n, dtype=np.int32), "y": n})
    ds = chute.open(path)
    assert ds.schema["t"] == chute.Ragged("int32", ())
    assert [ds[i]["t"].tolist() for i in range(4)] == [[0, 1, 2], [0, 1, 2], [], [0, 1, 2, 3, 4]]


def test_image_size_change_promotes_to_variable_dims(tmp_path):
    path = tmp_path / "d.chute"
    shapes = [(4, 5, 3), (4, 5, 3), (2, 7, 3), (6, 5, 3)]
    with chute.Writer(path) as w:
        for i, s in enumerate(shapes):
            w.append({"img": np.full(s, i, np.uint8)})
    ds = chute.open(path)
    assert ds.schema["img"] == chute.Ragged("uint8", (None, 3))
    for i, s in enumerate(shapes):
        assert ds[i]["img"].shape == s and int(ds[i]["img"].max()) == i
    batch = ds.gather([2, 0])["img"]
    assert batch.shapes.tolist() == [[2, 7, 3], [4, 5, 3]]
    assert batch.sample(0).shape == (2, 7, 3)


def test_promotion_rewrites_closed_parts(tmp_path):
    path = tmp_path / "d.chute"
    with chute.Writer(path, part_size=2) as w:
        for i in range(5):  # parts 0 and 1 are closed when the shape changes
            w.append({"x": np.full((2, 3), i, np.int16), "k": i})
        w.append({"x": np.full((1, 3), 5, np.int16), "k": 5})
        w.append({"x": np.full((1, 4), 6, np.int16), "k": 6})  # then a second promotion
    ds = chute.open(path)
    assert ds.schema["x"] == chute.Ragged("int16", (None,))
    assert [tuple(ds[i]["x"].shape) for i in range(7)] == [(2, 3)] * 5 + [(1, 3), (1, 4)]
    assert [int(ds[i]["x"][0, 0]) for i in range(7)] == list(range(7))
    chute.verify(path)  # the rewritten files' checksums are the ones recorded


def test_promotion_within_one_extend(tmp_path):
    path = tmp_path / "d.chute"
    chute.write(path, {"t": [np.arange(i) for i in range(6)]})
    ds = chute.open(path)
    assert ds.schema["t"] == chute.Ragged("int64")
    assert ds.gather([5, 0]).get("t").offsets.tolist() == [0, 5, 5]


def test_shape_change_is_an_error_when_the_schema_is_given(tmp_path):
    schema = {"t": chute.fields.Tensor((3,), "int64")}
    path = tmp_path / "d.chute"
    with (
        pytest.raises(SchemaError, match=r"field 't', sample 2: shape \(4,\).*chute\.Ragged"),
        chute.Writer(path, schema) as w,
    ):
        w.extend({"t": np.zeros((2, 3), np.int64)})
        w.append({"t": np.zeros(4, np.int64)})
    assert not path.exists() and not leftovers(path)


def test_promotion_needs_the_same_dtype_and_ndim(tmp_path):
    with (
        pytest.raises(SchemaError, match=r"field 'x', sample 1: shape \(2, 2\)"),
        chute.Writer(tmp_path / "a.chute") as w,
    ):
        w.append({"x": np.zeros(3)})
        w.append({"x": np.zeros((2, 2))})
    with (
        pytest.raises(SchemaError, match=r"field 'x', sample 1"),
        chute.Writer(tmp_path / "b.chute") as w,
    ):
        w.append({"x": np.zeros(3, np.float32)})
        w.append({"x": np.zeros(4, np.float64)})


# ---------------------------------------------------------------------------- bad input


def test_object_arrays_are_refused_naming_field_and_sample(tmp_path):
    with pytest.raises(SchemaError, match=r"field 'x', sample 0: dtype object"):
        chute.write(tmp_path / "a.chute", {"x": np.array([1, "a"], dtype=object)})
    with (
        pytest.raises(SchemaError, match=r"field 'x', sample 2: dtype object"),
        chute.Writer(tmp_path / "b.chute") as w,
    ):
        w.extend({"x": [np.zeros(2), np.ones(2), np.array([None, 1], dtype=object)]})
    with pytest.raises(SchemaError, match=r"field 'w', sample 0: dtype <U1"):
        chute.write(tmp_path / "c.chute", {"w": [["a", "b"]]})
    with (
        pytest.raises(SchemaError, match=r"field 'x', sample 1: cannot make an array"),
        chute.Writer(tmp_path / "d.chute", {"x": chute.Ragged("int64")}) as w,
    ):
        w.extend({"x": [[1], [[1, 2], [3]]]})
    assert list(tmp_path.iterdir()) == []


def test_fields_of_different_lengths(tmp_path):
    with pytest.raises(SchemaError, match=r"different lengths.*'x': 3.*'y': 4"):
        chute.write(tmp_path / "a.chute", {"x": np.zeros(3), "y": np.zeros(4)})
    with (
        pytest.raises(SchemaError, match="samples 2\\+: fields have different lengths"),
        chute.Writer(tmp_path / "b.chute") as w,
    ):
        w.extend({"x": np.zeros(2), "y": np.zeros(2)})
        w.extend({"x": np.zeros(3), "y": np.zeros(1)})
    assert list(tmp_path.iterdir()) == []


def test_first_batch_with_an_empty_field_is_not_dropped_silently(tmp_path):
    with (
        pytest.raises(SchemaError, match=r"different lengths.*'x': 0.*'y': 2"),
        chute.Writer(tmp_path / "a.chute") as w,
    ):
        w.extend({"x": [], "y": [1, 2]})  # no schema yet: must not return early
    with chute.Writer(tmp_path / "b.chute") as w:
        w.extend({"x": [], "y": np.zeros(0)})  # all empty: nothing to infer from yet
        w.extend({"x": [5], "y": [6.0]})
    assert chute.open(tmp_path / "b.chute").schema["x"] == chute.fields.Tensor((), "int64")


def test_missing_and_unexpected_fields(tmp_path):
    with (
        pytest.raises(SchemaError, match=r"sample 1: .*missing \['y'\]"),
        chute.Writer(tmp_path / "a.chute") as w,
    ):
        w.append({"x": 1, "y": 2})
        w.append({"x": 1})
    with (
        pytest.raises(SchemaError, match=r"sample 1: .*unexpected \['z'\]"),
        chute.Writer(tmp_path / "b.chute") as w,
    ):
        w.append({"x": 1})
        w.append({"x": 1, "z": 2})


@pytest.mark.parametrize(
    ("schema", "value", "match"),
    [
        ({"x": chute.String()}, b"bytes", "expected str, got bytes"),
        ({"x": chute.Bytes()}, "text", "got str, expected an array"),
        ({"x": chute.Bytes()}, np.zeros(2, np.int32), "Bytes takes bytes"),
        ({"x": chute.Ragged("float32", (3,))}, np.zeros((4, 2), np.float32), r"\(n, 3\)"),
        ({"x": chute.Ragged("float32")}, np.float32(1), r"shape \(\)"),
        ({"x": chute.fields.Tensor((), "int8")}, 300, "int64 does not fit the schema dtype int8"),
    ],
)
def test_values_that_do_not_fit_the_declared_schema(tmp_path, schema, value, match):
    with pytest.raises(SchemaError, match=match), chute.Writer(tmp_path / "d.chute", schema) as w:
        w.append({"x": value})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "schema",
    [{}, {"x": "float32"}, {"../x": chute.fields.Tensor()}, {"a.b": chute.fields.Tensor()}, ["x"]],
)
def test_bad_schemas(tmp_path, schema):
    with pytest.raises(SchemaError):
        chute.Writer(tmp_path / "d.chute", schema)
    assert list(tmp_path.iterdir()) == []


def test_bad_field_name_in_data(tmp_path):
    with pytest.raises(SchemaError, match=r"field name '\.\./x'"):
        chute.write(tmp_path / "d.chute", {"../x": np.zeros(3)})
    assert not (tmp_path.parent / "x.npy").exists()


@pytest.mark.parametrize("value", ["train", b"abc", bytearray(b"ab"), memoryview(b"ab")])
def test_a_str_or_bytes_column_is_not_split_into_samples(tmp_path, value):
    # {"split": "train"} as a column is refused: it would be five samples 't', 'r', 'a', 'i', 'n'.
    kind = type(value).__name__
    with pytest.raises(SchemaError, match=rf"field 'split': .*got one {kind} .*wrap it in a list"):
        chute.write(tmp_path / "a.chute", {"x": np.zeros(len(value)), "split": value})
    with pytest.raises(SchemaError, match="field 'split'"), chute.Writer(tmp_path / "b") as w:
        w.extend({"split": value})
    assert list(tmp_path.iterdir()) == []


def test_str_without_utf8_form_names_field_and_sample(tmp_path):
    with pytest.raises(SchemaError, match=r"field 's', sample 1: the str has no UTF-8 form"):
        chute.write(tmp_path / "a.chute", {"s": ["ok", "bad \ud800"]})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", [123, None, 1.5, ["a"]])
def test_path_must_be_a_path(tmp_path, path):
    with pytest.raises(ArgumentError, match=r"a dataset path is a str or os\.PathLike") as info:
        chute.write(path, {"x": [1]})
    assert isinstance(info.value, TypeError)
    with pytest.raises(ArgumentError):
        chute.Writer(path)


def test_empty_path_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for make in (lambda: chute.write("", {"x": [1]}), lambda: chute.Writer("")):
        with pytest.raises(ArgumentValueError, match="path is empty"):
            make()
    assert list(tmp_path.iterdir()) == []


def test_bytes_path_and_chdir_before_commit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert chute.write(b"b.chute", {"x": [1]}) == Path("b.chute")
    with chute.Writer("d.chute") as w:
        w.append({"x": 1})
        (tmp_path / "elsewhere").mkdir()
        monkeypatch.chdir(tmp_path / "elsewhere")  # the dataset still lands where it was named
    assert w.path == tmp_path / "d.chute" and chute.open(tmp_path / "d.chute")[0]["x"] == 1
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_nested_dicts_become_group_fields_as_in_from_iterable(tmp_path):
    samples = [{"a": {"b": i, "c": {"d": [i, i]}}, "e": float(i)} for i in range(3)]
    with chute.Writer(tmp_path / "w.chute") as w:
        for s in samples:
            w.append(s)
    chute.from_iterable(samples, tmp_path / "i.chute")
    written, converted = chute.open(tmp_path / "w.chute"), chute.open(tmp_path / "i.chute")
    assert written.schema == converted.schema and list(written.schema) == ["a/b", "a/c/d", "e"]
    assert torch.equal(written.gather([2])["a/c/d"], converted.gather([2])["a/c/d"])
    chute.write(tmp_path / "x.chute", {"a": {"b": np.arange(4)}})
    with chute.Writer(tmp_path / "y.chute") as w:
        w.extend({"a": {"b": np.arange(4)}})
    for name in ("x", "y"):
        assert chute.open(tmp_path / f"{name}.chute")[:]["a/b"].tolist() == [0, 1, 2, 3]


def test_numpy_bytes_arrays_are_bytes_and_str_arrays_strings(tmp_path):
    # numpy 'S' holds bytes of no stated encoding -> Bytes; 'U' holds text -> String.
    # (HDF5 fixed-length strings declare ASCII/UTF-8: chute.convert makes them String.)
    path = chute.write(
        tmp_path / "d.chute", {"s": np.array([b"ab", b"c"]), "u": np.array(["x"] * 2)}
    )
    ds = chute.open(path)
    assert ds.schema == {"s": chute.Bytes(), "u": chute.String()}
    assert bytes(ds[0]["s"].numpy()) == b"ab" and ds[1]["u"] == "x"


# ---------------------------------------------------------------------------- atomic commit


def test_existing_path_needs_overwrite(tmp_path):
    path = tmp_path / "d.chute"
    chute.write(path, {"x": [1, 2]})
    with pytest.raises(DatasetExistsError, match="overwrite=True") as info:
        chute.write(path, {"x": [3]})
    assert isinstance(info.value, FileExistsError)
    chute.write(path, {"x": [3]}, overwrite=True)
    assert chute.open(path).gather([0])["x"].tolist() == [3]
    assert not leftovers(path)


def test_overwrite_refuses_what_is_not_a_dataset(tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "keep.jpg").write_bytes(b"precious")
    with pytest.raises(DatasetExistsError, match="not a chute dataset"):
        chute.write(folder, {"x": [1]}, overwrite=True)
    file = tmp_path / "file.txt"
    file.write_text("precious")
    with pytest.raises(DatasetExistsError):
        chute.write(file, {"x": [1]}, overwrite=True)
    assert (folder / "keep.jpg").read_bytes() == b"precious" and file.read_text() == "precious"
    (tmp_path / "empty").mkdir()
    chute.write(tmp_path / "empty", {"x": [1]}, overwrite=True)  # an empty folder is fine


def test_exception_mid_write_leaves_nothing(tmp_path):
    path = tmp_path / "d.chute"
    with pytest.raises(RuntimeError, match="boom"), chute.Writer(path) as w:
        w.extend({"x": np.zeros((100, 10))})
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_exception_with_overwrite_keeps_the_old_dataset(tmp_path):
    path = tmp_path / "d.chute"
    chute.write(path, {"x": [1, 2, 3]})
    with pytest.raises(RuntimeError), chute.Writer(path, overwrite=True) as w:
        w.append({"x": 9})
        raise RuntimeError("boom")
    assert chute.open(path).gather(range(3))["x"].tolist() == [1, 2, 3]
    chute.verify(path)
    assert not leftovers(path)


def test_writer_dropped_without_commit_leaves_nothing(tmp_path):
    w = chute.Writer(tmp_path / "d.chute")
    w.append({"x": 1})
    del w
    assert list(tmp_path.iterdir()) == []


def test_commit_twice_and_write_after_commit(tmp_path):
    w = chute.Writer(tmp_path / "d.chute")
    w.append({"x": 1})
    w.commit()
    with pytest.raises(ArgumentValueError, match="closed"):
        w.commit()
    with pytest.raises(ArgumentValueError, match="closed"):
        w.append({"x": 2})
    assert len(chute.open(tmp_path / "d.chute")) == 1


KILLED_WRITER = """
import os, signal, sys, numpy as np, chute
w = chute.Writer(sys.argv[1], part_size=50)
w.extend({"x": np.zeros((120, 64), np.float32)})
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow  # a killed process
def test_sigkill_mid_write_leaves_no_dataset(tmp_path):
    path = tmp_path / "d.chute"
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(path)], timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert not path.exists()
    (stale,) = leftovers(path)  # the dead writer's staging folder: not a dataset
    with pytest.raises(DatasetNotFoundError):
        chute.open(path.parent / stale)
    chute.write(path, {"x": [1]})  # the next writer cleans up after the dead one
    assert not leftovers(path)
    assert len(chute.open(path)) == 1


# ---------------------------------------------------------------------------- bounded memory

STREAMING_WRITER = """
import resource, sys, numpy as np, chute
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
batch = np.zeros((256, 64 << 10), np.uint8)  # 16 MiB per extend, refilled in place
schema = {"x": chute.fields.Tensor((64 << 10,), "uint8"), "t": chute.Ragged("uint8")}
with chute.Writer(sys.argv[1], schema) as w:
    w.extend({"x": batch, "t": list(batch[:, :4096])})
    before = peak()
    for i in range(64):  # 1 GiB of x (+ 64 MiB of t)
        batch[:, 0] = i
        w.extend({"x": batch, "t": list(batch[:, :4096])})
print(before, peak())
"""


@pytest.mark.slow
def test_streaming_a_large_dataset_keeps_memory_flat(tmp_path):
    path = tmp_path / "big.chute"
    out = subprocess.run(
        [sys.executable, "-c", STREAMING_WRITER, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    before, after = map(int, out.split())
    ds = chute.open(path)
    assert len(ds) == 65 * 256 and ds.nbytes > 1 << 30
    assert int(ds[-1]["x"][0]) == 63
    # written straight to the files: the peak grows by far less than the 1 GiB written
    assert after - before < 64 << 20, f"peak RSS grew by {(after - before) >> 20} MiB"
