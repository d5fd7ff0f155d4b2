"""decode= in chute.Loader and chute.dataloader: shapes, exactly-once, determinism and resume
of augmentations, buffers, errors, spawn/fork; chute.normalize."""

from __future__ import annotations

import multiprocessing as mp
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("simplejpeg")
import torch
from _image_files import jpeg

import chute
from chute.image import decode_batch

N = 45
OPS = [chute.RandomResizedCrop(32, scale=(0.1, 1.0)), chute.RandomHorizontalFlip()]


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("img") / "d.chute"
    sizes = [(40 + 7 * (i % 5), 90 - 5 * (i % 7)) for i in range(N)]
    data = [jpeg(h, w, seed=i) for i, (h, w) in enumerate(sizes)]
    chute.write(
        dst,
        {"image": data, "label": np.arange(N), "name": [f"s{i}" for i in range(N)]},
        schema={
            "image": chute.fields.Image(),
            "label": chute.fields.Tensor((), "int64"),
            "name": chute.String(),
        },
        part_size=20,
    )
    return dst


def expected(ds: chute.Dataset, idx: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """decode_batch on the encoded batch: what decode= must give for these indices."""
    enc = ds.gather(idx)["image"]
    out = np.empty((len(idx), 3, 32, 32), np.uint8)
    sizes = enc.sizes.numpy()
    return decode_batch(enc, sizes[:, 0], sizes[:, 1], OPS, idx, seed, epoch, out)


def epoch_images(loader, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    loader.set_epoch(epoch)
    labels, imgs = [], []
    for b in loader:
        assert b["image"].dtype == torch.uint8 and b["image"].shape[1:] == (3, 32, 32)
        labels.append(b["label"].numpy().copy())
        imgs.append(b["image"].numpy().copy())
    return np.concatenate(labels), np.concatenate(imgs)


@pytest.mark.parametrize("keep", [None, 2])
@pytest.mark.parametrize("workers", [0, 2])
def test_exactly_once_and_pixels(images: Path, workers: int, keep: int | None) -> None:
    ds = chute.open(images)
    loader = chute.Loader(
        ds, 8, seed=3, num_workers=workers, reuse_after=keep, decode={"image": OPS}
    )
    labels, imgs = epoch_images(loader, 1)
    assert sorted(labels.tolist()) == list(range(N))
    assert np.array_equal(imgs, expected(ds, labels, 3, 1))
    # another epoch, other crops; the same epoch again, the same pixels
    labels2, imgs2 = epoch_images(loader, 2)
    assert not np.array_equal(imgs2, expected(ds, labels2, 3, 1))
    assert np.array_equal(imgs2, expected(ds, labels2, 3, 2))


def test_resume_mid_epoch_gives_the_same_pixels(images: Path) -> None:
    ds = chute.open(images)
    make = lambda: chute.Loader(ds, 6, seed=11, num_workers=2, decode={"image": OPS})  # noqa: E731
    full = make()
    full.set_epoch(4)
    want = [b["image"].clone() for b in full]
    part = make()
    part.set_epoch(4)
    it = iter(part)
    for _ in range(3):
        next(it)
    state = part.state_dict()
    del it
    resumed = make()
    resumed.load_state_dict(state)
    rest = [b["image"].clone() for b in resumed]
    assert len(rest) == len(want) - 3
    for a, b in zip(want[3:], rest, strict=True):
        assert torch.equal(a, b)


def test_ring_reuses_its_buffers(images: Path) -> None:
    ds = chute.open(images)
    loader = chute.Loader(ds, 5, num_workers=2, reuse_after=1, decode={"image": OPS})
    ptrs = [b["image"].data_ptr() for b in loader]
    assert len(set(ptrs)) <= loader.ring_size  # no buffer per batch
    pooled = chute.Loader(ds, 5, num_workers=2, decode={"image": OPS})
    ptrs = [b["image"].data_ptr() for b in pooled]
    assert len(set(ptrs)) < len(ptrs)  # fresh batches come from the pool


def test_eval_center_crop_and_subset(images: Path) -> None:
    ds = chute.open(images)
    sub = torch.utils.data.Subset(ds, list(range(10, 30)))
    loader = chute.Loader(
        sub, 7, shuffle=False, num_workers=1, decode={"image": chute.CenterCrop(24, ratio=0.875)}
    )
    got = torch.cat([b["image"] for b in loader])
    assert got.shape == (20, 3, 24, 24)
    enc = ds.gather(np.arange(10, 30))["image"]
    out = np.empty((20, 3, 24, 24), np.uint8)
    ref = decode_batch(
        enc,
        enc.heights.numpy(),
        enc.widths.numpy(),
        [chute.CenterCrop(24, ratio=0.875)],
        np.arange(20),
        0,
        0,
        out,
    )
    assert np.array_equal(got.numpy(), ref)


def test_bad_decode_arguments(images: Path) -> None:
    ds = chute.open(images)
    with pytest.raises(chute.SchemaError, match="a tensor field"):
        chute.Loader(ds, 4, decode={"label": OPS})
    with pytest.raises(chute.SchemaError, match="no field 'img'"):
        chute.Loader(ds, 4, decode={"img": OPS})
    with pytest.raises(chute.ArgumentError, match="exactly one"):
        chute.Loader(ds, 4, decode={"image": [chute.RandomHorizontalFlip()]})
    on_device = {"image": chute.CenterCrop(32, device="cpu")}
    with pytest.raises(chute.ArgumentValueError, match=r"\['image'\] are decoded by chute.to_dev"):
        chute.dataloader(ds, 4, decode=on_device, sample_transform=lambda s: s)


def test_corrupt_image_in_the_loader_names_field_and_index(tmp_path: Path) -> None:
    from test_image_field import corrupt_second_image

    dst = chute.write(
        tmp_path / "d.chute",
        {"image": [jpeg(seed=i) for i in range(3)]},
        schema={"image": chute.fields.Image()},
    )
    corrupt_second_image(dst)
    loader = chute.Loader(chute.open(dst), 3, num_workers=1, decode={"image": OPS})
    with pytest.raises(chute.FormatError) as err:  # a chute error arrives as itself
        next(iter(loader))
    assert "d.chute: field 'image': sample 1 " in str(err.value)
    dl = chute.dataloader(chute.open(dst), 3, num_workers=0, decode={"image": OPS})
    with pytest.raises(chute.FormatError, match=r"field 'image': sample 1 "):
        next(iter(dl))


def _dataloader_epochs(images: Path, context: str | None, workers: int) -> list[np.ndarray]:
    ds = chute.open(images)
    kw = {} if context is None else {"multiprocessing_context": mp.get_context(context)}
    dl = chute.dataloader(
        ds,
        8,
        seed=5,
        num_workers=workers,
        decode={"image": OPS},
        persistent_workers=workers > 0,
        **kw,
    )
    out = []
    for epoch in (0, 1):
        labels, imgs = epoch_images(dl, epoch)
        assert sorted(labels.tolist()) == list(range(N))
        assert np.array_equal(imgs, expected(ds, labels, 5, epoch))
        out.append(imgs)
    return out


def test_dataloader_decode_fork(images: Path) -> None:
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("no fork here")
    a = _dataloader_epochs(images, "fork", 2)
    b = _dataloader_epochs(images, None, 0)
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x, y)


@pytest.mark.slow
def test_dataloader_decode_spawn(images: Path) -> None:
    _dataloader_epochs(images, "spawn", 1)


def test_dataloader_resume(images: Path) -> None:
    ds = chute.open(images)
    dl = chute.dataloader(ds, 8, seed=5, num_workers=0, decode={"image": OPS})
    dl.set_epoch(3)
    want = [b["image"].clone() for b in dl]
    dl2 = chute.dataloader(ds, 8, seed=5, num_workers=0, decode={"image": OPS})
    dl2.set_epoch(3)
    it = iter(dl2)
    next(it)
    state = dl2.state_dict()
    dl3 = chute.dataloader(ds, 8, seed=5, num_workers=0, decode={"image": OPS})
    dl3.load_state_dict(state)
    rest = [b["image"] for b in dl3]
    for a, b in zip(want[1:], rest, strict=True):
        assert torch.equal(a, b)


def test_normalize_cpu() -> None:
    x = torch.randint(0, 256, (2, 3, 5, 4), dtype=torch.uint8)
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    got = chute.normalize(x, mean, std)
    ref = (x.float() / 255 - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(
        1, 3, 1, 1
    )
    assert got.dtype == torch.float32 and torch.allclose(got, ref, atol=1e-5)
    cl = chute.normalize(x, mean, std, channels_last=True, dtype=torch.bfloat16)
    assert cl.dtype == torch.bfloat16 and cl.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(cl.float(), ref, atol=2e-2)
    with pytest.raises(chute.ArgumentError):
        chute.normalize(x.float())
    with pytest.raises(chute.ArgumentError):
        chute.normalize(x, (0.5,), (0.2,))


def test_first_batch_split_across_threads_gives_the_same_pixels(
    images: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import chute.loader.decode_split as split

    monkeypatch.setattr(split, "FIRST_SPLIT", 3)
    ds = chute.open(images)
    loader = chute.Loader(ds, 40, seed=2, num_workers=1, decode={"image": OPS})
    for epoch in (0, 1):  # each pass splits its first batch (40 images: 3 slices)
        labels, imgs = epoch_images(loader, epoch)
        assert np.array_equal(imgs, expected(ds, labels, 2, epoch))


def test_decode_split_policy() -> None:
    """A pass's first batch is decoded by FIRST_SPLIT threads, each of its last ``workers``
    work items by every worker, the rest by one; a batch is cut into slices of at least
    ``min_per_thread`` images."""
    from chute.loader.decode_split import FIRST_SPLIT, decode_threads, split_cuts

    per_item = [decode_threads(q, 5, 2, first_batch=q == 0) for q in range(5)]
    assert per_item == [FIRST_SPLIT, 1, 1, 2, 2]
    assert [decode_threads(q, 5, 2, first_batch=False) for q in range(5)] == [1, 1, 1, 2, 2]
    assert [decode_threads(q, 3, 1, first_batch=False) for q in range(3)] == [1, 1, 1]
    assert [decode_threads(q, 3, 4, first_batch=False) for q in range(3)] == [4, 4, 4]
    assert split_cuts(10, 3, min_per_thread=2) == [0, 3, 6, 10]
    assert split_cuts(5, 2, min_per_thread=2) == [0, 2, 5]
    assert split_cuts(5, 3, min_per_thread=4) == [0, 5]  # too few images: not split
    assert split_cuts(100, 2) == [0, 50, 100]
    assert split_cuts(31, 4) == [0, 31]


def test_a_split_decode_gives_the_pixels_of_one_decode(images: Path) -> None:
    from chute.image import decode_planned, plan
    from chute.loader.decode_split import decode_split

    ds = chute.open(images)
    idx = np.arange(N)
    enc = ds.gather(idx)["image"]
    h, w = enc.sizes[:, 0].numpy(), enc.sizes[:, 1].numpy()
    p = plan(OPS, h, w, idx, 4, 1)
    one = np.empty((N, 3, 32, 32), np.uint8)
    decode_planned(enc, h, w, p, one, idx)
    for threads in (2, 3):
        split = np.zeros_like(one)
        decode_split(enc, h, w, p, split, idx, threads, min_per_thread=2)
        assert np.array_equal(split, one)


def test_last_batches_split_across_the_workers(images: Path) -> None:
    """With 2 workers a pass's last 2 batches are decoded by 2 threads each (the first by
    FIRST_SPLIT): the same pixels as a decode of the whole epoch."""
    ds = chute.open(images)
    loader = chute.Loader(ds, 10, seed=4, num_workers=2, decode={"image": OPS})
    labels, imgs = epoch_images(loader, 0)  # 5 batches, the last of 5 images
    assert np.array_equal(np.sort(labels), np.arange(N))
    assert np.array_equal(imgs, expected(ds, labels, 4, 0))


def test_sample_transform_gets_images_decoded_as_ds_i(images: Path, tmp_path: Path) -> None:
    ds = chute.open(images)
    # collate_fn=list: the samples as they are (the image sizes differ)
    dl = chute.dataloader(
        ds, 8, shuffle=False, num_workers=0, sample_transform=dict, collate_fn=list
    )
    got = [s for b in dl for s in b]
    assert [int(s["label"]) for s in got] == list(range(N))
    for i, s in enumerate(got):
        assert torch.equal(s["image"], ds[i]["image"]) and s["name"] == f"s{i}"
    from test_image_field import corrupt_second_image

    dst = chute.write(
        tmp_path / "d.chute",
        {"image": [jpeg(seed=i) for i in range(3)]},
        schema={"image": chute.fields.Image()},
    )
    corrupt_second_image(dst)
    dl = chute.dataloader(chute.open(dst), 3, num_workers=0, sample_transform=dict)
    with pytest.raises(chute.FormatError, match=r"field 'image', sample 1"):
        next(iter(dl))


def test_on_error_skip_replaces_counts_and_reports_once(tmp_path: Path) -> None:
    from test_image_field import corrupt_second_image

    dst = chute.write(
        tmp_path / "d.chute",
        {"image": [jpeg(seed=i) for i in range(5)], "label": np.arange(5)},
        schema={"image": chute.fields.Image(), "label": chute.fields.Tensor((), "int64")},
    )
    corrupt_second_image(dst)
    loader = chute.Loader(
        chute.open(dst), 5, shuffle=False, num_workers=1, decode={"image": OPS}, on_error="skip"
    )
    with pytest.warns(UserWarning, match=r"sample 1 does not decode.*replaced it by sample 2"):
        (b,) = list(loader)
    assert b["label"].tolist() == [0, 2, 2, 3, 4]  # the next good sample, whole row
    assert torch.equal(b["image"][1], b["image"][2]) and b["image"].shape[0] == 5
    assert loader.stats().skipped == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reported once
        assert [x["label"].tolist() for x in loader] == [[0, 2, 2, 3, 4]]
    assert loader.stats().skipped == 1
    with pytest.raises(chute.ArgumentError, match="on_error"):
        chute.Loader(chute.open(dst), 5, decode={"image": OPS}, on_error="ignore")
    with pytest.raises(chute.ArgumentError, match="applies to decode="):
        chute.Loader(chute.open(dst), 5, on_error="skip")
