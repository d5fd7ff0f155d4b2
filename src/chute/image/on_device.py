"""Images decoded on the device: ``decode={"image": chute.RandomResizedCrop(160, device="cuda")}``.

With ``device=`` on the geometric op, the loaders' workers plan each image's crop box and flip
exactly as for the CPU path (the same ``(seed, epoch, index)`` gives the same box) but do not
decode: the field arrives as :class:`DeviceImages` (the JPEG bytes, boxes, flips), and
:func:`chute.to_device` decodes it on that device, on its side stream: on CUDA, nvjpeg through
``torchvision.io.decode_jpeg(..., device="cuda")`` for the whole batch in one call, then per
image the crop, an antialiased bilinear resize and the flip as torch ops on the GPU. Without
``to_device``, ``batch["image"].decode()`` does the same. ``device="cpu"`` runs the same
pipeline with chute's CPU decoder (simplejpeg, full scale): the path's CPU test, and a way to
move decoding out of the loader's workers.

Pixels. The boxes are the CPU path's, rounded to whole pixels; the resize is torch's
antialiased bilinear (``F.interpolate(antialias=True)``) of the full-scale decode, as the
CPU path does for whole-pixel boxes at full scale; where it decodes at a DCT scale or the box
is fractional, the CPU path resizes with PIL. They agree to 0.2 levels on average (at most 3
in 256) on the tests' images, not bit for bit (``tests/image/test_on_device.py`` bounds it),
and nvjpeg's IDCT may differ from libjpeg-turbo's by a level or two.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..device import register_batch_hook
from ..errors import ArgumentValueError, FormatError, MissingDependencyError
from .codec import check_size, decode_image

__all__ = ["DeviceImages", "check_device", "decode_images"]


def _torchvision_io() -> Any:
    """``torchvision.io`` (nvjpeg's decoder), or how to install it: not an extra of chute,
    as its build must match the installed torch."""
    try:
        import torchvision.io
    except (ImportError, RuntimeError, OSError) as exc:  # missing, or built for another torch
        raise MissingDependencyError(
            f"decoding JPEGs on CUDA (nvjpeg) needs torchvision, built for torch "
            f"{torch.__version__}: pip install torchvision (the release that matches your "
            f"torch), or leave device=None to decode in the loader's threads ({exc})"
        ) from None
    return torchvision.io


class DeviceImages:
    """An image field planned but not decoded: JPEG bytes (``values``, ``offsets``: sample
    ``i`` is ``values[offsets[i]:offsets[i+1]]``), each image's stored ``sizes`` (B, 2), crop
    ``boxes`` (B, 4) ``(left, top, right, bottom)`` in stored pixels, ``flips`` (B,), the
    output ``size`` (H, W), the ``device`` to decode on, and for errors ``where`` (dataset and
    field) and the samples' ``indices``. :meth:`decode` gives uint8 ``(B, 3, H, W)``."""

    def __init__(
        self,
        values: torch.Tensor,
        offsets: torch.Tensor,
        sizes: np.ndarray,
        boxes: np.ndarray,
        flips: np.ndarray,
        size: tuple[int, int],
        device: str,
        where: str = "",
        indices: np.ndarray | None = None,
    ) -> None:
        self.values, self.offsets, self.sizes = values, offsets, sizes
        self.boxes, self.flips, self.size, self.device = boxes, flips, size, device
        self.where = where
        self.indices = np.arange(len(boxes)) if indices is None else indices

    def __len__(self) -> int:
        return len(self.boxes)

    def pin_memory(self) -> DeviceImages:
        """As it is: the bytes stay on the host (nvjpeg reads host buffers)."""
        return self

    def decode(self, device: str | torch.device | None = None) -> torch.Tensor:
        """The batch decoded on ``device`` (default: the op's), uint8 ``(B, 3, H, W)``."""
        dev = torch.device(self.device if device is None else device)
        o = self.offsets.tolist()
        datas = [self.values[o[i] : o[i + 1]] for i in range(len(self))]
        for i, d in enumerate(datas):  # headers against stored sizes, before any allocation
            try:
                check_size(d.numpy(), (int(self.sizes[i][0]), int(self.sizes[i][1])))
            except FormatError as exc:
                raise FormatError(f"{self.where}: sample {int(self.indices[i])} {exc}") from None
        if dev.type == "cuda":
            io = _torchvision_io()
            try:
                images = io.decode_jpeg(datas, mode=io.ImageReadMode.RGB, device=dev)
            except RuntimeError as exc:
                raise FormatError(
                    f"{self.where}: a JPEG of samples {self.indices[:8].tolist()} did not "
                    f"decode on {dev} ({exc}); decode them on the CPU (device=None) to find it"
                ) from None
        else:
            images = [self._cpu_decode(i, d) for i, d in enumerate(datas)]
        return self._crops(images, dev)

    def _cpu_decode(self, i: int, data: torch.Tensor) -> torch.Tensor:
        try:
            return torch.from_numpy(decode_image(data.numpy()))
        except FormatError as exc:
            raise FormatError(f"{self.where}: sample {int(self.indices[i])} {exc}") from None

    def _crops(self, images: list[torch.Tensor], dev: torch.device) -> torch.Tensor:
        oh, ow = self.size
        out = torch.empty((len(images), 3, oh, ow), dtype=torch.uint8, device=dev)
        boxes = np.rint(self.boxes).astype(np.int64)
        for i, img in enumerate(images):
            h, w = (int(s) for s in img.shape[-2:])
            if (h, w) != tuple(int(s) for s in self.sizes[i]):
                raise FormatError(
                    f"{self.where}: sample {int(self.indices[i])} decodes to {h}x{w} pixels "
                    f"but {self.sizes[i][0]}x{self.sizes[i][1]} are stored; the dataset is "
                    "corrupt"
                )
            left, top, right, bottom = boxes[i].tolist()
            left, top = min(max(left, 0), w - 1), min(max(top, 0), h - 1)
            right, bottom = min(max(right, left + 1), w), min(max(bottom, top + 1), h)
            x = img[:, top:bottom, left:right].unsqueeze(0).float()
            y = torch.nn.functional.interpolate(
                x, size=(oh, ow), mode="bilinear", antialias=True, align_corners=False
            )[0]
            if self.flips[i]:
                y = y.flip(-1)
            out[i].copy_(y.round_().clamp_(0, 255))
        return out

    def __repr__(self) -> str:
        return (
            f"chute.image.DeviceImages({len(self)} images to decode on {self.device!r} at "
            f"{self.size[0]}x{self.size[1]}, {len(self.values):,} bytes)"
        )


def check_device(device: Any, who: str) -> str | None:
    """``device`` of a decode op, checked: None (decode in the loader's workers), or a device
    this machine has; CUDA also needs torchvision, imported here so a missing one is an error
    when the loader is made, not at the first batch."""
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ArgumentValueError(
            f"{who}: device must be e.g. 'cuda' or 'cpu', got {device!r} ({exc})"
        ) from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ArgumentValueError(
            f"{who}: device={device!r}, but this machine has no CUDA device; leave device=None "
            "to decode in the loader's worker threads"
        )
    if dev.type not in ("cuda", "cpu"):
        raise ArgumentValueError(f"{who}: images decode on 'cuda' or 'cpu', not {device!r}")
    if dev.type == "cuda":
        _torchvision_io()
    return str(dev)


def decode_images(batch: Any, device: torch.device | None = None) -> tuple[Any, list[torch.Tensor]]:
    """``batch`` (a dict) with each :class:`DeviceImages` decoded (on its own device, or on
    ``device`` when given), and the tensors decoding made; other batches as they are."""
    if not isinstance(batch, dict) or not any(isinstance(v, DeviceImages) for v in batch.values()):
        return batch, []
    made: list[torch.Tensor] = []
    out = {}
    for k, v in batch.items():
        if isinstance(v, DeviceImages):
            v = v.decode(device)
            made.append(v)
        out[k] = v
    return out, made


register_batch_hook(decode_images)  # to_device decodes them (chute/device.py)
