"""Hostile .npy files: no pickle ever runs, no header is trusted, no forged offsets leak out.

The files here are forged the way an attacker would: the manifest is re-sealed with the new
sizes and checksums (``reseal``), so only chute's own checks of headers and contents stand
between the file and the user.
"""

from __future__ import annotations

import io
import pickle
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from _reliability import (
    fuzz,
    make_dataset,
    outcome_of,
    read_everything,
    record,
    reseal,
    write_npy,
)
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

import chute
from chute.npy_header import check_size, read_header

pytestmark = pytest.mark.slow  # the fault harness: real processes, signals, fuzzing

FUZZ = fuzz(HealthCheck.function_scoped_fixture)


class Canary:
    """Unpickling this creates a file: proof that a pickle ran."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (Path(self.path).touch, ())


def npy_bytes(header: str, version: tuple[int, int] = (1, 0), data: bytes = b"") -> bytes:
    """A .npy file with an arbitrary header text (padded as numpy pads)."""
    text = header.encode("utf-8" if version == (3, 0) else "latin1")
    size_len = 2 if version == (1, 0) else 4
    pad = -(10 + size_len - 2 + len(text) + 1) % 64
    text += b" " * pad + b"\n"
    prefix = b"\x93NUMPY" + bytes(version) + len(text).to_bytes(size_len, "little")
    return prefix + text + data


def header(descr: str = "'<f4'", fortran: str = "False", shape: str = "(7, 2, 3)") -> str:
    return f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, }}"


def pickled_object_npy(canary: Path, rows: int = 7) -> bytes:
    arr = np.empty((rows, 2, 3), object)
    arr[...] = Canary(str(canary))
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    return buf.getvalue()


DATA = np.zeros((7, 2, 3), np.float32).tobytes()
BAD_HEADERS = {
    "object dtype": npy_bytes(header("'|O'"), data=pickle.dumps([1, 2])),
    "object in a structured dtype": npy_bytes(header("[('a', '<f4'), ('b', '|O')]"), data=DATA),
    "structured dtype": npy_bytes(header("[('a', '<f4')]", shape="(7, 6)"), data=DATA),
    "sub-array dtype": npy_bytes(header("('<f4', (2, 3))", shape="(7,)"), data=DATA),
    "Fortran order": npy_bytes(header(fortran="True"), data=DATA),
    "big-endian": npy_bytes(header("'>f4'"), data=DATA),
    "unicode dtype": npy_bytes(header("'<U6'", shape="(7,)"), data=DATA[: 7 * 24]),
    "code in the header": npy_bytes(
        "{'descr': __import__('os').system('touch /tmp/chute-pwned'), 'fortran_order': "
        "False, 'shape': (7, 2, 3), }",
        data=DATA,
    ),
    "negative dimension": npy_bytes(header(shape="(-7, -2, 3)"), data=DATA),
    "-1 dimension": npy_bytes(header(shape="(7, -1, 3)"), data=DATA),
    "enormous shape": npy_bytes(header(shape="(2**62, 2, 3)".replace("2**62", str(2**62)))),
    "float dimension": npy_bytes(header(shape="(7.0, 2, 3)"), data=DATA),
    "non-bool fortran": npy_bytes(header(fortran="0"), data=DATA),
    "missing key": npy_bytes("{'descr': '<f4', 'shape': (7, 2, 3), }", data=DATA),
    "extra key": npy_bytes(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (7, 2, 3), 'x': 1, }", data=DATA
    ),
    "not a dict": npy_bytes("['<f4', False, (7, 2, 3)]", data=DATA),
    "unknown version": npy_bytes(header(), version=(9, 9), data=DATA),
    "bad magic": b"\x93NUMPZ" + npy_bytes(header(), data=DATA)[6:],
    "v2 header length 4 GiB": b"\x93NUMPY\x02\x00\xff\xff\xff\xff" + header().encode(),
    "v1 header length past the end": b"\x93NUMPY\x01\x00\xff\xff" + header().encode(),
    "empty file": b"",
    "magic only": b"\x93NUMPY",
    "v3 non-ascii header": npy_bytes(header(descr="'<f4' if 'é' else 1"), (3, 0), DATA),
    "deep nesting": npy_bytes("[" * 4000 + "]" * 4000, data=DATA),
    "too long": npy_bytes("{" + " " * 20000 + "}", data=DATA),
    "unclosed (Python 2 path)": npy_bytes("{'descr': '<f4', 'shape': (", (2, 0), DATA),
}


def test_bad_headers_refused(tmp_path: Path, record_property) -> None:
    """Each bad header, read directly and as a dataset's data file: a FormatError."""
    canary = Path("/tmp/chute-pwned")
    canary.unlink(missing_ok=True)
    ds = make_dataset(tmp_path / "d.chute")
    for what, content in BAD_HEADERS.items():
        (tmp_path / "bad.npy").write_bytes(content)
        with open(tmp_path / "bad.npy", "rb") as f:
            try:
                dtype, shape, offset = read_header(f, "bad.npy")
                check_size("bad.npy", dtype, shape, offset, len(content))
            except chute.FormatError:
                pass
            else:  # a valid .npy, but not what the manifest describes: the reader refuses it
                assert (dtype, shape) != (np.dtype("<f4"), (7, 2, 3)), what
        (ds / "x.npy").write_bytes(content)
        reseal_outcome = outcome_of(lambda: reseal(ds))
        assert reseal_outcome in ("ok", "FormatError"), what
        with pytest.raises(chute.FormatError):
            read_everything(ds)
    assert not canary.exists()
    record(
        record_property,
        "bad .npy header",
        "object/structured/sub-array/big-endian/Fortran dtypes, code in the header, "
        "negative/enormous/float dims, 4 GiB header length, bad magic/version, deep nesting",
        len(BAD_HEADERS),
        "all refused: FormatError (read directly and as a data file); no code ran",
    )


