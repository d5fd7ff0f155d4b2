"""The chute on-disk format, version 1: the spec, as constants, names and dtypes (``spec``).
It does no I/O and needs no torch; the field kinds a dataset's fields are made of, and the
manifest schema that lists them, are the layer above (:mod:`chute.kinds`).

A dataset is a folder holding ``chute.json`` (the manifest) and plain ``.npy`` files, one set
per part: the root folder itself (part ``"."``) and/or ``part-NNNNN/`` sub-folders. Paths are
never read from the manifest: they are derived from validated field and part names, so a
manifest cannot point outside its folder. ``docs/format.md`` is the prose version.
"""

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

__all__ = [
    "CHECKSUM",
    "DTYPE_NAMES",
    "FIELD_NAME",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MANIFEST",
    "MAX_NDIM",
    "MAX_SAMPLES",
    "OFFSETS_DTYPE",
    "PART_NAME",
    "ROOT_PART",
    "SHAPES_DTYPE",
    "check_field_name",
    "dtype_name",
    "storage_dtype",
]
