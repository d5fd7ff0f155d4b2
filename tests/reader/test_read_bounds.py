"""Bounds on what a reader accepts: metadata size, the pickle sent
to each worker, and the launcher's rank when no process group is initialized."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

import chute
from chute._args import dist_defaults
from chute.manifest_file import MAX_METADATA_BYTES, MAX_METADATA_DEPTH


def test_metadata_bound_on_write_and_read(tmp_path: Path) -> None:
    big = {"blob": "a" * (MAX_METADATA_BYTES + 1)}
    with pytest.raises(chute.SchemaError, match="metadata of"):
        chute.write(tmp_path / "w.chute", {"x": np.arange(3)}, metadata=big)
    path = tmp_path / "r.chute"
    chute.write(path, {"x": np.arange(3)})
    obj = json.loads((path / "chute.json").read_text())
    obj["metadata"] = big
    (path / "chute.json").write_text(json.dumps(obj))
    with pytest.raises(chute.FormatError, match="metadata of"):
        chute.open(path)


def _nested(levels: int, kind: type) -> object:
    value: object = 1
    for _ in range(levels):
        value = {"a": value} if kind is dict else [value]
    return value


@pytest.mark.parametrize("kind", [dict, list])
def test_metadata_depth_bound_on_write_and_read(tmp_path: Path, kind: type) -> None:
    """Nesting pickle cannot send to a spawned worker is refused when written and opened."""
    ok = {"m": _nested(MAX_METADATA_DEPTH - 1, kind)}
    chute.write(tmp_path / "ok.chute", {"x": np.arange(3)}, metadata=ok)
    pickle.loads(pickle.dumps(chute.open(tmp_path / "ok.chute")))
    deep = {"m": _nested(MAX_METADATA_DEPTH, kind)}
    with pytest.raises(chute.SchemaError, match="metadata nests lists and dicts 101 levels"):
        chute.write(tmp_path / "w.chute", {"x": np.arange(3)}, metadata=deep)
    path = tmp_path / "r.chute"
    chute.write(path, {"x": np.arange(3)})
    obj = json.loads((path / "chute.json").read_text())
    obj["metadata"] = {"m": _nested(900, kind)}
    (path / "chute.json").write_text(json.dumps(obj))
    with pytest.raises(chute.FormatError, match="metadata nests"):
        chute.open(path)


def test_pickle_is_compressed_and_reads_the_same(tmp_path: Path) -> None:
    path = tmp_path / "d.chute"
    chute.write(path, {"t": [np.arange(i % 4) for i in range(400)]}, part_size=2)
    ds = chute.open(path)
    plain = len(pickle.dumps((ds._manifest.to_json(), ds._files.identity)))
    blob = pickle.dumps(ds)
    assert len(blob) * 4 < plain, (len(blob), plain)
    again = pickle.loads(blob)
    idx = np.arange(399, -1, -7)
    assert len(again.gather(idx)["t"]) == len(idx)
    for a, b in zip(again.gather(idx)["t"], ds.gather(idx)["t"], strict=True):
        assert a.tolist() == b.tolist()


@pytest.mark.parametrize(
    ("env", "want"),
    [({}, (0, 1)), ({"RANK": "3", "WORLD_SIZE": "4"}, (3, 4)), ({"RANK": " "}, (0, 1))],
)
def test_dist_defaults_from_the_launcher(monkeypatch, env: dict, want: tuple) -> None:
    for k in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert dist_defaults(None, None) == want
    assert dist_defaults(1, 2) == (1, 2)  # explicit arguments win


def test_dist_defaults_malformed_env_names_the_variable(monkeypatch) -> None:
    monkeypatch.setenv("RANK", "one")
    with pytest.raises(chute.ArgumentValueError, match="RANK"):
        dist_defaults(None, 2)


# the compiled copy / numpy's slices copied one by one / numpy's one flat take
@pytest.mark.parametrize("tiny", [None, 0, 1 << 40])
@pytest.mark.parametrize("part_size", [None, 3])
def test_ragged_gather_strategies_match_samples(
    tmp_path: Path, monkeypatch, tiny: int | None, part_size: int | None
) -> None:
    """Each copy strategy of the ragged gather, one part or several, repeated indices,
    several variable dims, bytes: every sample equals ``ds[i]``."""
    from chute.columns import segments

    if tiny is None:
        pytest.importorskip("numba")
        assert segments.kernels() is not None
    else:
        monkeypatch.setattr(segments, "kernels", lambda: None)
        monkeypatch.setattr(segments, "TINY_SAMPLE_VALUES", tiny)
    rng = np.random.default_rng(1)
    images = [rng.integers(0, 255, (i % 3, i % 4 + 1, 2), np.uint8) for i in range(11)]
    blobs = [bytes(rng.integers(0, 255, i * 3, np.uint8)) for i in range(11)]
    path = tmp_path / "r.chute"
    chute.write(path, {"im": images, "b": blobs}, part_size=part_size)
    ds = chute.open(path)
    idx = [10, 0, 3, 3, 7, 1, 10, 5]
    batch = ds.gather(idx)
    for k, i in enumerate(idx):
        assert np.array_equal(batch["im"][k].numpy(), images[i])
        assert batch["b"][k].numpy().tobytes() == blobs[i]
    assert len(ds.gather([])["im"]) == 0 and tuple(ds.gather([])["im"].shapes.shape) == (0, 3)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize(("at", "value"), [(3, -1), (3, 10**6), (4, 0)])
def test_ragged_gather_refuses_offsets_out_of_order(
    tmp_path: Path, monkeypatch, compiled: bool, at: int, value: int
) -> None:
    """An offset that is negative, past the values or backwards: a FormatError naming the
    offsets file and the sample, with the compiled bounds or numpy's."""
    from chute.columns import segments

    if compiled:
        pytest.importorskip("numba")
    else:
        monkeypatch.setattr(segments, "kernels", lambda: None)
    path = chute.write(tmp_path / "r.chute", {"t": [np.arange(i + 1) for i in range(6)]})
    file = path / "t.offsets.npy"
    offsets = np.load(file, mmap_mode="r+")
    offsets[at] = value
    offsets.flush()
    del offsets
    sample = at if value == 10**6 else at - 1
    with pytest.raises(chute.FormatError, match=rf"t\.offsets\.npy: offsets of sample {sample} "):
        chute.open(path).gather([0, sample])
