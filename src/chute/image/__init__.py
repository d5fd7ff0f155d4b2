"""Encoded images: store JPEG bytes plus height/width per sample, convert ImageFolder trees,
and decode batches with crops planned before decoding (DCT-scaled, GIL-free, into a
preallocated batch). Needs ``pip install 'chute[image]'`` (simplejpeg, Pillow).

- :mod:`.codec`: ``encode_image``, ``decode_image``, ``jpeg_size``
- :mod:`.ops`: ``RandomResizedCrop``, ``CenterCrop``, ``Resize``, ``RandomHorizontalFlip``,
  ``plan``
- :mod:`.decode`: ``decode_batch``, ``decode_planned``
- :mod:`.folder`: ``ImageFolder``, ``from_image_folder``
"""

from .codec import decode_image, encode_image, is_jpeg, jpeg_size
from .decode import as_buffers, dct_scales, decode_batch, decode_planned, plan_slice
from .folder import IMAGE_EXTENSIONS, ImageFolder, from_image_folder
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

__all__ = [
    "IMAGE_EXTENSIONS",
    "CenterCrop",
    "DecodeOp",
    "ImageFolder",
    "Plan",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "as_buffers",
    "dct_scales",
    "decode_batch",
    "decode_image",
    "decode_planned",
    "encode_image",
    "from_image_folder",
    "is_jpeg",
    "jpeg_size",
    "plan",
    "plan_slice",
    "uniforms",
]
