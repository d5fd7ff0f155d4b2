"""The chute on-disk format, version 1: the spec, as constants and dtypes (``spec``), the field
kinds, one module each (``tensor``, ``ragged``, ``blob``, ``image``) behind one registry
(``kinds``) and one contract (``kind``), and the manifest schema (``schema``). The spec does no
I/O and needs no torch; a kind's reading and writing methods import the reader and writer when
called.

A dataset is a folder holding ``chute.json`` (the manifest) and plain ``.npy`` files, one set
per part: the root folder itself (part ``"."``) and/or ``part-NNNNN/`` sub-folders. Paths are
never read from the manifest: they are derived from validated field and part names, so a
manifest cannot point outside its folder. ``docs/format.md`` is the prose version.
"""

from .blob import Bytes, String
from .image import IMAGE_CODECS, Image
from .kind import FieldKind, VarKind
from .kinds import (
    KINDS,
    Field,
    field_from_json,
    field_to_json,
    fixed_fields,
    image_field,
    is_field,
    merge_fields,
)
from .mask import MASK_DTYPES, Mask
from .ragged import Ragged
from .schema import (
    FileInfo,
    Manifest,
    PartInfo,
    parse_manifest,
)
from .spec import (
    CHECKSUM,
    DTYPE_NAMES,
    FIELD_NAME,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    MAX_NDIM,
    MAX_SAMPLES,
    OFFSETS_DTYPE,
    PART_NAME,
    ROOT_PART,
    SHAPES_DTYPE,
    check_field_name,
    dtype_name,
    storage_dtype,
)
from .tensor import Tensor

__all__ = [
    "CHECKSUM",
    "DTYPE_NAMES",
    "FIELD_NAME",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "IMAGE_CODECS",
    "KINDS",
    "MANIFEST",
    "MASK_DTYPES",
    "MAX_NDIM",
    "MAX_SAMPLES",
    "OFFSETS_DTYPE",
    "PART_NAME",
    "ROOT_PART",
    "SHAPES_DTYPE",
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
    "check_field_name",
    "dtype_name",
    "field_from_json",
    "field_to_json",
    "fixed_fields",
    "image_field",
    "is_field",
    "merge_fields",
    "parse_manifest",
    "storage_dtype",
]
