"""The chute on-disk format, version 1: the spec, as constants, dtypes, field kinds
(``fields``) and the manifest schema (``schema``). No I/O, no torch.

A dataset is a folder holding ``chute.json`` (the manifest) and plain ``.npy`` files, one set
per part: the root folder itself (part ``"."``) and/or ``part-NNNNN/`` sub-folders. Paths are
never read from the manifest: they are derived from validated field and part names, so a
manifest cannot point outside its folder. ``docs/format.md`` is the prose version.
"""

from .fields import (
    CHECKSUM,
    DTYPE_NAMES,
    FIELD_NAME,
    FORMAT_NAME,
    FORMAT_VERSION,
    IMAGE_CODECS,
    MANIFEST,
    MAX_NDIM,
    MAX_SAMPLES,
    OFFSETS_DTYPE,
    PART_NAME,
    ROOT_PART,
    SHAPES_DTYPE,
    Bytes,
    Field,
    Image,
    Ragged,
    String,
    Tensor,
    VarField,
    check_field_name,
    dtype_name,
    expected_shape,
    field_files,
    field_from_json,
    field_to_json,
    role_dtype,
    row_nbytes,
    storage_dtype,
)
from .schema import (
    FileInfo,
    Manifest,
    PartInfo,
    parse_manifest,
)

__all__ = [
    "CHECKSUM",
    "DTYPE_NAMES",
    "FIELD_NAME",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "IMAGE_CODECS",
    "MANIFEST",
    "MAX_NDIM",
    "MAX_SAMPLES",
    "OFFSETS_DTYPE",
    "PART_NAME",
    "ROOT_PART",
    "SHAPES_DTYPE",
    "Bytes",
    "Field",
    "FileInfo",
    "Image",
    "Manifest",
    "PartInfo",
    "Ragged",
    "String",
    "Tensor",
    "VarField",
    "check_field_name",
    "dtype_name",
    "expected_shape",
    "field_files",
    "field_from_json",
    "field_to_json",
    "parse_manifest",
    "role_dtype",
    "row_nbytes",
    "storage_dtype",
]
