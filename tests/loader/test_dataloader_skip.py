"""chute.dataloader(decode=, on_error=): an image that does not decode, in the main process
and in worker processes: replaced and counted (``"skip"``), or a clear error (``"raise"``)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("simplejpeg")
import torch
from _reliability import record
from image._image_files import corrupt_second_image, jpeg

import chute

OPS = [chute.RandomResizedCrop(24), chute.RandomHorizontalFlip()]


def _corrupt(tmp_path: Path) -> Path:
    dst = chute.write(
        tmp_path / "d.chute",
        {"image": [jpeg(seed=i) for i in range(6)], "label": np.arange(6)},
        schema={"image": chute.fields.Image(), "label": chute.fields.Tensor((), "int64")},
    )
    corrupt_second_image(dst)
    return dst


def labelled(sample: dict[str, Any]) -> dict[str, Any]:
    return {"image": sample["image"], "label": sample["label"]}


@pytest.mark.parametrize(
    ("workers", "transform"), [(0, None), (2, None), (2, labelled)], ids=["main", "workers", "fn"]
)
def test_on_error_skip_replaces_warns_once_and_counts(
    tmp_path: Path, workers: int, transform: Any, record_property: Any
) -> None:
    dl = chute.dataloader(
        chute.open(_corrupt(tmp_path)),
        3,
        shuffle=False,
        num_workers=workers,
        decode={"image": OPS},
        on_error="skip",
        sample_transform=transform,
    )
    assert dl.skipped == 0
    with pytest.warns(UserWarning, match=r"field 'image'.*sample 1 does not decode.*by sample 2"):
        batches = list(dl)
    assert [b["label"].tolist() for b in batches] == [[0, 2, 2], [3, 4, 5]]
    assert torch.equal(batches[0]["image"][1], batches[0]["image"][2])
    assert dl.skipped == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reported once, whichever worker meets it again
        for epoch in (1, 2):
            dl.set_epoch(epoch)
            assert [b["label"].tolist() for b in dl] == [[0, 2, 2], [3, 4, 5]]
    assert dl.skipped == 1
    record(
        record_property,
        "an image that does not decode, chute.dataloader(on_error='skip')",
        "a JPEG overwritten in place; main process, worker processes, with sample_transform",
        1,
        "replaced by the next good sample, warned once in the main process, dl.skipped == 1",
    )


def test_on_error_raise_and_bad_values(tmp_path: Path, record_property: Any) -> None:
    ds = chute.open(_corrupt(tmp_path))
    dl = chute.dataloader(ds, 3, shuffle=False, num_workers=2, decode={"image": OPS})
    with pytest.raises(chute.FormatError, match=r"field 'image': sample 1 "):
        list(dl)
    with pytest.raises(chute.ArgumentError, match="on_error"):
        chute.dataloader(ds, 3, decode={"image": OPS}, on_error="ignore")
    with pytest.raises(chute.ArgumentError, match="applies to decode="):
        chute.dataloader(ds, 3, on_error="skip")
    record(
        record_property,
        "an image that does not decode, chute.dataloader(on_error='raise'), bad on_error",
        "a JPEG overwritten in place, in worker processes; on_error='ignore', without decode=",
        3,
        "FormatError naming field and sample; ArgumentError",
    )