def test_pickle_never_loaded(tmp_path: Path, record_property) -> None:
    """An object array whose pickle would create a file, planted as a data file (re-sealed),
    handed to ``convert`` as .npy and .npz: refused, and the pickle never runs."""
    canary = tmp_path / "pickle-ran"
    payload = pickled_object_npy(canary)
    ds = make_dataset(tmp_path / "d.chute")
    cases = 0
    for target in ("x.npy", "tokens.values.npy", "text.offsets.npy"):
        (ds / target).write_bytes(payload)
        reseal(ds)  # the forger's manifest matches the files byte for byte
        with pytest.raises(chute.FormatError):
            read_everything(ds)
        with pytest.raises(chute.FormatError):
            chute.verify(ds)
        cases += 2
        ds = make_dataset(tmp_path / f"{target}.chute")
    (tmp_path / "obj.npy").write_bytes(payload)
    with pytest.raises(chute.ChuteError):
        chute.convert(tmp_path / "obj.npy", tmp_path / "out.chute", progress=False)
    np.savez(tmp_path / "obj.npz", a=np.array([Canary(str(canary))] * 3, object))
    with pytest.raises(chute.ChuteError):
        chute.convert(tmp_path / "obj.npz", tmp_path / "out2.chute", progress=False)
    cases += 2
    assert not canary.exists(), "a pickle was loaded"
    assert not (tmp_path / "out.chute").exists() and not (tmp_path / "out2.chute").exists()
    record(
        record_property,
        "pickle in .npy",
        "object array with a file-creating pickle as data/values/offsets file (re-sealed) "
        "and as convert() input (.npy, .npz)",
        cases,
        "all refused (FormatError / SourceError); the pickle never ran",
    )


@st.composite
def headers(draw) -> bytes:
    """Random but plausible headers: fields drawn from good and bad values, random padding,
    then possibly a few bytes flipped."""
    descr = draw(
        st.sampled_from(["'<f4'", "'>f4'", "'|u1'", "'<i8'", "'|O'", "'<U3'", "'<f4,<f4'", "1"])
    )
    dims = draw(
        st.lists(st.integers(-3, 9) | st.sampled_from([2**31, 2**62, 2**64, -(2**63)]), max_size=4)
    )
    shape = "(" + "".join(f"{d}, " for d in dims) + ")"
    fortran = draw(st.sampled_from(["False", "True", "0", "None"]))
    version = draw(st.sampled_from([(1, 0), (2, 0), (3, 0)]))
    data = draw(st.binary(max_size=256))
    raw = bytearray(npy_bytes(header(descr, fortran, shape), version, data))
    for pos, bit in draw(st.lists(st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 7)))):
        raw[pos] ^= 1 << bit
    return bytes(raw)


def test_fuzzed_headers(tmp_path: Path, record_property) -> None:
    """read_header on random and bit-flipped headers: a FormatError or a header that matches
    the file; as a re-sealed data file: a chute error or the exact data."""
    ds = make_dataset(tmp_path / "d.chute", n=7)
    outcomes: Counter = Counter()

    @FUZZ
    @given(headers())
    def run(content: bytes) -> None:
        (tmp_path / "h.npy").write_bytes(content)
        with open(tmp_path / "h.npy", "rb") as f:
            try:
                dtype, shape, _ = read_header(f, "h.npy")
            except chute.FormatError:
                outcomes["header refused"] += 1
            else:
                assert all(d >= 0 for d in shape) and not dtype.hasobject
                outcomes["header parsed"] += 1
        (ds / "x.npy").write_bytes(content)
        reseal(ds)
        outcomes[f"dataset: {outcome_of(lambda: read_everything(ds))}"] += 1

    run()
    record(
        record_property,
        "bad .npy header",
        "hypothesis: random descr/shape/order/version/data, random bit flips",
        outcomes["header refused"] + outcomes["header parsed"],
        outcomes,
    )


