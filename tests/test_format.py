"""Format v1: golden files pin the bytes; field kinds, .npy headers and manifest validation.

The golden datasets in tests/data/ are written by tests/data/make_golden.py. A fresh write must
reproduce them byte for byte, and the committed folders must read back: a change to either
side is a format change (regenerate deliberately, bump the version if old files change meaning).
"""

from __future__ import annotations

import copy
import importlib.util
import io
import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import chute
from chute import format as fmt
from chute.errors import FormatError, SchemaError, UnsafePathError, VersionError
from chute.kinds import field_from_json, field_to_json, parse_manifest
from chute.npy_header import MAGIC, header_bytes, header_size, read_header

DATA = Path(__file__).parent / "data"


def _load_golden_module():
    spec = importlib.util.spec_from_file_location("make_golden", DATA / "make_golden.py")
    assert spec is not None and spec.loader is not None, "tests/data/make_golden.py is missing"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


golden = _load_golden_module()


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture(params=sorted(golden.DATASETS))
def committed(request) -> Path:
    path = DATA / request.param
    # a missing fixture is a failure, never a skip: the golden files ARE the test
    assert (path / fmt.MANIFEST).is_file(), (
        f"golden dataset {path} is missing; run `python tests/data/make_golden.py` and commit it"
    )
    return path


# ---------------------------------------------------------------------------- golden files


def test_fresh_write_reproduces_golden_bytes(committed, tmp_path):
    golden.build(tmp_path)
    fresh, pinned = _files(tmp_path / committed.name), _files(committed)
    assert sorted(fresh) == sorted(pinned)
    changed = [name for name in pinned if fresh[name] != pinned[name]]
    assert not changed, f"format v1 bytes changed in {changed}"


def test_golden_reads_back(committed, check_sample):
    ds = chute.open(committed)
    want = golden.samples()
    assert len(ds) == golden.NUM_SAMPLES
    assert ds.schema == golden.SCHEMA
    assert dict(ds.metadata) == golden.METADATA
    for i, sample in enumerate(want):
        check_sample(ds[i], sample)
    batch = ds.gather([4, 0, 2, 2])
    assert batch["caption"] == [want[i]["caption"] for i in (4, 0, 2, 2)]
    assert batch["bf16"].dtype == torch.bfloat16
    assert batch["picture"].sample(0).shape == (5, 2, 3)
    assert chute.verify(committed) == ds.nbytes


def test_golden_parts_layout():
    path = DATA / "golden-v1-parts.chute"
    manifest = json.loads((path / fmt.MANIFEST).read_text())
    assert [(p["name"], p["num_samples"]) for p in manifest["parts"]] == [
        ("part-00000", 2),
        ("part-00001", 2),
        ("part-00002", 1),
    ]
    manifest = json.loads((DATA / "golden-v1.chute" / fmt.MANIFEST).read_text())
    assert [p["name"] for p in manifest["parts"]] == ["."]


def test_golden_manifest_is_v1(committed):
    manifest = json.loads((committed / fmt.MANIFEST).read_text())
    assert list(manifest) == [
        "format", "version", "num_samples", "checksum", "fields", "parts", "metadata"
    ]  # fmt: skip
    assert (manifest["format"], manifest["version"], manifest["checksum"]) == (
        "chute",
        1,
        "xxh3_64",
    )
    assert manifest["fields"]["picture"] == {
        "kind": "ragged",
        "dtype": "uint8",
        "inner_shape": [None, 3],
    }
    assert manifest["fields"]["jpeg"] == {"kind": "bytes"}
    for part in manifest["parts"]:
        for name, info in part["files"].items():
            file = committed / part["name"] / name
            assert info["bytes"] == file.stat().st_size
            assert len(info["xxh3_64"]) == 16


