"""Hostile and odd source files at the converters' edges: nothing crashes the interpreter,
nothing is rounded, cut or dropped silently. Each case ends in a :class:`chute.SourceError`
naming the file and the line / row / member / field at fault (or the right data); memory
stays bounded by ``batch_bytes``, not by what a small compressed shard unpacks to.

Cases that could kill the interpreter, or exhaust memory, run in a child process."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from _faults import capped_cases, run_python
from _reliability import recorded

import chute
from chute import SourceError

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

_row = recorded(
    {
        "test_deep_json_line_refused_before_parsing": (
            "converter: JSONL nesting",
            "a line of lists or objects nested 10,000-100,000 deep (pyarrow's parser crashed "
            "with SIGSEGV, Python's json raised RecursionError), alone or as a key's value",
            "SourceError naming the file and line, in a child interpreter that lives",
        ),
        "test_json_depth_scan_reads_strings_and_escapes": (
            "converter: JSONL nesting",
            "brackets inside strings, escaped quotes and backslashes, a line that leaves a "
            "string open before a deep line",
            "only real nesting counts; the deep line is named",
        ),
        "test_integer_beyond_int64_never_rounded": (
            "converter: JSONL / CSV integers",
            "12345678901234567891 among integers (pyarrow infers float64 and rounds it), in "
            "the first block or a later one",
            "SourceError naming file, line / row and key; types='uint64' keeps it exact",
        ),
        "test_cut_or_corrupt_shard_refused": (
            "converter: WebDataset truncation",
            "a .tar cut at a sample boundary, a .tar.gz cut in half, a .tar.gz whose CRC is wrong",
            "SourceError naming the shard; no partial dataset",
        ),
        "test_small_gzip_shard_converts_in_bounded_memory": (
            "converter: WebDataset memory",
            "a 1 MB .tar.gz unpacking to 24 members of 16 MiB zeros (batch_size 256)",
            "converts; the child's peak RSS grows by less than half the unpacked bytes",
        ),
        "test_field_names_made_alike_refused": (
            "converter: field names",
            "WebDataset extensions seg.txt and seg_txt; Parquet struct s{a} beside column "
            "s/a; Parquet duplicate column names",
            "SourceError naming both; nothing dropped",
        ),
        "test_repeated_key_refused": (
            "converter: WebDataset keys",
            "a key repeated after other samples, in one shard or in two",
            "SourceError naming both shards",
        ),
        "test_hf_folder_json_refused_cleanly": (
            "converter: HF folder metadata",
            "dataset_dict.json holding a list; dataset_info.json nested 100,000 deep",
            "SourceError naming the file (no AttributeError / RecursionError)",
        ),
        "test_missing_image_library_is_not_a_skip": (
            "converter: missing dependency",
            "an image folder converted with on_error='skip' in an interpreter without simplejpeg",
            "MissingDependencyError at once; no image skipped for it",
        ),
    }
)


# ------------------------------------------------------------------- JSON nesting


DEEP = {
    "lists-100k": "[" * 100_000 + "]" * 100_000,
    "objects-100k": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "objects-10k": '{"a":' * 10_000 + "1" + "}" * 10_000,
    "in-a-key-50k": '{"x": ' + "[" * 50_000 + "]" * 50_000 + "}",
}


def test_deep_json_line_refused_before_parsing(tmp_path: Path) -> None:
    for name, line in DEEP.items():
        (tmp_path / f"{name}.jsonl").write_text('{"x": 1}\n' + line + "\n")
    got = capped_cases(
        f"""
        from pathlib import Path
        for name in {list(DEEP)!r}:
            src = Path({str(tmp_path)!r}) / f"{{name}}.jsonl"
            outcome(lambda: chute.convert(src, src.with_suffix(".chute"), progress=False), name)
        """
    )
    for name in DEEP:
        assert name in got, f"the child died at {name}: {got['_run']}"
        assert "SourceError" in got[name]["error"], got[name]
        assert f"{name}.jsonl: line 2: nested deeper than 100" in got[name]["message"]
        assert not (tmp_path / f"{name}.chute").exists()


def test_json_depth_scan_reads_strings_and_escapes(tmp_path: Path) -> None:
    fake = {"s": "[[[[" * 50 + '" {{{{' * 30, "t": "\\", "u": 'a\\"[[[[' * 40}
    shallow = json.dumps({"x": {"a": {"b": [1]}}, **fake})
    path = tmp_path / "s.jsonl"
    path.write_text(shallow + "\n" + json.dumps({"x": {"a": {"b": [2]}}, **fake}) + "\n")
    ds = chute.open(chute.convert(path, tmp_path / "s.chute", progress=False))
    assert ds[1]["s"] == fake["s"] and ds[1]["u"] == fake["u"]
    path.write_text(shallow + '\n{"x": "open\n' + "[" * 200 + "]" * 200 + "\n")
    with pytest.raises(SourceError, match=r"s\.jsonl: line 3: nested deeper than 100"):
        chute.convert(path, tmp_path / "o.chute", progress=False)


# ------------------------------------------------------------ integers beyond int64

BIG = 12345678901234567891  # beyond int64, within uint64


@pytest.mark.parametrize("where", ["first block", "later block"])
@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_integer_beyond_int64_never_rounded(tmp_path: Path, kind: str, where: str) -> None:
    n = 3 if where == "first block" else 20_000  # past one 64 KiB block
    path = tmp_path / f"x.{kind}"
    if kind == "jsonl":
        lines = [json.dumps({"x": i, "y": "a"}) for i in range(n)] + [f'{{"x": {BIG}, "y": "b"}}']
        path.write_text("\n".join(lines) + "\n")
        at = rf"x\.jsonl: line {n + 1}: key 'x'"
    else:
        path.write_text("x,y\n" + "".join(f"{i},a\n" for i in range(n)) + f"{BIG},b\n")
        at = rf"x\.csv: row {n} \(counted from 0 after the header\): column 'x'"
    kw = {"batch_bytes": 1 << 16}
    want = f"{at} holds the integer {BIG}, beyond int64.*types={{'x': 'uint64'}}"
    if where == "later block":  # the column is int64 by then: pyarrow's parse refuses it
        want = rf"x\.{kind}: (line {n + 1}|rows \d+\+).* to int64.*{BIG}"
    with pytest.raises(SourceError, match=want):
        chute.convert(path, tmp_path / "x.chute", progress=False, **kw)
    assert not (tmp_path / "x.chute").exists()
    exact = chute.convert(path, tmp_path / "u.chute", types={"x": "uint64"}, progress=False, **kw)
    assert chute.open(exact)[n]["x"].numpy() == np.uint64(BIG)
    path.write_text("x\n1.5\n1e300\n" if kind == "csv" else '{"x": 1.5}\n{"x": 1e300}\n')
    floats = chute.open(chute.convert(path, tmp_path / "f.chute", progress=False))
    assert float(floats[1]["x"]) == 1e300  # a float written as a float stays one


# --------------------------------------------------------------------- WebDataset


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _shard(path: Path, members: list[tuple[str, bytes]], gz: bool = False) -> Path:
    with tarfile.open(path, "w:gz" if gz else "w") as tar:
        for name, data in members:
            _add(tar, name, data)
    return path


def _samples(keys: range) -> list[tuple[str, bytes]]:
    return [(f"d/{i:04d}.{ext}", f"{i}".encode()) for i in keys for ext in ("txt", "cls")]


def _convert(src: object, dst: Path, **kw: object) -> Path:
    return chute.convert(src, dst, progress=False, **kw)


@pytest.mark.parametrize("cut", ["tar at a sample boundary", "tar.gz in half", "tar.gz CRC"])
def test_cut_or_corrupt_shard_refused(tmp_path: Path, cut: str) -> None:
    members = _samples(range(50))
    if cut.startswith("tar at"):
        path = _shard(tmp_path / "s.tar", members)
        with tarfile.open(path) as tar:  # where sample 20's first header starts
            end = tar.getmember("d/0020.txt").offset
        data = path.read_bytes()[:end]
    else:
        path = _shard(tmp_path / "s.tar.gz", members, gz=True)
        data = bytearray(path.read_bytes())
        if "half" in cut:
            data = data[: len(data) // 2]
        else:
            data[-8] ^= 0xFF  # the trailer's CRC-32
    path.write_bytes(bytes(data))
    with pytest.raises(SourceError, match=rf"{path.name}: (cut short|not a readable tar)"):
        _convert(path, tmp_path / "o.chute")
    assert not (tmp_path / "o.chute").exists()


def test_small_gzip_shard_converts_in_bounded_memory(tmp_path: Path) -> None:
    n, size = 24, 16 << 20
    path = tmp_path / "z.tar.gz"
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for i in range(n):
            info = tarfile.TarInfo(f"d/{i:04d}.bin")
            info.size = size
            tar.addfile(info, io.BytesIO(bytes(size)))
    assert path.stat().st_size < size  # a small file that unpacks to 384 MiB
    got = capped_cases(
        f"""
        import resource
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
        def run():
            dst = chute.convert({str(path)!r}, {str(tmp_path / "z.chute")!r}, progress=False)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
            return len(chute.open(dst)), peak - before
        outcome(run, "z")
        """,
        timeout=240,
    )
    assert "ok" in got["z"], got
    samples, grew = eval(got["z"]["ok"])
    assert samples == n
    assert grew < n * size // 2, f"peak RSS grew by {grew >> 20} MiB"


def test_field_names_made_alike_refused(tmp_path: Path) -> None:
    path = _shard(tmp_path / "a.tar", [("d/0.seg.txt", b"a"), ("d/0.seg_txt", b"b")])
    with pytest.raises(SourceError, match=r"members \.seg\.txt and members \.seg_txt both become"):
        _convert(path, tmp_path / "a.chute")
    both = _convert(path, tmp_path / "b.chute", fields={"seg.txt": "a", "seg_txt": "b"})
    sample = chute.open(both)[0]
    assert sample["a"] == "a" and bytes(sample["b"].numpy()) == b"b"
    table = pa.table({"s": pa.array([{"a": 1}]), "s/a": pa.array([2])})
    pq.write_table(table, tmp_path / "s.parquet")
    with pytest.raises(SourceError, match=r"member 'a' of struct 's' and column 's/a' both become"):
        _convert(tmp_path / "s.parquet", tmp_path / "s.chute")
    twice = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
    pq.write_table(twice, tmp_path / "d.parquet")
    with pytest.raises(SourceError, match=r"d\.parquet: column 'a' and column 'a' both become"):
        _convert(tmp_path / "d.parquet", tmp_path / "d.chute")
    with pytest.raises(chute.SchemaError, match=r"field 'a/b' is given twice"):
        chute.from_iterable([{"a": {"b": 1}, "a/b": 2}], tmp_path / "n.chute")
    assert not (tmp_path / "n.chute").exists()


@pytest.mark.parametrize("where", ["one shard", "two shards"])
def test_repeated_key_refused(tmp_path: Path, where: str) -> None:
    if where == "one shard":
        _shard(tmp_path / "a.tar", _samples(range(3)) + _samples(range(1, 2)))
        first = "a.tar"
    else:
        _shard(tmp_path / "a.tar", _samples(range(3)))
        _shard(tmp_path / "b.tar", _samples(range(2, 4)))
        first = "a.tar"
    again = "b.tar" if where == "two shards" else "a.tar"
    want = rf"{again}: sample key 'd/000\d' again.*first in .*{first}"
    with pytest.raises(SourceError, match=want):
        _convert(f"{tmp_path}/*.tar", tmp_path / "k.chute")
    assert not (tmp_path / "k.chute").exists()


# --------------------------------------------------------- HF folders, dependencies


def test_hf_folder_json_refused_cleanly(tmp_path: Path) -> None:
    folder = tmp_path / "dd"
    folder.mkdir()
    (folder / "dataset_dict.json").write_text('["train", "test"]')
    with pytest.raises(SourceError, match=r"dataset_dict\.json: not a DatasetDict's file"):
        _convert(folder, tmp_path / "o.chute")
    split = tmp_path / "split"
    split.mkdir()
    (split / "state.json").write_text('{"_data_files": [{"filename": "x.arrow"}]}')
    (split / "dataset_info.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SourceError, match=r"dataset_info\.json: cannot be read as JSON"):
        _convert(split, tmp_path / "o.chute")


def test_missing_image_library_is_not_a_skip(tmp_path: Path) -> None:
    from PIL import Image

    folder = tmp_path / "imgs" / "cat"
    folder.mkdir(parents=True)
    for i in range(3):
        Image.fromarray(np.full((8, 8, 3), i, np.uint8)).save(folder / f"{i}.jpg")
    proc = run_python(
        f"""
        import sys
        sys.modules["simplejpeg"] = None  # this interpreter has no simplejpeg
        import chute
        try:
            chute.from_image_folder({str(tmp_path / "imgs")!r}, {str(tmp_path / "o.chute")!r},
                                    on_error="skip", progress=False)
        except chute.MissingDependencyError as exc:
            print("MissingDependencyError:", exc)
        """
    )
    assert "MissingDependencyError: simplejpeg is needed" in proc.stdout, proc.stderr[-2000:]
    assert "chute[image]" in proc.stdout
    assert not (tmp_path / "o.chute").exists()
