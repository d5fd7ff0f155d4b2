"""Images decoded on the device side (chute/image/on_device.py): ``device=`` on the geometric
op plans in the loader's workers and decodes in ``chute.to_device``. The pipeline is tested on
the CPU (``device="cpu"``: chute's decoder, torch's crop/resize/flip); the CUDA test (nvjpeg
through torchvision) runs only where both exist."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("simplejpeg")
import torch
from _image_files import jpeg
from test_image_loader import OPS, N, epoch_images, images

import chute
from chute.image.on_device import DeviceImages

__all__ = ["images"]  # fixture

ON_CPU = [chute.RandomResizedCrop(32, scale=(0.1, 1.0), device="cpu"), chute.RandomHorizontalFlip()]


def device_epoch(loader, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """One epoch through chute.to_device(loader, "cpu"): the planned images decoded."""
    loader.set_epoch(epoch)
    labels, imgs = [], []
    for b in chute.to_device(loader, "cpu"):
        assert b["image"].dtype == torch.uint8 and b["image"].shape[1:] == (3, 32, 32)
        labels.append(b["label"].numpy().copy())
        imgs.append(b["image"].numpy().copy())
    return np.concatenate(labels), np.concatenate(imgs)


def test_planned_in_the_loader_decoded_by_to_device_close_to_the_cpu_path(images: Path) -> None:
    """Same boxes and flips as the CPU path (same seed, epoch, index); the pixels differ by
    the resize (torch's antialiased bilinear on the full decode vs PIL's on a DCT-scaled one)
    and the box rounded to whole pixels: bounded on average and at the worst pixel."""
    ds = chute.open(images)
    planned = next(iter(chute.Loader(ds, 8, decode={"image": ON_CPU}, num_workers=1)))
    assert isinstance(planned["image"], DeviceImages) and len(planned["image"]) == 8
    assert "8 images to decode on 'cpu' at 32x32" in repr(planned["image"])
    cpu = chute.Loader(ds, 8, decode={"image": OPS}, seed=3, num_workers=2)
    dev = chute.Loader(ds, 8, decode={"image": ON_CPU}, seed=3, num_workers=2)
    for epoch in (0, 1):
        labels_a, a = epoch_images(cpu, epoch)
        labels_b, b = device_epoch(dev, epoch)
        assert np.array_equal(labels_a, labels_b) and sorted(labels_b) == list(range(N))
        diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
        assert diff.mean() < 1 and diff.max() <= 12, (diff.mean(), diff.max())  # 0.2, 3 here
    # the same run gives the same pixels; a flip is the mirror image of no flip
    assert np.array_equal(device_epoch(dev, 1)[1], b)
    d = DeviceImages(*_planned_parts(ds, flips=False))
    f = DeviceImages(*_planned_parts(ds, flips=True))
    assert torch.equal(d.decode().flip(-1), f.decode())


def _planned_parts(ds: chute.Dataset, flips: bool) -> tuple:
    enc = ds.gather(np.arange(4))["image"]
    sizes = enc.sizes.numpy()
    boxes = np.stack([np.zeros(4), np.zeros(4), sizes[:, 1], sizes[:, 0]], axis=1)
    return (enc.values, enc.offsets, sizes, boxes, np.full(4, flips), (16, 16), "cpu")


@pytest.mark.slow  # worker processes
def test_resume_and_dataloader_processes(images: Path) -> None:
    ds = chute.open(images)
    full = device_epoch(chute.Loader(ds, 8, decode={"image": ON_CPU}, seed=5), 2)
    loader = chute.Loader(ds, 8, decode={"image": ON_CPU}, seed=5)
    loader.set_epoch(2)
    it = iter(chute.to_device(loader, "cpu"))
    first = [next(it)["image"].numpy().copy() for _ in range(2)]
    state = loader.state_dict()
    again = chute.Loader(ds, 8, decode={"image": ON_CPU}, seed=5)
    again.load_state_dict(state)
    rest = [b["image"].numpy() for b in chute.to_device(again, "cpu")]
    assert np.array_equal(np.concatenate(first + rest), full[1])
    dl = chute.dataloader(
        ds,
        8,
        decode={"image": ON_CPU},
        seed=5,
        num_workers=2,
        multiprocessing_context=mp.get_context("spawn"),
    )
    dl.set_epoch(2)
    got = np.concatenate([b["image"].numpy() for b in chute.to_device(dl, "cpu")])
    assert np.array_equal(got, full[1])  # planned in worker processes, decoded here


def test_corrupt_image_and_bad_devices(tmp_path: Path, images: Path) -> None:
    from test_image_field import corrupt_second_image

    dst = chute.write(
        tmp_path / "d.chute",
        {"image": [jpeg(seed=i) for i in range(3)]},
        schema={"image": chute.fields.Image()},
    )
    corrupt_second_image(dst)
    loader = chute.Loader(chute.open(dst), 3, decode={"image": ON_CPU}, num_workers=1)
    with pytest.raises(chute.FormatError, match=r"d.chute: field 'image': sample 1 "):
        next(iter(chute.to_device(loader, "cpu")))
    ds = chute.open(images)
    with pytest.raises(chute.ArgumentValueError, match="'cuda' or 'cpu'"):
        chute.Loader(ds, 8, decode={"image": chute.CenterCrop(32, device="meta")})
    with pytest.raises(chute.ArgumentValueError, match="device must be"):
        chute.Loader(ds, 8, decode={"image": chute.Resize(32, device="nope")})
    if not torch.cuda.is_available():
        with pytest.raises(chute.ArgumentValueError, match="no CUDA device"):
            chute.Loader(ds, 8, decode={"image": chute.RandomResizedCrop(32, device="cuda")})
    sample = chute.loader.decode.Decoded(ds, {"image": ON_CPU}, seed=0)[3]
    assert sample["image"].shape == (3, 32, 32)  # ds[i] of the view decodes it


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_nvjpeg_on_cuda_close_to_the_cpu_decode(images: Path) -> None:
    pytest.importorskip("torchvision")
    ds = chute.open(images)
    on_cuda = [
        chute.RandomResizedCrop(32, scale=(0.1, 1.0), device="cuda"),
        chute.RandomHorizontalFlip(),
    ]
    cuda = chute.Loader(ds, 8, decode={"image": on_cuda}, seed=3, pin_memory=True)
    cpu = chute.Loader(ds, 8, decode={"image": ON_CPU}, seed=3)
    got = [b["image"] for b in chute.to_device(cuda, "cuda")]
    assert got[0].device.type == "cuda" and got[0].dtype == torch.uint8
    want = [b["image"] for b in chute.to_device(cpu, "cpu")]
    a = torch.cat(got).cpu().to(torch.int16)
    b = torch.cat(want).to(torch.int16)
    assert (a - b).abs().float().mean() < 2  # nvjpeg's IDCT vs libjpeg-turbo's
