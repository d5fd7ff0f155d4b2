"""The two loaders, ``chute.Loader`` and ``chute.dataloader``,
behave alike: errors keep their class, the rank comes from the launcher, the same knobs,
unknown keywords named, and the rest of a resumed epoch has a name.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _faults import (
    recorded_case,  # noqa: F401 - autouse: records the case
    run_python,
)

import chute


@pytest.fixture
def ds(tmp_path: Path) -> chute.Dataset:
    path = tmp_path / "d.chute"
    chute.write(
        path, {"x": np.arange(40, dtype=np.float32), "t": [np.arange(i % 5) for i in range(40)]}
    )
    return chute.open(path)


# --------------------------- chute errors keep their class through the loaders


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_raises_dataset_changed_as_itself(ds: chute.Dataset, num_workers: int) -> None:
    """The README's ``except chute.DatasetChangedError: reopen`` must catch it (a
    ``WorkerError``, with any ``num_workers``)."""
    chute.write(ds.path, {"x": np.zeros(40, np.float32), "t": [[1]] * 40}, overwrite=True)
    loader = chute.Loader(ds, 4, num_workers=num_workers)
    with pytest.raises(chute.DatasetChangedError) as info:
        list(loader)
    assert str(ds.path) in str(info.value)


def test_dataloader_raises_dataset_changed_as_itself(ds: chute.Dataset) -> None:
    """The same through ``chute.dataloader``."""
    chute.write(ds.path, {"x": np.zeros(40, np.float32), "t": [[1]] * 40}, overwrite=True)
    dl = chute.dataloader(ds, 4, num_workers=0, pin_memory=False)
    with pytest.raises(chute.DatasetChangedError):
        list(dl)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_raises_format_error_as_itself(ds: chute.Dataset, num_workers: int) -> None:
    """A corrupt offsets file found mid-epoch: a FormatError the caller can catch as one."""
    off = ds.path / "t.offsets.npy"
    raw = bytearray(off.read_bytes())
    raw[-8:] = (10**9).to_bytes(8, "little")  # the last offset points far past the values
    off.write_bytes(bytes(raw))
    fresh = chute.open(ds.path)  # the size is unchanged: open() accepts it
    with pytest.raises(chute.FormatError):
        list(chute.Loader(fresh, 4, shuffle=False, num_workers=num_workers))


# --------------------------------------- rank and world size from the launcher

TORCHRUN_ENV = {
    "RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29599",
    "GROUP_RANK": "0",
    "TORCHELASTIC_RUN_ID": "none",
}


@pytest.mark.slow  # a fresh interpreter
@pytest.mark.parametrize("which", ["Loader", "dataloader"])
def test_torchrun_env_without_init_process_group(ds: chute.Dataset, which: str) -> None:
    """Built before ``dist.init_process_group`` under torchrun: rank 1 of 2 from the
    environment, or a ChuteError; never rank 0 of 1 on every rank (silent duplication)."""
    make = (
        "chute.Loader(ds, 4, num_workers=0)"
        if which == "Loader"
        else "chute.dataloader(ds, 4, num_workers=0, pin_memory=False)"
    )
    code = f"""
        import json, chute
        ds = chute.open({str(ds.path)!r})
        try:
            loader = {make}
        except chute.ChuteError as exc:
            print(json.dumps({{"error": str(exc)}}))
        else:
            print(json.dumps({{"rank": loader.order.rank, "world": loader.order.world_size,
                               "first": next(iter(loader))["x"].tolist()}}))
    """
    proc = run_python(code, env=TORCHRUN_ENV, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    if "error" in got:
        assert "RANK" in got["error"] or "init_process_group" in got["error"], got
    else:
        assert (got["rank"], got["world"]) == (1, 2), f"silently rank 0 of 1 under torchrun: {got}"


# ---------------------------------------------- the same knobs in both loaders


def test_dataloader_takes_pad(ds: chute.Dataset) -> None:
    """``pad=`` as in ``Loader`` (not torch's own TypeError)."""
    dl = chute.dataloader(ds, 8, shuffle=False, num_workers=0, pin_memory=False, pad=-1)
    batch = next(iter(dl))
    want = next(iter(chute.Loader(ds, 8, shuffle=False, num_workers=0, pad=-1)))
    assert set(batch) == set(want) == {"x", "t", "t_lengths"}
    assert batch["t"].tolist() == want["t"].tolist()


@pytest.mark.parametrize("which", ["Loader", "dataloader"])
def test_unknown_keyword_rejected_with_valid_list(ds: chute.Dataset, which: str) -> None:
    with pytest.raises(chute.ChuteError) as info:
        if which == "Loader":
            chute.Loader(ds, 4, num_workerz=2)
        else:
            chute.dataloader(ds, 4, num_workerz=2)
    msg = str(info.value)
    assert "num_workerz" in msg and "num_workers" in msg and "batch_size" in msg, msg
    assert isinstance(info.value, chute.ArgumentError), repr(info.value)


# ------------------------------------------------- the rest of a resumed epoch


@pytest.mark.parametrize("which", ["Loader", "dataloader"])
def test_remaining_after_load_state_dict(ds: chute.Dataset, which: str) -> None:
    """``len(loader)`` stays the whole epoch (torch's way); ``remaining()`` is what is left."""

    def make():
        if which == "Loader":
            return chute.Loader(ds, 4, shuffle=False, num_workers=0)
        return chute.dataloader(ds, 4, shuffle=False, num_workers=0, pin_memory=False)

    first = make()
    it = iter(first)
    for _ in range(3):
        next(it)
    state = first.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    assert len(resumed) == 10
    assert resumed.remaining() == 7
    assert len(list(resumed)) == 7
