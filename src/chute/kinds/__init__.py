"""The field kinds a dataset's fields are made of, one module each (``tensor``, ``ragged``,
``blob``, ``image``, ``mask``) on one contract (``kind``), behind one registry (``registry``),
and the manifest schema that lists a dataset's fields and parts (``schema``).

The kinds stand on the array code of :mod:`chute.columns` (gathers, slices, value checks and
conversions), which stands on the spec (:mod:`chute.format`); the reader, writer, sources and
loaders above ask a field's kind what to do. ``docs/field_kinds.md`` says how a kind is added.
"""

from .blob import Bytes, String
from .image import IMAGE_CODECS, Image
from .kind import FieldKind, VarKind
from .mask import MASK_DTYPES, Mask
from .ragged import Ragged
from .registry import (
    KINDS,
    Field,
    empty_buffers,
    field_from_json,
    field_to_json,
    fixed_fields,
    image_field,
    is_field,
    merge_fields,
)
from .schema import FileInfo, Manifest, PartInfo, parse_manifest
from .tensor import Tensor

__all__ = [
    "IMAGE_CODECS",
    "KINDS",
    "MASK_DTYPES",
    "Bytes",
    "Field",
    "FieldKind",
    "FileInfo",
    "Image",
    "Manifest",
    "Mask",
    "PartInfo",
    "Ragged",
    "String",
    "Tensor",
    "VarKind",
    "empty_buffers",
    "field_from_json",
    "field_to_json",
    "fixed_fields",
    "image_field",
    "is_field",
    "merge_fields",
    "parse_manifest",
]
