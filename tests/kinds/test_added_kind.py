"""A kind added by the recipe of docs/field_kinds.md alone (its module, tests/kinds/_pcm_audio.py,
and its name in the registry) is written, opened and read back every way chute reads."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _pcm_audio import SCALE, Audio

import chute
from chute.kinds import KINDS
from chute.testing import check_field_kind

RNG = np.random.default_rng(0)
WAVES = [RNG.uniform(-1, 1, k).astype("f4") for k in (5, 0, 3, 7, 1, 4, 2)]


def _stored(wave: np.ndarray) -> torch.Tensor:
    """What ``ds[i]`` gives for ``wave``: its int16 rounding, as float32."""
    pcm = np.clip(np.round(wave * SCALE), -SCALE, SCALE - 1).astype(np.int16)
    return torch.from_numpy(pcm.astype(np.float32) / SCALE)


@pytest.fixture
def audio_registered(monkeypatch):
    """The registry line of the recipe (in chute: ``Audio`` added to ``Field``)."""
    monkeypatch.setitem(KINDS, Audio.kind, Audio)


def test_the_added_kind_reads_back_every_way(audio_registered, tmp_path):
    check_field_kind(Audio(8000), WAVES, tmp_path, _stored, ray=False)


def test_the_added_kind_goes_from_writer_to_a_loader_batch(audio_registered, tmp_path):
    path = tmp_path / "speech.chute"
    schema = {"wave": Audio(8000), "label": chute.fields.Tensor((), "int64")}
    chute.write(path, {"wave": WAVES, "label": np.arange(7)}, schema=schema)
    ds = chute.open(path)
    assert ds.schema["wave"] == Audio(8000)
    assert ds.schema["wave"].describe() == "audio 8000 Hz"
    batches = list(chute.Loader(ds, batch_size=4, pad=0.0))
    for batch in batches:
        padded, lengths = batch["wave"], batch["wave_lengths"]
        assert padded.dtype == torch.float32 and padded.shape[0] == len(batch["label"])
        for row, n, label in zip(padded, lengths.tolist(), batch["label"].tolist(), strict=True):
            assert torch.equal(row[:n], _stored(WAVES[label]))
            assert not row[n:].any()
    assert sorted(i for b in batches for i in b["label"].tolist()) == list(range(7))


def test_without_its_registry_line_the_kind_is_refused(tmp_path):
    with pytest.raises(chute.SchemaError, match="is not a chute field kind"):
        chute.write(tmp_path / "a.chute", {"wave": WAVES}, schema={"wave": Audio()})


def test_the_added_kind_checks_its_values(audio_registered, tmp_path):
    with pytest.raises(chute.SchemaError, match=r"field 'wave', sample 1: Audio takes a 1-D"):
        chute.write(
            tmp_path / "a.chute", {"wave": [WAVES[0], np.zeros((2, 2))]}, schema={"wave": Audio()}
        )
