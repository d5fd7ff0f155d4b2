"""HDF5 sources: real h5py files (contiguous, chunked, gzip, nested groups) -> chute -> equal."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chute
from chute.errors import SchemaError, SourceError
from chute.sources.hdf5 import HDF5Source

N = 500


@pytest.fixture
def h5(tmp_path):
    rng = np.random.default_rng(0)
    data = {
        "contig": rng.random((N, 3, 4), dtype=np.float32),
        "chunked": rng.integers(0, 255, (N, 8), dtype=np.uint8),
        "gz": rng.standard_normal(N),
        "deep/er/labels": np.arange(N, dtype=">i4"),  # big-endian, nested groups
    }
    path = tmp_path / "data.h5"
    with h5py.File(path, "w") as f:
        f["contig"] = data["contig"]
        f.create_dataset("chunked", data=data["chunked"], chunks=(48, 8))
        f.create_dataset("gz", data=data["gz"], chunks=(64,), compression="gzip")
        f["deep/er/labels"] = data["deep/er/labels"]
        f["mean"] = np.zeros(3)  # a per-file constant: not a field
    return path, data


def test_round_trip_every_layout(h5, tmp_path):
    path, data = h5
    with pytest.warns(UserWarning, match="left out mean"):
        out = chute.convert(path, tmp_path / "out.chute", progress=False)
    with chute.open(out) as ds:
        assert len(ds) == N
        assert set(ds.schema) == set(data)
        assert ds.schema["chunked"] == chute.fields.Tensor((8,), "uint8")
        batch = ds[0:N]
        for name, ref in data.items():
            np.testing.assert_array_equal(batch[name].numpy(), ref)


def test_reads_whole_chunks_in_bounded_batches(h5):
    path, data = h5
    with HDF5Source(path, fields=["chunked", "gz"], batch_bytes=2000) as src:
        assert src.skipped == {}
        ranges = src.ranges()
        # lcm(48, 64) = 192 rows does not fit 2000 bytes: batches are whole 64-row chunks
        assert all(r.start % 64 == 0 for r in ranges)
        assert max(len(r) for r in ranges) == 64
        sizes = [sum(v.nbytes for v in b.values()) for b in src.batches()]
    assert sum(sizes) == data["chunked"].nbytes + data["gz"].nbytes
    assert max(sizes) <= 4 * 2000


def test_common_length_skips_constants(h5):
    path, _ = h5
    with pytest.warns(UserWarning, match=r"data\.h5: left out mean \(3,\): .* common length 500"):
        src = HDF5Source(path)
    with src:
        assert src.skipped == {"mean": (3,)}
        assert src.num_samples == N


def test_fields_pick_and_rename_nested(h5, tmp_path):
    path, data = h5
    out = chute.convert(
        path, tmp_path / "o.chute", fields={"deep/er/labels": "y", "contig": "x"}, progress=False
    )
    with chute.open(out) as ds:
        assert list(ds.schema) == ["y", "x"]
        np.testing.assert_array_equal(ds[7]["y"].numpy(), data["deep/er/labels"][7])


def test_strings_and_variable_length(tmp_path):
    path = tmp_path / "text.h5"
    words = [f"wörd{i}" * (i % 4) for i in range(30)]
    with h5py.File(path, "w") as f:
        f.create_dataset("vlen", data=words, dtype=h5py.string_dtype())
        f.create_dataset("fixed", data=np.array([b"id%d" % i for i in range(30)], dtype="S5"))
        seq = f.create_dataset("seq", (30,), dtype=h5py.vlen_dtype(np.int16))
        for i in range(30):
            seq[i] = np.arange(i % 5, dtype=np.int16)
    out = chute.convert(path, tmp_path / "t.chute", progress=False, batch_bytes=300)
    with chute.open(out) as ds:
        assert ds.schema["vlen"] == chute.String()
        assert ds.schema["seq"] == chute.Ragged("int16")
        for i in range(30):
            s = ds[i]
            assert s["vlen"] == words[i]
            assert s["fixed"] == f"id{i}"
            np.testing.assert_array_equal(s["seq"].numpy(), np.arange(i % 5))


def test_different_lengths_name_the_datasets(tmp_path):
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w") as f:
        f["a"] = np.zeros(10)
        f["b"] = np.zeros(12)
    with pytest.raises(SourceError, match=r"bad\.h5.*'a'.*'b'.*fields="):
        HDF5Source(path)
    with pytest.raises(SourceError, match=r"bad\.h5: fields must have the same length.*'a': 10"):
        chute.convert(path, tmp_path / "o.chute", fields=["a", "b"], progress=False)
    assert not (tmp_path / "o.chute").exists()


def test_compound_is_refused_or_split(tmp_path):
    path = tmp_path / "table.h5"
    rec = np.zeros(20, dtype=[("x", "f4"), ("ij", "i2", (2,))])
    rec["x"], rec["ij"] = np.arange(20), np.arange(40).reshape(20, 2)
    with h5py.File(path, "w") as f:
        f["grp/rec"] = rec
    with pytest.raises(SourceError, match=r"table\.h5: 'grp/rec'.*\['x', 'ij'\].*'grp/rec/x'"):
        chute.convert(path, tmp_path / "o.chute", progress=False)
    out = chute.convert(path, tmp_path / "o.chute", split_compound=True, progress=False)
    with chute.open(out) as ds:
        assert ds.schema["grp/rec/ij"] == chute.fields.Tensor((2,), "int16")
        np.testing.assert_array_equal(ds[0:20]["grp/rec/ij"].numpy(), rec["ij"])
        np.testing.assert_array_equal(ds[0:20]["grp/rec/x"].numpy(), rec["x"])


def test_unmappable_dtypes_are_source_errors(tmp_path):
    path = tmp_path / "odd.h5"
    with h5py.File(path, "w") as f:
        f["s2d"] = np.array([["a", "b"]] * 4, dtype=h5py.string_dtype())
        f["ref"] = np.array([f.ref] * 4, dtype=h5py.ref_dtype)
    with pytest.raises(SourceError, match=r"odd\.h5: dataset 's2d'.*2-D string"):
        HDF5Source(path, fields=["s2d"])
    with pytest.raises(SourceError, match=r"odd\.h5: dataset 'ref'.*references"):
        HDF5Source(path, fields=["ref"])
    with pytest.raises(SourceError, match=r"odd\.h5: no field 'nope'; available: \['ref', 's2d'"):
        HDF5Source(path, fields=["nope"])


def test_bad_field_name_says_how_to_rename(tmp_path):
    path = tmp_path / "names.h5"
    with h5py.File(path, "w") as f:
        f["has space"] = np.zeros(3)
    with pytest.raises(SchemaError, match=r"fields=\{'has space': 'name'\}"):
        HDF5Source(path)
    with HDF5Source(path, fields={"has space": "ok"}) as src:
        assert list(src.schema) == ["ok"]


def test_attributes_become_metadata(tmp_path):
    path = tmp_path / "attrs.h5"
    with h5py.File(path, "w") as f:
        f["images"] = np.zeros((4, 2), np.uint8)
        f["labels"] = np.arange(4)
        f.attrs.update(
            {"title": "toy", "version": np.int64(3), "mean": np.array([0.5, 0.25]), "b": b"hi"}
        )
        f.attrs.update({"names": np.array([b"cat", b"dog"]), "ok": np.bool_(True)})
        f.attrs.update(
            {"nan": np.nan, "complex": 1j, "ref": f.ref, "blob": np.zeros(60000, np.uint8)}
        )
        f.attrs["empty"] = h5py.Empty("f4")
        f.attrs["latin1"] = np.bytes_(b"caf\xe9")
        f["images"].attrs["units"] = "pixels"
        f.create_group("meta").attrs["split"] = "train"
    out = chute.convert(path, tmp_path / "o.chute", {"images": "image"}, metadata={"own": 1})
    with chute.open(out) as ds:
        assert ds.metadata == {
            "hdf5_attrs": {
                "/": {
                    "title": "toy",
                    "version": 3,
                    "mean": [0.5, 0.25],
                    "b": "hi",
                    "names": ["cat", "dog"],
                    "ok": True,
                },
                "/images": {"units": "pixels"},  # by HDF5 path, whatever the field's new name
                "/meta": {"split": "train"},
            },
            "own": 1,
        }
    # what the caller passes wins over the file; a file without attributes adds nothing
    out = chute.convert(path, tmp_path / "p.chute", ["labels"], metadata={"hdf5_attrs": None})
    with chute.open(out) as ds:
        assert ds.metadata == {"hdf5_attrs": None}
    with h5py.File(tmp_path / "plain.h5", "w") as f:
        f["x"] = np.zeros(3)
    with chute.open(chute.convert(tmp_path / "plain.h5", tmp_path / "q.chute")) as ds:
        assert ds.metadata == {}


def test_not_hdf5(tmp_path):
    path = tmp_path / "fake.h5"
    path.write_bytes(b"not really")
    with pytest.raises(SourceError, match=r"fake\.h5: cannot be opened as an HDF5 file"):
        chute.convert(path, tmp_path / "o.chute", progress=False)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(1, 300),
    chunk=st.integers(1, 70),
    width=st.integers(1, 5),
    batch_bytes=st.integers(1, 3000),
    workers=st.integers(0, 3),
)
def test_round_trip_property(tmp_path_factory, n, chunk, width, batch_bytes, workers):
    tmp = tmp_path_factory.mktemp("h5")
    x = np.arange(n * width, dtype=np.int32).reshape(n, width)
    with h5py.File(tmp / "p.h5", "w") as f:
        f.create_dataset("x", data=x, chunks=(min(chunk, n), width), compression="lzf")
    out = chute.convert(
        tmp / "p.h5", tmp / "p.chute", batch_bytes=batch_bytes, workers=workers, progress=False
    )
    with chute.open(out) as ds:
        np.testing.assert_array_equal(ds[0:n]["x"].numpy(), x)


# ---------------------------------------------------------------------------- open objects, links


def test_open_objects_read_like_the_path_and_stay_open(h5, tmp_path):
    path, data = h5
    with h5py.File(path, "r") as f:
        with pytest.warns(UserWarning, match="left out mean"), HDF5Source(f) as src:
            assert set(src.schema) == set(data)
        assert f.id.valid, "the caller's file was closed"
        with HDF5Source(f["deep"]) as src:  # a group: the arrays under it, named from there
            assert list(src.schema) == ["er/labels"] and src.name.endswith(":/deep")
        out = chute.convert(f["gz"], tmp_path / "gz.chute", progress=False)  # one dataset
    with chute.open(out) as ds:
        np.testing.assert_array_equal(ds[0:N]["gz"].numpy(), data["gz"])


def test_links_are_listed_and_all_empty_arrays_give_an_empty_source(tmp_path):
    path = tmp_path / "l.h5"
    with h5py.File(path, "w") as f:
        f["g/x"] = np.zeros((0, 2))
        f["g/soft"] = h5py.SoftLink("/g/x")
        f["ext"] = h5py.ExternalLink("other.h5", "/y")
    with pytest.warns(UserWarning, match="left out (g/soft|ext)") as caught:
        src = HDF5Source(path)
    messages = sorted(str(w.message).split(": left out ")[1] for w in caught)
    assert messages[0].startswith("ext: an external link to other.h5:/y")
    assert messages[1].startswith("g/soft: a soft link to /g/x")
    with src:
        assert set(src.links) == {"g/soft", "ext"} and "other.h5:/y" in src.links["ext"]
        assert src.num_samples == 0 and list(src.schema) == ["g/x"]  # 0 rows when all are