def test_golden_files_are_plain_npy(committed):
    """numpy alone reads every file, with pickle disabled; bfloat16 is its 16 raw bits."""
    want = golden.samples()
    root = committed / "part-00000" if (committed / "part-00000").is_dir() else committed
    n = len(np.load(root / "label.npy", allow_pickle=False))
    image = np.load(root / "image.npy", allow_pickle=False)
    assert image.dtype == np.dtype("<u1") and image.flags.c_contiguous
    assert np.array_equal(image, np.stack([s["image"] for s in want[:n]]))
    bf16 = np.load(root / "bf16.npy", allow_pickle=False)
    assert bf16.dtype == np.dtype("<u2")
    assert torch.equal(
        torch.from_numpy(bf16.view(np.int16)).view(torch.bfloat16),
        torch.stack([s["bf16"] for s in want[:n]]),
    )
    offsets = np.load(root / "tokens.offsets.npy", allow_pickle=False)
    assert offsets.dtype == np.dtype("<i8") and offsets.shape == (n + 1,)
    values = np.load(root / "tokens.values.npy", allow_pickle=False)
    assert np.array_equal(values, np.concatenate([s["tokens"] for s in want[:n]]))
    shapes = np.load(root / "picture.shapes.npy", allow_pickle=False)
    assert shapes.tolist() == [list(s["picture"].shape) for s in want[:n]]
    text = np.load(root / "caption.values.npy", allow_pickle=False).tobytes().decode("utf-8")
    assert text == "".join(s["caption"] for s in want[:n])
    assert np.load(root / "meta" / "id.npy", allow_pickle=False).dtype == np.dtype("<u2")


# ---------------------------------------------------------------------------- .npy headers


@pytest.mark.parametrize("dtype", ["<f4", "|u1", "<c16", "|b1", "<u2"])
@pytest.mark.parametrize("inner", [(), (3,), (2, 1024, 7)])
def test_header_is_fixed_size_and_numpy_readable(dtype, inner):
    dt = np.dtype(dtype)
    size = header_size(dt, inner)
    assert size % 64 == 0
    for n in (0, 1, 10**20):  # the header never moves: the writer patches it in place at close
        raw = header_bytes(dt, (n, *inner))
        assert len(raw) == size and raw.startswith(MAGIC + b"\x01\x00")
        got_dtype, got_shape, offset = read_header(io.BytesIO(raw), "x.npy")
        assert (got_dtype, got_shape, offset) == (dt, (n, *inner), size)


def _npy_with_header(descr: str, fortran: bool = False) -> io.BytesIO:
    literal = f"{{'descr': {descr!r}, 'fortran_order': {fortran}, 'shape': (2,), }}".encode()
    pad = 64 - (10 + len(literal) + 1) % 64
    return io.BytesIO(MAGIC + b"\x01\x00" + (len(literal) + pad + 1).to_bytes(2, "little")
                      + literal + b" " * pad + b"\n")  # fmt: skip


@pytest.mark.parametrize("descr", ["|O", [("a", "<i4")], [("a", "|O")]])
def test_header_refuses_objects_and_structures(descr):
    with pytest.raises(FormatError, match=r"x\.npy: dtype .* is refused"):
        read_header(_npy_with_header(descr), "x.npy")


def test_header_refuses_fortran_order_and_garbage():
    with pytest.raises(FormatError, match="Fortran"):
        read_header(_npy_with_header("<f4", fortran=True), "x.npy")
    with pytest.raises(FormatError, match=r"^x\.npy: "):
        read_header(io.BytesIO(b"PK\x03\x04 not an npy"), "x.npy")


# ---------------------------------------------------------------------------- field kinds


@pytest.mark.parametrize(
    ("dtype", "name"),
    [
        (np.float32, "float32"),
        ("float16", "float16"),
        (np.dtype(">i4"), "int32"),
        (bool, "bool"),
        (torch.bfloat16, "bfloat16"),
        ("bfloat16", "bfloat16"),
        (torch.complex64, "complex64"),
        (torch.uint16, "uint16"),
    ],
)
def test_dtype_names(dtype, name):
    assert chute.fields.Tensor((), dtype).dtype == name
    assert chute.Ragged(dtype).dtype == name


@pytest.mark.parametrize("dtype", [object, "U4", "datetime64[s]", np.longdouble, "nope", 3.5])
def test_unstorable_dtypes_are_schema_errors(dtype):
    with pytest.raises(SchemaError):
        chute.fields.Tensor((), dtype)


