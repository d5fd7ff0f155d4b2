"""chute.sniff: source kinds without h5py/zarr, and the "not a dataset" hints of chute.open."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

import chute
from chute.sniff import convert_command, not_a_dataset, source_kind


def test_kinds_by_suffix_signature_and_markers(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(3))
    np.savez(tmp_path / "x.npz", x=np.arange(3))
    with h5py.File(tmp_path / "no_suffix", "w") as f:
        f["x"] = np.arange(3)
    (tmp_path / "deep" / "er").mkdir(parents=True)
    np.save(tmp_path / "deep" / "er" / "y.npy", np.arange(3))
    (tmp_path / "notes.txt").write_text("hi")
    (tmp_path / "empty").mkdir()
    kinds = {p: source_kind(tmp_path / p) for p in ("x.npy", "x.npz", "no_suffix", "deep")}
    assert kinds == {"x.npy": "npy", "x.npz": "npz", "no_suffix": "hdf5", "deep": "npy_folder"}
    assert source_kind(tmp_path / "notes.txt") is None and source_kind(tmp_path / "empty") is None


def test_folder_search_is_bounded_for_messages(tmp_path):
    for i in range(30):
        (tmp_path / f"a{i:02}").mkdir()
    np.save(tmp_path / "a29" / "x.npy", np.arange(3))  # walked last (after 30 folders)
    assert source_kind(tmp_path) == "npy_folder"
    assert source_kind(tmp_path, max_entries=10) is None


def test_convert_command_is_quoted():
    assert convert_command("my data.h5") == "chute convert 'my data.h5' 'my data.chute'"


def test_open_says_what_a_path_is(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(3))
    with pytest.raises(chute.DatasetNotFoundError) as info:
        chute.open(tmp_path / "x.npy")
    assert str(info.value) == (
        f"{tmp_path / 'x.npy'} is an .npy file, not a chute dataset: convert it with "
        f"`chute convert {tmp_path / 'x.npy'} {tmp_path / 'x.chute'}`"
    )
    (tmp_path / "npydir").mkdir()
    (tmp_path / "x.npy").rename(tmp_path / "npydir" / "x.npy")
    with pytest.raises(chute.DatasetNotFoundError, match="unfinished write") as info:
        chute.open(tmp_path / "npydir")  # maybe a dataset whose write did not finish
    assert "if it is a folder of .npy files" in str(info.value)
    assert not_a_dataset(tmp_path / "missing") is None
    with pytest.raises(chute.DatasetNotFoundError, match="no such dataset folder"):
        chute.open(tmp_path / "missing")