def _edited(shapes: list[list[int]], edits: list[tuple[int, int, int]]) -> list[list[int]]:
    out = [list(row) for row in shapes]
    for i, j, v in edits:
        out[i][j] = v
    return out


def _forge(ds: Path, file: str, arr: np.ndarray) -> None:
    write_npy(ds / file, arr)
    reseal(ds)


def _consistent(ds_path: Path) -> None:
    """After a successful read, the batch is well formed and agrees sample by sample."""
    with chute.open(ds_path) as ds:
        batch = ds.gather(np.arange(len(ds)))
        for name in ("tokens", "image"):
            offsets = batch[name].offsets.numpy()
            assert offsets[0] == 0 and (np.diff(offsets) >= 0).all()
            assert offsets[-1] == len(batch[name].values)
            for i in range(len(ds)):
                assert torch.equal(ds[i][name], batch[name].sample(i))
        for i in range(len(ds)):
            assert ds[i]["image"].shape[-1] == 3


def test_forged_offsets_and_shapes(tmp_path: Path, record_property) -> None:
    """Offsets that go backwards, past the end or negative, and shapes that lie, in valid
    .npy files with a re-sealed manifest: a FormatError at first read, or, when the forged
    arrays happen to be consistent, exactly the data they describe; never garbage."""
    ds = make_dataset(tmp_path / "d.chute", n=7)
    values = int(np.load(ds / "tokens.offsets.npy")[-1])
    pristine = {f: (ds / f).read_bytes() for f in ("tokens.offsets.npy", "image.shapes.npy")}

    def restore() -> None:
        for f, content in pristine.items():
            (ds / f).write_bytes(content)

    real_shapes = np.load(ds / "image.shapes.npy").tolist()
    hostile = st.integers(-3, values + 3) | st.sampled_from([2**32, 2**62, -(2**63)])
    offsets_st = st.one_of(
        # consistent: the same values split differently between the samples
        st.lists(st.integers(0, values), min_size=6, max_size=6).map(
            lambda cut: [0, *sorted(cut), values]
        ),
        st.lists(hostile, min_size=8, max_size=8),
        st.lists(hostile, min_size=8, max_size=8).map(sorted),
    )
    shapes_st = st.one_of(
        st.just(real_shapes),
        st.lists(
            st.tuples(st.integers(0, 6), st.integers(0, 2), hostile), min_size=1, max_size=3
        ).map(lambda edits: _edited(real_shapes, edits)),
        st.lists(st.tuples(hostile, hostile, hostile), min_size=7, max_size=7),
    )
    outcomes: Counter = Counter()

    @FUZZ
    @given(offsets_st, shapes_st)
    def run(offsets: list[int], shapes: list) -> None:
        _forge(ds, "tokens.offsets.npy", np.array(offsets, np.int64))
        _forge(ds, "image.shapes.npy", np.array(shapes, np.int64))
        got = outcome_of(lambda: read_everything(ds))
        if got == "ok":
            _consistent(ds)
        outcomes[got] += 1

    run()
    # the hand-picked classic cases, each alone
    cases = {
        "backwards": np.array([0, 3, 1, 4, 4, 5, 6, values]),
        "past the end": np.array([0, 1, 2, 3, 4, 5, 6, values + 1]),
        "negative": np.array([0, -1, 2, 3, 4, 5, 6, values]),
        "not from 0": np.array([1, 1, 2, 3, 4, 5, 6, values]),
        "wrap-around": np.array([0, 1, 2, 3, 2**62, 5, 6, values]),
    }
    for what, forged in cases.items():
        restore()
        _forge(ds, "tokens.offsets.npy", forged.astype(np.int64))
        assert outcome_of(lambda: read_everything(ds)) == "FormatError", what
    shape_cases = {
        "negative dims": [(-1, -2, 3)] + [(1, 2, 3)] * 6,
        "overflowing product": [(2**32, 2**32, 3)] + [(1, 2, 3)] * 6,
        "wrong fixed dim": [(1, 2, 4)] * 7,
    }
    for what, forged in shape_cases.items():
        restore()
        _forge(ds, "image.shapes.npy", np.array(forged, np.int64))
        assert outcome_of(lambda: read_everything(ds)) == "FormatError", what
    record(
        record_property,
        "forged offsets/shapes",
        "hypothesis: offsets consistent or backwards/past end/negative/overflowing, per-sample "
        "shapes real, edited or random (valid .npy, re-sealed manifest) + 8 hand-picked",
        outcomes.total() + len(cases) + len(shape_cases),
        outcomes,
    )