@pytest.mark.parametrize("shape", [(-1,), (None,), (1.5,), (True,), "ab", (1,) * 33])
def test_bad_tensor_shapes(shape):
    with pytest.raises(SchemaError, match=r"shape|dimension"):
        chute.fields.Tensor(shape, "float32")


def test_field_kinds_are_frozen_values():
    assert chute.fields.Tensor(3) == chute.fields.Tensor((3,), "float32")
    assert chute.Ragged("uint8", [None, 3]).inner_shape == (None, 3)
    assert chute.Ragged("uint8", (None, 3)).variable_dims
    assert not chute.Ragged("uint8", (4,)).variable_dims
    assert chute.Bytes() == chute.Bytes() and chute.String().kind == "string"
    with pytest.raises(AttributeError):
        chute.fields.Tensor((3,)).shape = (4,)  # type: ignore[misc]


@pytest.mark.parametrize("field", list(golden.SCHEMA.values()))
def test_field_json_round_trip(field):
    assert field_from_json("f", json.loads(json.dumps(field_to_json(field)))) == field


@pytest.mark.parametrize("name", ["ok", "a-b_9", "group/sub", "x" * 128])
def test_good_field_names(name):
    assert fmt.check_field_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "a.b", "..", "../x", "/abs", "a//b", "a/", "-x", "x" * 129, 3, "a b", "é"]
)
def test_bad_field_names(name):
    with pytest.raises(SchemaError, match="field name"):
        fmt.check_field_name(name)


def test_non_ascii_letters_are_refused_and_the_message_says_ascii():
    with pytest.raises(SchemaError, match="use ASCII letters, digits"):
        fmt.check_field_name("bild_größe")


# ---------------------------------------------------------------------------- manifest


@pytest.fixture(scope="module")
def manifest_json() -> dict:
    return json.loads((DATA / "golden-v1-parts.chute" / fmt.MANIFEST).read_text())


def test_manifest_round_trip(manifest_json):
    manifest = parse_manifest(manifest_json)
    assert manifest.num_samples == golden.NUM_SAMPLES
    assert manifest.to_json() == manifest_json


def _edit(manifest_json, change):
    obj = copy.deepcopy(manifest_json)
    change(obj)
    return obj


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (lambda m: m.update(version=2), VersionError, "version 2"),
        (lambda m: m.update(version="1"), VersionError, "version '1'"),
        (lambda m: m.pop("version"), VersionError, "version None"),
        (lambda m: m.update(format="npz"), FormatError, "not a chute manifest"),
        (lambda m: m.update(checksum="md5"), FormatError, "checksum algorithm"),
        (lambda m: m.update(num_samples=6), FormatError, "num_samples 6"),
        (lambda m: m.update(fields={}), FormatError, "fields"),
        (lambda m: m.update(metadata=[]), FormatError, "metadata"),
        (lambda m: m["fields"]["label"].update(kind="pickle"), FormatError, "unknown kind"),
        (lambda m: m["fields"]["label"].update(dtype="object"), FormatError, "'label'"),
        (lambda m: m["fields"]["label"].update(shape=[-1]), FormatError, "'label'"),
        (lambda m: m["parts"][1].update(name="part-00000"), FormatError, "twice"),
        (lambda m: m["parts"][1].update(name="."), FormatError, "root part"),
        (lambda m: m["parts"][0].update(num_samples=-1), FormatError, "num_samples"),
        (lambda m: m["parts"][0]["files"].pop("z.npy"), FormatError, "do not match"),
        (
            lambda m: m["parts"][0]["files"].update({"../z.npy": {"bytes": 1, "xxh3_64": "0"}}),
            FormatError,
            "do not match",
        ),
        (lambda m: m["parts"][0]["files"]["z.npy"].update(bytes=-5), FormatError, "byte size"),
        (lambda m: m["parts"][0]["files"]["z.npy"].pop("xxh3_64"), FormatError, "checksum"),
        # names that would lead outside the dataset folder
        (lambda m: m["parts"][0].update(name=".."), UnsafePathError, "'..'"),
        (lambda m: m["parts"][0].update(name="/etc"), UnsafePathError, "/etc"),
        (lambda m: m["parts"][0].update(name="C:part-00000"), UnsafePathError, "C:"),
        (
            lambda m: m["fields"].update({"../../x": m["fields"].pop("z")}),
            UnsafePathError,
            r"\.\./\.\./x",
        ),
        (lambda m: m["fields"].update({"/x": m["fields"].pop("z")}), UnsafePathError, "/x"),
        (lambda m: m["fields"].update({"a.b": m["fields"].pop("z")}), FormatError, "a.b"),
    ],
)
def test_bad_manifests(manifest_json, change, error, match):
    with pytest.raises(error, match=match):
        parse_manifest(_edit(manifest_json, change))


