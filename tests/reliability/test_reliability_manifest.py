"""Hostile manifests: every crafted ``chute.json`` ends in a chute error or a clean open.

Arbitrary JSON, mutations of a valid manifest (wrong types, negative and enormous numbers,
hostile strings), duplicate keys in the raw text, names that try to leave the folder, and
symlinks or special files where data should be. A case passes when ``open`` and every read
after it either succeed or raise a :class:`chute.ChuteError` subclass; anything else (another
exception, a crash, a hang, a large allocation) fails.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest
from _reliability import (
    fuzz,
    load_manifest,
    make_dataset,
    outcome_of,
    read_everything,
    record,
    save_manifest,
)
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

import chute
from chute import format as fmt

pytestmark = pytest.mark.slow  # the fault harness: real processes, signals, fuzzing

FUZZ = fuzz(HealthCheck.filter_too_much)
ALLOC_LIMIT = 64 << 20  # bytes a hostile manifest may make chute allocate (the data is ~2 KB)

HOSTILE_INTS = st.sampled_from(
    [-1, -(2**63), 0, 1, 2**31, 2**40, 2**48, 2**48 + 1, 2**63, 2**64, 10**30, 10**400]
)
HOSTILE_STRINGS = st.sampled_from(
    [
        "",
        ".",
        "..",
        "../x",
        "../../etc/passwd",
        "/etc/passwd",
        "/tmp",
        "a/../../b",
        "x/./y",
        "x//y",
        "a\\b",
        "..\\..\\x",
        "x\x00y",
        "part-00000/../..",
        "part-1",
        "part-00000/",
        "./part-00000",
        "~",
        "$HOME",
        "x" * 300,
        "é",
        "(2,3)f4",
        "O",
        "<f4",
        ">f4",
        "object",
        "(999999999999,999999999)f4",
        "M8[xyz]",
        "i4,i4",
        "float128",
        "U10",
        "tensor",
        "ragged",
    ]
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | HOSTILE_INTS
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10)
    | HOSTILE_STRINGS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _opened(path: Path) -> str:
    """Open and read everything under an allocation budget; the outcome's name."""
    tracemalloc.start()
    try:
        result = outcome_of(lambda: read_everything(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < ALLOC_LIMIT, f"reading a hostile manifest allocated {peak} bytes"
    return result


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return make_dataset(tmp_path / "d.chute", part_size=3)


def _leaves(obj: object, here: tuple = ()) -> list[tuple]:
    """Every path (tuple of keys / indices) into a JSON document, the root included."""
    out = [here]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _leaves(v, (*here, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _leaves(v, (*here, i))
    return out


def _mutate(doc: dict, where: tuple, op: str, value: object) -> object:
    doc = copy.deepcopy(doc)
    if not where:
        return value
    parent = doc
    for k in where[:-1]:
        parent = parent[k]
    last = where[-1]
    if op == "delete":
        del parent[last]
    elif op == "insert" and isinstance(parent, dict):
        parent[f"{last}_extra"] = value
    elif op == "insert" and isinstance(parent, list):
        parent.insert(last, value)
    else:
        parent[last] = value
    return doc


def test_arbitrary_json_manifest(dataset: Path, record_property) -> None:
    outcomes: Counter = Counter()

    @FUZZ
    @given(JSON)
    def run(doc: object) -> None:
        save_manifest(dataset, doc)
        outcomes[_opened(dataset)] += 1

    run()
    assert "ok" not in outcomes
    record(record_property, "hostile manifest", "arbitrary JSON", outcomes.total(), outcomes)


def test_mutated_manifest(dataset: Path, record_property) -> None:
    """One leaf of a valid manifest replaced, deleted or added: wrong types, hostile values."""
    valid = load_manifest(dataset)
    paths = _leaves(valid)
    outcomes: Counter = Counter()

    @FUZZ
    @given(
        st.sampled_from(paths),
        st.sampled_from(["replace", "replace", "delete", "insert"]),
        JSON | HOSTILE_INTS | HOSTILE_STRINGS,
    )
    def run(where: tuple, op: str, value: object) -> None:
        save_manifest(dataset, _mutate(valid, where, op, value))
        outcomes[_opened(dataset)] += 1

    run()
    record(
        record_property,
        "hostile manifest",
        "valid manifest with one value replaced/deleted/added (wrong types, negative, "
        "enormous, path-like)",
        outcomes.total(),
        outcomes,
    )


def test_enormous_counts_and_shapes(dataset: Path, record_property) -> None:
    """Counts and shapes whose byte size disagrees with the files are refused at open, before
    anything is allocated from them (a Loader sizes buffers and orders from them)."""
    valid = load_manifest(dataset)
    cases = []
    for n in (2**31, 2**40, 2**48):
        doc = copy.deepcopy(valid)
        doc["parts"][0]["num_samples"] = n
        doc["num_samples"] = sum(p["num_samples"] for p in doc["parts"])
        cases.append(doc)
    for shape in ([2**39, 2**39], [2**20] * 4, [2**39], [0, 2**39, 2**39], [1] * 33):
        doc = copy.deepcopy(valid)
        doc["fields"]["x"]["shape"] = shape
        cases.append(doc)
    for doc in cases:
        save_manifest(dataset, doc)
        with pytest.raises(chute.FormatError):
            chute.open(dataset)
    record(
        record_property,
        "hostile manifest",
        "sample counts up to 2^48 and shapes up to 2^78 elements that disagree with the files",
        len(cases),
        "all refused at open (FormatError), before any allocation",
    )


def test_hostile_dtypes(dataset: Path, record_property) -> None:
    """dtype strings numpy parses with TypeError, ValueError or SyntaxError, or into object,
    structured, sub-array, datetime or string dtypes: all a FormatError."""
    valid = load_manifest(dataset)
    outcomes: Counter = Counter()

    @FUZZ
    @given(
        st.sampled_from(["x", "tokens", "image"]),
        HOSTILE_STRINGS | st.text(alphabet="()[],<>|=fiubcmMSUVaOe0123456789:'\" ", max_size=12),
    )
    def run(field: str, dtype: str) -> None:
        doc = copy.deepcopy(valid)
        doc["fields"][field]["dtype"] = dtype
        save_manifest(dataset, doc)
        outcomes[_opened(dataset)] += 1

    run()
    record(record_property, "hostile manifest", "dtype strings", outcomes.total(), outcomes)


def _with_duplicate(text: str, key: str, value: str) -> str:
    """The manifest text with ``"key": value`` added again right after the first ``{``
    that opens the object holding ``key``: valid JSON text, ambiguous content."""
    at = text.index(f'"{key}":')
    start = text.rindex("{", 0, at)
    return text[: start + 1] + f'"{key}": {value},' + text[start + 1 :]


def test_duplicate_keys(dataset: Path, record_property) -> None:
    """JSON parsers disagree on duplicate keys (first or last wins), so a manifest with any
    duplicate key is refused rather than read one way by chute and another by a checker."""
    text = json.dumps(load_manifest(dataset))
    other = json.dumps({"kind": "tensor", "dtype": "float64", "shape": [3]})
    cases = {
        "field name": _with_duplicate(text, "x", other),
        "kind": _with_duplicate(text, "kind", '"ragged"'),
        "num_samples": _with_duplicate(text, "num_samples", "7"),
        "file entry": _with_duplicate(text, "x.npy", '{"bytes": 1, "xxh3_64": "0"}'),
        "format": _with_duplicate(text, "format", '"chute"'),
        "metadata key": text.replace('"metadata": {', '"metadata": {"a": 1, "a": 2, ', 1),
    }
    outcomes: Counter = Counter()
    for what, doc in cases.items():
        (dataset / fmt.MANIFEST).write_text(doc)
        with pytest.raises(chute.FormatError, match="duplicate"):
            chute.open(dataset)
        outcomes[f"FormatError ({what})"] += 1
    record(
        record_property,
        "hostile manifest",
        "raw JSON text with duplicate keys (field names, file entries, counts, metadata)",
        len(cases),
        "all refused: FormatError naming the duplicate key",
    )


NAME_ATTACKS = [
    "../outside",
    "../../outside",
    "/tmp/outside",
    "a/../../outside",
    "a/./b",
    "./x",
    "..",
    ".",
    "",
    "a\\..\\outside",
    "x\x00",
    "x/",
    "/x",
    "a//b",
    ".hidden",
    "x.npy",
    "x.values",
]


def test_names_that_leave_the_folder(tmp_path: Path, record_property) -> None:
    """Field and part names become file names: traversal, absolute and odd names are refused,
    even when the file they point to exists and would otherwise pass every other check."""
    dataset = make_dataset(tmp_path / "inner" / "d.chute")
    shutil.copytree(dataset, tmp_path / "outside", dirs_exist_ok=True)  # bait for traversal
    valid = load_manifest(dataset)
    outcomes: Counter = Counter()
    for name in NAME_ATTACKS:
        doc = copy.deepcopy(valid)
        doc["fields"][name] = doc["fields"].pop("x")
        for part in doc["parts"]:
            info = part["files"].pop("x.npy")
            part["files"][f"{name}.npy"] = info
        save_manifest(dataset, doc)
        got = _opened(dataset)
        assert got in ("FormatError", "UnsafePathError"), (name, got)
        outcomes[got] += 1
        if name == fmt.ROOT_PART:  # the one valid part name here
            continue
        doc = copy.deepcopy(valid)
        doc["parts"][0]["name"] = name
        save_manifest(dataset, doc)
        got = _opened(dataset)
        assert got in ("FormatError", "UnsafePathError"), (name, got)
        outcomes[got] += 1
    record(
        record_property,
        "hostile manifest",
        "field/part names with '..', '/', absolute paths, '\\\\', NUL, empty",
        outcomes.total(),
        outcomes,
    )


def test_symlinks_leaving_the_folder(tmp_path: Path, record_property) -> None:
    """A data file, part folder or the manifest itself that is a symlink out of the dataset is
    refused, even pointing at an identical copy; a symlink that stays inside is fine."""
    outside = tmp_path / "outside"
    cases = 0
    # a data file
    ds = make_dataset(tmp_path / "a.chute")
    shutil.copy(ds / "x.npy", outside.with_suffix(".npy"))
    (ds / "x.npy").unlink()
    (ds / "x.npy").symlink_to(outside.with_suffix(".npy"))
    with pytest.raises(chute.UnsafePathError, match="outside"):
        chute.open(ds)
    cases += 1
    # a part folder
    ds = make_dataset(tmp_path / "b.chute", part_size=3)
    shutil.move(ds / "part-00001", outside)
    (ds / "part-00001").symlink_to(outside)
    with pytest.raises(chute.UnsafePathError, match="outside"):
        chute.open(ds)
    cases += 1
    # the manifest
    ds = make_dataset(tmp_path / "c.chute")
    shutil.move(ds / fmt.MANIFEST, tmp_path / "manifest.json")
    (ds / fmt.MANIFEST).symlink_to(tmp_path / "manifest.json")
    with pytest.raises(chute.UnsafePathError, match="outside"):
        chute.open(ds)
    cases += 1
    # a relative symlink climbing out and back in is still outside
    ds = make_dataset(tmp_path / "d.chute")
    shutil.move(ds / "tokens.values.npy", tmp_path / "tokens.values.npy")
    (ds / "tokens.values.npy").symlink_to(Path("..") / "tokens.values.npy")
    with pytest.raises(chute.UnsafePathError):
        chute.open(ds)
    cases += 1
    # inside the folder: allowed (e.g. deduplicated files)
    ds = make_dataset(tmp_path / "e.chute")
    os.rename(ds / "x.npy", ds / "x-real.npy")
    (ds / "x.npy").symlink_to("x-real.npy")
    read_everything(ds)
    cases += 1
    # the dataset path itself may be a symlink the user made
    (tmp_path / "link.chute").symlink_to(tmp_path / "e.chute")
    read_everything(tmp_path / "link.chute")
    cases += 1
    record(
        record_property,
        "hostile manifest",
        "symlinks: data file, part folder, manifest leaving the folder; symlinks inside",
        cases,
        "outside: UnsafePathError 4; inside / symlinked dataset path: opens 2",
    )


@pytest.mark.timeout(30)
def test_special_files_do_not_hang(tmp_path: Path, record_property) -> None:
    """A FIFO or device where a file should be would block or never end: refused at open."""
    cases = 0
    ds = make_dataset(tmp_path / "a.chute")
    manifest = load_manifest(ds)
    manifest["parts"][0]["files"]["x.npy"]["bytes"] = 0
    save_manifest(ds, manifest)
    (ds / "x.npy").unlink()
    os.mkfifo(ds / "x.npy")
    with pytest.raises(chute.FormatError, match="regular file"):
        read_everything(ds)
    cases += 1
    ds = make_dataset(tmp_path / "b.chute")
    (ds / fmt.MANIFEST).unlink()
    os.mkfifo(ds / fmt.MANIFEST)
    with pytest.raises(chute.FormatError, match="regular file"):
        chute.open(ds)
    cases += 1
    ds = make_dataset(tmp_path / "c.chute")
    (ds / "x.npy").unlink()
    (ds / "x.npy").mkdir()
    with pytest.raises(chute.FormatError):
        chute.open(ds)
    cases += 1
    record(
        record_property,
        "hostile manifest",
        "FIFO as data file and as manifest; folder as data file",
        cases,
        "all refused at open: FormatError, no hang",
    )
