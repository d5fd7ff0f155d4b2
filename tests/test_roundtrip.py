"""Property tests: whatever is written reads back bit for bit, by every access path.

Hypothesis draws a schema (every dtype, shapes with zero-size dims, ragged fields with empty
samples, variable-dims ragged, Bytes, String with any unicode), a sample count (0 included),
how the samples are fed to the writer (append / extend chunks, parts via ``part_size``), and
checks ``ds[i]``, ``gather`` (any order, repeats, negative), slices, ``to_memory`` and pickle,
including in real spawn and fork worker processes.
"""

from __future__ import annotations

import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chute

NUMPY_DTYPES = [
    "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
]  # fmt: skip
DTYPES = [*NUMPY_DTYPES, "bool", "bfloat16"]

ROUNDTRIP = settings(
    deadline=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

dims = st.integers(0, 3)


# ---------------------------------------------------------------------------- values


@st.composite
def arrays(draw, dtype: str, shape: tuple[int, ...]) -> Any:
    """An array of any bit pattern (NaN payloads, -0.0, subnormals); bfloat16 as a torch tensor."""
    n = int(np.prod(shape))
    if dtype == "bool":
        return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool).reshape(shape)
    storage = "<u2" if dtype == "bfloat16" else np.dtype(dtype).newbyteorder("<")
    itemsize = np.dtype(storage).itemsize
    raw = draw(st.binary(min_size=n * itemsize, max_size=n * itemsize))
    arr = np.frombuffer(raw, storage).reshape(shape).copy()
    if dtype == "bfloat16":
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return arr


@st.composite
def fields(draw) -> tuple[chute.fields.Tensor | chute.Ragged | chute.Bytes | chute.String, Any]:
    """A field kind and a strategy for one sample of it."""
    kind = draw(st.sampled_from(["tensor", "ragged", "ragged", "varying", "bytes", "string"]))
    dtype = draw(st.sampled_from(DTYPES))
    if kind == "tensor":
        shape = tuple(draw(st.lists(dims, max_size=3)))
        return chute.fields.Tensor(shape, dtype), arrays(dtype, shape)
    if kind == "ragged":
        inner = tuple(draw(st.lists(dims, max_size=2)))
        return chute.Ragged(dtype, inner), dims.flatmap(lambda n: arrays(dtype, (n, *inner)))
    if kind == "varying":
        inner = draw(st.sampled_from([(None,), (None, 3), (2, None), (None, None, 1)]))
        shapes = st.tuples(*[dims if d is None else st.just(d) for d in (None, *inner)])
        return chute.Ragged(dtype, inner), shapes.flatmap(lambda s: arrays(dtype, s))
    if kind == "bytes":
        return chute.Bytes(), st.binary(max_size=12)
    return chute.String(), st.text(max_size=8)


@st.composite
def datasets(draw) -> tuple[dict, list[dict[str, Any]]]:
    """A schema of 1-4 fields and 0-12 samples of it."""
    names = draw(st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True), min_size=1,
                          max_size=4, unique=True))  # fmt: skip
    drawn = {name: draw(fields()) for name in names}
    schema = {name: f for name, (f, _) in drawn.items()}
    n = draw(st.integers(0, 12))
    samples = [{name: draw(values) for name, (_, values) in drawn.items()} for _ in range(n)]
    return schema, samples