def test_unsafe_names_are_plain_format_errors_too(manifest_json):
    obj = _edit(manifest_json, lambda m: m["parts"][0].update(name=".."))
    with pytest.raises(FormatError):  # UnsafePathError is a FormatError and a PermissionError
        parse_manifest(obj)
    with pytest.raises(PermissionError):
        parse_manifest(obj)


@pytest.mark.parametrize(
    ("field", "role", "n", "total", "shape"),
    [
        (chute.fields.Tensor((2, 3)), "data", 4, None, (4, 2, 3)),
        (chute.Ragged("int8", (4,)), "offsets", 4, None, (5,)),
        (chute.Ragged("int8", (4,)), "values", 4, 9, (9, 4)),
        (chute.Ragged("int8", (None, 3)), "values", 4, 9, (9,)),
        (chute.Ragged("int8", (None, 3)), "shapes", 4, None, (4, 3)),
        (chute.String(), "values", 4, None, None),
    ],
)
def test_expected_shapes(field, role, n, total, shape):
    assert field.expected_shape(role, n, total) == shape


def test_field_files():
    assert chute.fields.Tensor(()).files("x") == {"data": "x.npy"}
    assert chute.Ragged("int32").files("g/t") == {
        "values": "g/t.values.npy",
        "offsets": "g/t.offsets.npy",
    }
    assert set(chute.Ragged("uint8", (None, 3)).files("im")) == {
        "values",
        "offsets",
        "shapes",
    }


@settings(max_examples=200, deadline=None)
@given(
    dtype=st.sampled_from(
        ["<f4", ">f8", "<i8", "|u1", "|i1", "<u2", "|b1", "<c16", "|S7", "<U3", "<f2", "<M8[ns]"]
    ),
    shape=st.lists(st.integers(0, 5), max_size=4),
    version=st.sampled_from([None, (1, 0), (2, 0), (3, 0)]),
)
def test_header_reads_as_numpy_reads_it(dtype: str, shape: list[int], version) -> None:
    """Every header numpy writes reads back as numpy reads it (plain ones without the AST)."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.zeros(shape, dtype), version=version)
    buf.seek(0)
    got = read_header(buf, "x.npy")
    buf.seek(0)
    ref = np.load(buf, allow_pickle=False)
    assert got[:2] == (ref.dtype, ref.shape)
    assert got[2] == len(buf.getvalue()) - ref.nbytes


def test_headers_parse_while_other_threads_compile() -> None:
    """Header reads in threads beside threads that build ASTs (an import compiling a module)
    never fail: plain headers are not parsed with ast.literal_eval."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.zeros((3, 2), "<f4"))
    raw = buf.getvalue()
    stop = threading.Event()
    errors: list[BaseException] = []

    def compiles() -> None:
        while not stop.is_set():
            compile("[" * 40 + "]" * 40, "<t>", "eval")

    def reads() -> None:
        try:
            for _ in range(3000):
                assert read_header(io.BytesIO(raw), "x.npy")[1] == (3, 2)
        except BaseException as exc:
            errors.append(exc)

    builders = [threading.Thread(target=compiles) for _ in range(2)]
    readers = [threading.Thread(target=reads) for _ in range(2)]
    for t in builders + readers:
        t.start()
    for t in readers:
        t.join(timeout=120)
    stop.set()
    for t in builders:
        t.join(timeout=60)
    assert not errors, errors
