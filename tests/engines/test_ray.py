"""chute.ray on a real local Ray cluster (one for the module: Ray takes seconds to start)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _helpers import MIXED_SCHEMA

import chute
import chute.ray  # does not import Ray (test_import_does_not_import_ray)

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    # The test module's classes and functions travel by value: the workers cannot import it.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.execution_options.preserve_order = True
    yield
    ray.shutdown()


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and "tmp" in p.name)


def check_row(row, want) -> None:
    """A row from Ray equals the sample as written."""
    np.testing.assert_array_equal(row["x"], want["x"])
    assert row["label"] == want["label"]
    np.testing.assert_array_equal(np.asarray(row["tokens"], np.int32), want["tokens"])
    np.testing.assert_array_equal(row["image"], want["image"])
    assert row["blob"] == want["blob"]
    assert row["text"] == want["text"]


def test_import_does_not_import_ray():
    code = "import sys, chute.ray; assert 'ray' not in sys.modules, 'ray imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_read_every_field_kind(make_mixed):
    path, samples = make_mixed(n=23, part_size=5)
    ds = chute.ray.read(path, rows_per_task=3)
    source = chute.ray.Source(path, rows_per_task=3)
    tasks = source.get_read_tasks(4)
    assert [t.metadata.num_rows for t in tasks] == [3, 2] * 4 + [3]  # never across a part
    assert sum(t.metadata.size_bytes for t in tasks) == pytest.approx(source.dataset.nbytes, 1)
    types = dict(zip(ds.schema().names, map(str, ds.schema().types), strict=True))
    assert types["tokens"].startswith("large_list") and types["text"] == "large_string"
    assert types["blob"] == "large_binary" and "VariableShaped" in types["image"]
    rows = ds.take_all()
    assert len(rows) == 23
    for row, want in zip(rows, samples, strict=True):
        check_row(row, want)
    assert chute.ray.read(path, fields=["text", "label"]).columns() == ["label", "text"]


def test_write_round_trip_every_field_kind(make_mixed, check_sample, tmp_path):
    path, samples = make_mixed(n=23, part_size=5)
    out = chute.ray.write(chute.ray.read(path, rows_per_task=4), tmp_path / "o.chute")
    with chute.open(out) as ds:
        assert ds.schema == MIXED_SCHEMA  # image blocks of one width are made Ragged again
        assert len(ds) == 23
        for i, want in enumerate(samples):
            check_sample(ds[i], want)
    assert leftovers(tmp_path) == []
    with pytest.raises(chute.DatasetExistsError):
        chute.ray.write(ray.data.range(3), out)
    chute.ray.write(ray.data.range(3), out, overwrite=True, metadata={"k": 1})
    with chute.open(out) as ds:
        assert ds[0:3]["id"].tolist() == [0, 1, 2] and ds.metadata == {"k": 1}


def test_write_from_ray_items_in_parts(tmp_path):
    items = [
        {"v": np.full(i % 3 + 1, i, np.float64), "s": f"#{i}", "b": bytes([i]), "n": i}
        for i in range(40)
    ]
    ds = ray.data.from_items(items, override_num_blocks=4)
    out = chute.ray.write(ds, tmp_path / "o.chute", part_size=7)
    with chute.open(out) as got:
        assert got.schema == {
            "v": chute.Ragged("float64"),
            "s": chute.String(),
            "b": chute.Bytes(),
            "n": chute.fields.Tensor((), "int64"),
        }
        assert (
            max(tuple(p.num_samples for p in got.parts)) <= 7
            and sum(tuple(p.num_samples for p in got.parts)) == 40
        )
        batch = got[0:40]
        assert batch["s"] == [f"#{i}" for i in range(40)]
        assert batch["n"].tolist() == list(range(40))
        assert batch["v"].offsets.diff().tolist() == [i % 3 + 1 for i in range(40)]


def fail_on_17(batch):
    if 17 in batch["id"]:
        raise RuntimeError("bad block")
    return batch


def test_failing_write_task_leaves_no_dataset(tmp_path):
    ds = ray.data.range(40, override_num_blocks=8).map_batches(fail_on_17)
    with pytest.raises(Exception, match="bad block"):
        chute.ray.write(ds, tmp_path / "o.chute")
    assert not (tmp_path / "o.chute").exists()
    assert leftovers(tmp_path) == []


class FirstAttemptFails(chute.ray.Sink):
    """Each write task writes its part, then fails once (a crash after the part was written)."""

    def write(self, blocks, ctx):
        result = super().write(blocks, ctx)
        marker = self.path.parent / f"attempt-{ctx.task_idx}"
        if not marker.exists():
            marker.touch()
            raise RuntimeError("first attempt")
        return result


def test_retried_write_tasks_add_no_rows_twice(tmp_path):
    ds = ray.data.range(30, override_num_blocks=3)
    sink = FirstAttemptFails(tmp_path / "o.chute")
    ds.write_datasink(sink, ray_remote_args={"max_retries": 2, "retry_exceptions": True})
    with chute.open(tmp_path / "o.chute") as got:
        assert got[0:30]["id"].tolist() == list(range(30))
        folders = sorted(p.name for p in (tmp_path / "o.chute").iterdir() if p.is_dir())
        assert folders == [
            f"part-{i:05d}" for i in range(len(tuple(p.num_samples for p in got.parts)))
        ]


def test_pipeline_read_map_write(make_mixed, tmp_path):
    path, samples = make_mixed(n=23, part_size=5)
    ds = chute.ray.read(path, fields=["x", "label"]).map_batches(
        lambda b: {"x": b["x"] * 2, "label": b["label"] + 1}
    )
    out = chute.ray.write(ds, tmp_path / "o.chute")
    with chute.open(out) as got:
        batch = got[0:23]
    np.testing.assert_array_equal(batch["x"].numpy(), np.stack([s["x"] * 2 for s in samples]))
    assert batch["label"].tolist() == [int(s["label"]) + 1 for s in samples]


def dtype_by_block(batch):
    return {"a": batch["id"].astype(np.float32 if batch["id"][0] >= 10 else np.int64)}


def test_blocks_that_disagree_name_the_field(tmp_path):
    ds = ray.data.range(20, override_num_blocks=2).map_batches(dtype_by_block, batch_size=10)
    with pytest.raises(chute.SchemaError, match="field 'a'"):
        chute.ray.write(ds, tmp_path / "o.chute")
    assert not (tmp_path / "o.chute").exists() and leftovers(tmp_path) == []
    schema = {"a": chute.fields.Tensor((), "float64")}  # schema= settles it
    chute.ray.write(ds, tmp_path / "o.chute", schema=schema)
    assert chute.open(tmp_path / "o.chute")[0:20]["a"].tolist() == list(range(20))


def test_empty_dataset_needs_a_schema(tmp_path):
    empty = ray.data.range(5).filter(lambda r: False)
    with pytest.raises(chute.SchemaError, match="schema="):
        chute.ray.write(empty, tmp_path / "o.chute")
    out = chute.ray.write(
        empty, tmp_path / "o.chute", schema={"id": chute.fields.Tensor((), "int64")}
    )
    assert len(chute.open(out)) == 0


@pytest.fixture()
def corpus(tmp_path):
    """Documents of varied lengths over two parts, uint16 tokens."""
    docs = [np.arange(n, dtype=np.uint16) + 100 * i for i, n in enumerate([5, 17, 0, 9, 33, 2, 12])]
    path = chute.write(tmp_path / "c.chute", {"tokens": docs}, part_size=4)
    return chute.open(path), docs


@pytest.mark.parametrize("rows_per_task", [None, 3])
def test_read_token_windows(corpus, rows_per_task):
    ds, _ = corpus
    view = chute.windows(ds, "tokens", length=8, stride=5, document_ids=True)
    got = chute.ray.read(view, rows_per_task=rows_per_task).take_all()
    want = view.gather(np.arange(len(view)))
    assert len(got) == len(view) > 1
    np.testing.assert_array_equal(np.stack([r["tokens"] for r in got]), want["tokens"].numpy())
    ids = np.stack([r["document_ids"] for r in got])
    np.testing.assert_array_equal(ids, want["document_ids"].numpy())


def test_read_packed_rows(corpus):
    ds, docs = corpus
    view = chute.pack(ds, "tokens", 20, pad_id=9999, seed=3)
    got = chute.ray.read(view, rows_per_task=2).take_all()
    assert len(got) == len(view)
    for i, row in enumerate(got):
        want = view[i]
        np.testing.assert_array_equal(row["tokens"], want["tokens"].numpy())
        np.testing.assert_array_equal(row["position_ids"], want["position_ids"].numpy())
        np.testing.assert_array_equal(row["cu_seqlens"], want["cu_seqlens"].numpy())
    kept = sorted(t for row in got for t in row["tokens"].tolist() if t != 9999)
    assert kept == sorted(t for d in docs for t in d.tolist())  # every token once
    with pytest.raises(chute.ArgumentError, match="fields"):
        chute.ray.read(view, fields=["tokens"])
