"""chute.dataloader with decode= and sample_transform=: per-sample Python after the batch
decode, in the main process and in worker processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("simplejpeg")
import torch
from image._image_files import jpeg

import chute
from chute.image.follow import GEOMETRY_COLUMNS

N = 22
OPS = [chute.RandomResizedCrop(24, scale=(0.2, 1.0)), chute.RandomHorizontalFlip()]
DECODE = {"image": OPS, "geo": chute.Geometry("image")}


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("img") / "d.chute"
    sizes = [(30 + 5 * (i % 4), 50 - 3 * (i % 5)) for i in range(N)]
    chute.write(
        dst,
        {
            "image": [jpeg(h, w, seed=i) for i, (h, w) in enumerate(sizes)],
            "label": np.arange(N),
            "name": [f"s{i}" for i in range(N)],
        },
        schema={
            "image": chute.fields.Image(),
            "label": chute.fields.Tensor((), "int64"),
            "name": chute.String(),
        },
        part_size=10,
    )
    return dst


def hwc_augment(sample: dict[str, Any]) -> dict[str, Any]:
    """An albumentations-style function: numpy (H, W, 3) in, numpy out; it also checks that
    it gets each sample as ``ds[i]`` returns it with ``decode=`` applied."""
    img, geo = sample["image"], sample["geo"]
    assert img.dtype == torch.uint8 and img.shape == (3, 24, 24), img.shape
    assert geo.dtype == torch.float64 and geo.shape == (len(GEOMETRY_COLUMNS),), geo.shape
    assert sample["name"] == f"s{int(sample['label'])}"
    hwc = img.permute(1, 2, 0).numpy()
    out = np.ascontiguousarray(255 - hwc[::-1])  # inverted, upside down
    return {"image": out, "label": sample["label"] * 10, "geo": geo}


def per_sample(batch: dict[str, Any]) -> dict[str, torch.Tensor]:
    """``hwc_augment`` applied to each sample of a batch decoded without it, then stacked."""
    rows = [hwc_augment({k: batch[k][j] for k in batch}) for j in range(len(batch["label"]))]
    return {k: torch.stack([torch.as_tensor(r[k]) for r in rows]) for k in rows[0]}


def epochs(dl: chute.loader.dataloader.ChuteDataLoader) -> list[list[dict[str, Any]]]:
    out = []
    for epoch in (0, 1):
        dl.set_epoch(epoch)
        out.append(list(dl))
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_sample_transform_after_decode_is_decode_then_the_function_per_sample(
    images: Path, workers: int
) -> None:
    ds = chute.open(images)
    got = epochs(
        chute.dataloader(
            ds, 5, seed=4, num_workers=workers, decode=DECODE, sample_transform=hwc_augment
        )
    )
    want = epochs(chute.dataloader(ds, 5, seed=4, num_workers=0, decode=DECODE))
    for got_epoch, want_epoch in zip(got, want, strict=True):
        assert len(got_epoch) == len(want_epoch) == 5
        for g, w in zip(got_epoch, want_epoch, strict=True):
            ref = per_sample(w)
            assert set(g) == set(ref)
            assert g["image"].shape[1:] == (24, 24, 3)
            for k in ref:
                assert torch.equal(g[k], ref[k]), k
    labels = [torch.cat([b["label"] for b in e]) // 10 for e in got]
    assert sorted(labels[0].tolist()) == list(range(N))
    assert labels[0].tolist() != labels[1].tolist()  # a new order, and so new crops


def test_decoded_samples_depend_on_seed_epoch_and_index_only(images: Path) -> None:
    """The crops a sample_transform sees are those of (seed, epoch, index), whatever the
    batch, the order or the worker that decodes it."""
    ds = chute.open(images)

    def by_label(dl: Any) -> dict[int, torch.Tensor]:
        dl.set_epoch(1)
        return {
            int(y) // 10: img for b in dl for y, img in zip(b["label"], b["image"], strict=True)
        }

    common = {"seed": 9, "decode": DECODE, "sample_transform": hwc_augment}
    a = by_label(chute.dataloader(ds, 4, shuffle=False, num_workers=0, **common))
    b = by_label(chute.dataloader(ds, 7, shuffle=True, num_workers=2, **common))
    assert sorted(a) == sorted(b) == list(range(N))
    assert all(torch.equal(a[i], b[i]) for i in range(N))


def failing(sample: dict[str, Any]) -> dict[str, Any]:
    if int(sample["label"]) == 7:
        raise ValueError("no good")
    return sample


@pytest.mark.parametrize("workers", [0, 2])
def test_a_failing_sample_transform_after_decode_names_the_sample(
    images: Path, workers: int
) -> None:
    dl = chute.dataloader(
        chute.open(images),
        4,
        shuffle=False,
        num_workers=workers,
        decode={"image": OPS},
        sample_transform=failing,
    )
    with pytest.raises(chute.WorkerError, match="sample_transform failed on sample 7: ValueError"):
        list(dl)