def as_bytes(value: Any) -> tuple[tuple[int, ...], bytes] | str:
    """A comparable form of a written value or a value read back: (shape, raw bytes) or str."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return (len(value),), bytes(value)
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bfloat16:
            value = value.view(torch.int16)
        value = value.numpy()
    value = np.ascontiguousarray(value)
    return value.shape, value.tobytes()


def batch_items(batch: dict[str, Any], name: str) -> list:
    """The samples of field ``name`` in a batch (tensor rows, RaggedBatch samples or str)."""
    column = batch[name]
    if isinstance(column, chute.RaggedBatch):
        return column.tolist()
    return list(column)


def batch_of(f: Any, values: list, stack: bool) -> Any:
    """What extend() takes for a field: a list of samples, or for Tensor fields a stacked array."""
    if not stack or not isinstance(f, chute.fields.Tensor):
        return values
    return torch.stack(values) if isinstance(values[0], torch.Tensor) else np.stack(values)


def check(ds: chute.Dataset, schema: dict, samples: list[dict], indices: list[int]) -> None:
    assert len(ds) == len(samples) and ds.schema == schema
    for i in range(len(samples)):
        got = ds[i]
        for name in schema:
            assert as_bytes(got[name]) == as_bytes(samples[i][name]), (i, name)
    batch = ds.gather(indices)
    for name in schema:
        items = batch_items(batch, name)
        assert len(items) == len(indices)
        for k, i in enumerate(indices):
            assert as_bytes(items[k]) == as_bytes(samples[i][name]), (i, name)


# ---------------------------------------------------------------------------- properties


@ROUNDTRIP
@given(data=datasets(), part_size=st.none() | st.integers(2, 5), feed=st.data())
def test_writer_round_trip(tmp_path_factory, data, part_size, feed):
    schema, samples = data
    path = tmp_path_factory.mktemp("rt") / "d.chute"
    with chute.Writer(path, schema, part_size=part_size) as w:
        done = 0
        while done < len(samples):
            take = feed.draw(st.integers(1, len(samples) - done), label="chunk")
            chunk = samples[done : done + take]
            if take == 1 and feed.draw(st.booleans(), label="append"):
                w.append(chunk[0])
            else:  # fixed fields as one stacked array, or as a list of samples
                stack = feed.draw(st.booleans(), label="stack")
                w.extend(
                    {
                        name: batch_of(f, [s[name] for s in chunk], stack)
                        for name, f in schema.items()
                    }
                )
            done += take
    n = len(samples)
    indices = feed.draw(st.lists(st.integers(-n, n - 1), max_size=10) if n else st.just([]))
    ds = chute.open(path)
    check(ds, schema, samples, indices)  # negative indices count from the end, as in a list
    check(ds.to_memory(), schema, samples, indices)
    check(pickle.loads(pickle.dumps(ds)), schema, samples, [])
    bound = st.none() | st.integers(-n - 2, n + 2)
    step = st.none() | st.integers(1, 3) | st.integers(-3, -1)
    key = slice(*feed.draw(st.tuples(bound, bound, step), label="slice"))
    sliced = ds[key]
    for name in schema:
        items = batch_items(sliced, name)
        want = [samples[i][name] for i in range(n)][key]
        assert [as_bytes(v) for v in items] == [as_bytes(v) for v in want]
    assert chute.verify(path) == ds.nbytes


@ROUNDTRIP
@given(
    dtype=st.sampled_from(DTYPES),
    inner=st.lists(dims, max_size=3).map(tuple),
    n=st.integers(0, 30),
    data=st.data(),
)
def test_write_arrays_round_trip(tmp_path_factory, dtype, inner, n, data):
    """``chute.write`` of one array per field: the files are the array, numpy reads them."""
    x = data.draw(arrays(dtype, (n, *inner)))
    path = tmp_path_factory.mktemp("rt") / "d.chute"
    chute.write(path, {"x": x}, chunk_bytes=data.draw(st.sampled_from([7, 100, 64 << 20])))
    ds = chute.open(path)
    assert ds.schema == {"x": chute.fields.Tensor(inner, dtype)}
    assert as_bytes(ds[0:n]["x"]) == as_bytes(x)
    on_disk = np.load(path / "x.npy", allow_pickle=False)
    assert as_bytes(on_disk) == as_bytes(x)


@ROUNDTRIP
@given(st.lists(st.text(), max_size=10), st.lists(st.integers(0, 9), max_size=10))
def test_unicode_strings(tmp_path_factory, texts, picks):
    path = tmp_path_factory.mktemp("rt") / "d.chute"
    chute.write(path, {"s": texts}, schema={"s": chute.String()})
    ds = chute.open(path)
    picks = [p for p in picks if p < len(texts)]
    assert [ds[i]["s"] for i in range(len(texts))] == texts
    assert ds.gather(picks)["s"] == [texts[p] for p in picks]
    assert ds[:]["s"] == texts


@settings(deadline=None, max_examples=25)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=15), st.data())
def test_promotion_round_trip(tmp_path_factory, lengths, data):
    """An inferred fixed field that turns ragged (possibly across parts) keeps every sample."""
    samples = [np.arange(k * 2, dtype=np.int16).reshape(k, 2) + k for k in lengths]
    part_size = data.draw(st.none() | st.integers(1, 4))
    path = tmp_path_factory.mktemp("rt") / "d.chute"
    with chute.Writer(path, part_size=part_size) as w:
        for s in samples:
            w.append({"v": s})
    ds = chute.open(path)
    varied = len(set(lengths)) > 1
    want = chute.Ragged("int16", (2,)) if varied else chute.fields.Tensor((lengths[0], 2), "int16")
    assert ds.schema == {"v": want}
    assert [as_bytes(ds[i]["v"]) for i in range(len(samples))] == [as_bytes(s) for s in samples]
    chute.verify(path)


# ---------------------------------------------------------------------------- worker processes


def read_in_worker(ds: chute.Dataset, indices: list[int]) -> dict[str, Any]:
    """Runs in a child process: the dataset arrives pickled and maps its files there."""
    batch = ds.gather(indices)
    return {
        "x": batch["x"].numpy(),
        "tokens": [t.numpy() for t in batch["tokens"].tolist()],
        "text": batch["text"],
        "first": ds[indices[0]]["image"].numpy(),
    }


@pytest.mark.parametrize("method", [pytest.param("spawn", marks=pytest.mark.slow), "fork"])
def test_dataset_in_worker_processes(make_mixed, method):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} on this platform")
    path, samples = make_mixed(part_size=5)
    mapped = chute.open(path)
    mapped[0]  # maps files in the parent: nothing of that may travel to the child
    indices = [11, 0, 7, 7]
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context(method)) as pool:
        futures = [pool.submit(read_in_worker, ds, indices) for ds in (mapped, mapped.to_memory())]
        results = [f.result(timeout=120) for f in futures]
    for got in results:
        for k, i in enumerate(indices):
            assert np.array_equal(got["x"][k], samples[i]["x"])
            assert np.array_equal(got["tokens"][k], samples[i]["tokens"])
            assert got["text"][k] == samples[i]["text"]
        assert np.array_equal(got["first"], samples[11]["image"])


def test_torch_dataloader_worker_processes(make_mixed):
    path, samples = make_mixed()
    ds = chute.open(path, fields=["x", "label", "text"])
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2)
    batches = list(loader)
    assert torch.cat([b["label"] for b in batches]).tolist() == [i % 3 for i in range(12)]
    assert [t for b in batches for t in b["text"]] == [s["text"] for s in samples]
