"""Encoded images: store JPEG bytes plus height/width per sample, convert ImageFolder trees,
and decode batches with crops planned before decoding (DCT-scaled, GIL-free, into a
preallocated batch). Needs ``pip install 'chute[image]'`` (simplejpeg, Pillow).

- :mod:`.codec`: ``encode_image``, ``decode_image``, ``jpeg_size``
- :mod:`.ops`: ``RandomResizedCrop``, ``CenterCrop``, ``Resize``, ``RandomHorizontalFlip``,
  ``plan``; :mod:`.placing`: ``RandomCrop``, ``ResizePad``, ``ScaleJitter``, ``ZoomOut``,
  ``RandomIoUCrop`` (detection recipes: padding, scale jitter, crops around the boxes);
  :mod:`.scales`: ``MultiScale`` (the sizing op at a size drawn per batch)
- :mod:`.batch_decode`: ``decode_batch``, ``decode_planned`` (``scaled_boxes``: where it decodes)
- :mod:`.augment`: ``ColorJitter``, ``Grayscale``, ``GaussianBlur``, ``RandomErasing`` (in
  ``decode=`` lists); :mod:`.mixing`: ``MixUp``, ``CutMix``; :mod:`.mosaic`: ``Mosaic``
  (``transform=``)
- :mod:`.randaugment`: ``RandAugment``, ``TrivialAugmentWide`` (in ``decode=`` lists);
  :mod:`.warps`: their shears, translations and rotations, for the image and its followers
- :mod:`.follow`: ``Follow``, ``Geometry`` (fields tied to an image's crop, flip and
  warps; masks by nearest), ``View`` (the image decoded again with ops of its own: multi-crop)
- :mod:`.kernels`: the compiled per-pixel kernels of the augmentations (numba), which check
  no index; :mod:`.checks` checks what reaches them
- :mod:`.boxes`: ``transform_boxes``, ``transform_points`` (into a decoded image's frame)
- :mod:`.normalize`: ``normalize`` (device side, after ``chute.to_device``)
- :mod:`.on_device`: ``DeviceImages``, decoded by ``chute.to_device`` (ops with ``device=``)

The field kind is :class:`chute.fields.Image` (``chute/kinds/image.py``); its gathered
batches are :class:`chute.EncodedImages` (``chute/columns/encoded_images.py``); ``decode=`` in
the loaders is ``chute/loader/decode.py``; ImageFolder trees are read by
``chute/sources/image_folder.py`` (:func:`chute.from_image_folder`, ``chute convert``).
"""

from .augment import ColorJitter, GaussianBlur, Grayscale, RandomErasing
from .batch_decode import (
    ScaledBoxes,
    as_buffers,
    dct_scales,
    decode_batch,
    decode_planned,
    plan_slice,
    scaled_boxes,
)
from .boxes import transform_boxes, transform_points
from .codec import EncodedImage, decode_image, encode_image, is_jpeg, jpeg_size
from .follow import GEOMETRY_COLUMNS, Follow, Geometry, View
from .masks import resize_nearest
from .mixing import BatchTransform, CutMix, MixUp
from .mosaic import Mosaic
from .normalize import normalize
from .on_device import DeviceImages
from .ops import (
    CenterCrop,
    DecodeOp,
    Plan,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    plan,
    uniforms,
)
from .placing import RandomCrop, RandomIoUCrop, ResizePad, ScaleJitter, ZoomOut
from .randaugment import RandAugment, TrivialAugmentWide
from .scales import MultiScale

__all__ = [
    "GEOMETRY_COLUMNS",
    "BatchTransform",
    "CenterCrop",
    "ColorJitter",
    "CutMix",
    "DecodeOp",
    "DeviceImages",
    "EncodedImage",
    "Follow",
    "GaussianBlur",
    "Geometry",
    "Grayscale",
    "MixUp",
    "Mosaic",
    "MultiScale",
    "Plan",
    "RandAugment",
    "RandomCrop",
    "RandomErasing",
    "RandomHorizontalFlip",
    "RandomIoUCrop",
    "RandomResizedCrop",
    "Resize",
    "ResizePad",
    "ScaleJitter",
    "ScaledBoxes",
    "TrivialAugmentWide",
    "View",
    "ZoomOut",
    "as_buffers",
    "dct_scales",
    "decode_batch",
    "decode_image",
    "decode_planned",
    "encode_image",
    "is_jpeg",
    "jpeg_size",
    "normalize",
    "plan",
    "plan_slice",
    "resize_nearest",
    "scaled_boxes",
    "transform_boxes",
    "transform_points",
    "uniforms",
]
