"""What kind of source a path holds, from its suffix, signature and marker files alone.

Two places need to know: ``chute.convert`` (which source reads it) and the reader's
"not a dataset" errors (which ``chute convert`` command to suggest, for ``chute.open("d.h5")``
or ``chute info npydir/``). Sniffing reads a few bytes and names, never imports h5py or zarr
and has no side effect, so the reader can use it without depending on the sources.
"""

from __future__ import annotations

import os
import shlex
import zipfile
from itertools import islice
from pathlib import Path

from . import format as fmt

HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5")
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
ZARR_METADATA = ("zarr.json", ".zgroup", ".zarray")  # v3, v2 group, v2 array
PARQUET_SUFFIXES = (".parquet", ".pq")
ARROW_SUFFIXES = (".arrow", ".feather", ".ipc")
JSONL_SUFFIXES = tuple(f"{s}{c}" for s in (".jsonl", ".ndjson") for c in ("", ".gz", ".zst"))
CSV_SUFFIXES = tuple(f"{s}{c}" for s in (".csv", ".tsv") for c in ("", ".gz", ".zst"))
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz")
HF_MARKERS = ("state.json", "dataset_info.json")  # a datasets.Dataset.save_to_disk folder
HF_DICT_MARKER = "dataset_dict.json"  # a DatasetDict.save_to_disk folder: one split per folder

_MAX_SNIFF = 10_000  # entries of a folder's tree an error message looks through for .npy files
# kind -> how messages name it; the source classes take their ``noun`` from here
NOUNS = {
    "npy": "an .npy file",
    "npz": "an .npz archive",
    "npy_folder": "a folder of .npy files",
    "hdf5": "an HDF5 file",
    "zarr": "a Zarr store",
    "image_folder": "an image folder",
    "parquet": "Parquet",
    "arrow": "an Arrow IPC / Feather file",
    "hf": "a Hugging Face datasets folder",
    "jsonl": "a JSONL file",
    "csv": "a CSV file",
    "webdataset": "WebDataset .tar shards",
}

# torchvision.datasets.folder.IMG_EXTENSIONS
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
_PROBE_FILES = 64  # files looked at per class folder to detect an image folder
_FILE_SUFFIXES = {  # kinds told by their (case-insensitive) file name ending
    "parquet": PARQUET_SUFFIXES,
    "arrow": ARROW_SUFFIXES,
    "jsonl": JSONL_SUFFIXES,
    "csv": CSV_SUFFIXES,
    "webdataset": TAR_SUFFIXES,
}


def source_kind(path: Path, max_entries: int | None = None) -> str | None:
    """The kind of source (a key of :data:`NOUNS`) the existing ``path`` is; None if none.

    Detection is by content where the suffix is not conclusive: the HDF5 signature, Zarr
    metadata at the root, ``.npy`` files in a folder (looked for among at most
    ``max_entries`` entries of its tree, if given: an error message must not walk a home
    folder). A chute dataset (a folder of ``.npy`` files with a manifest) is sniffed as
    ``"npy_folder"``: callers check the manifest first. A folder holding both images in the
    ImageFolder layout and ``.npy`` files is whichever it holds more of (among the files
    looked at): a stray ``features.npy`` beside class folders does not hide the images.
    """
    if path.is_dir():
        return _folder_kind(path, max_entries)
    name = path.name.lower()
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return "npy"
    if suffix == ".npz":
        return "npz"
    for kind, suffixes in _FILE_SUFFIXES.items():
        if name.endswith(suffixes):
            return kind
    if suffix in HDF5_SUFFIXES or is_hdf5(path):
        return "hdf5"
    return "zarr" if is_zarr(path) else None


def _folder_kind(path: Path, max_entries: int | None) -> str | None:
    """A folder's kind: marker files first, then files of one kind at its root (tables and
    shards, which never sit beside the data of another kind), then images or ``.npy`` files
    in its tree, then text tables (a ``labels.csv`` beside class folders is not the data)."""
    if is_zarr(path):
        return "zarr"
    if all((path / m).is_file() for m in HF_MARKERS) or (path / HF_DICT_MARKER).is_file():
        return "hf"
    names = [e.name.lower() for e in islice(os.scandir(path), _PROBE_FILES * 16)]
    for kind in ("parquet", "arrow", "webdataset"):
        if any(n.endswith(_FILE_SUFFIXES[kind]) for n in names):
            return kind
    images = image_layout(path)
    if _has_npy(path, max_entries):
        npy, found = _npy_and_images(path) if images else (1, 0)
        if npy >= found:
            return "npy_folder"
    if images:
        return images
    for kind in ("jsonl", "csv"):
        if any(n.endswith(_FILE_SUFFIXES[kind]) for n in names):
            return kind
    return None


def _npy_and_images(folder: Path) -> tuple[int, int]:
    """(.npy files, image files) among the first files of the tree, hidden entries left out
    (as the image folder source leaves them out)."""
    npy = images = seen = 0
    for _, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for f in files:
            npy += f.endswith(".npy")
            images += not f.startswith(".") and f.lower().endswith(IMAGE_EXTENSIONS)
        seen += len(files)
        if seen >= _MAX_SNIFF:
            break
    return npy, images


def _has_npy(folder: Path, max_entries: int | None) -> bool:
    """Whether the tree under ``folder`` holds a ``.npy`` file (symlinked folders not followed,
    as ``Path.rglob``); False once ``max_entries`` entries were seen without one."""
    seen = 0
    for _, dirs, files in os.walk(folder):
        if any(f.endswith(".npy") for f in files):
            return True
        seen += len(dirs) + len(files)
        if max_entries is not None and seen >= max_entries:
            return False
    return False


def is_hdf5(path: Path) -> bool:
    """True for a file with the HDF5 signature (at offset 0; user blocks are not probed)."""
    with open(path, "rb") as f:
        return f.read(len(HDF5_MAGIC)) == HDF5_MAGIC


def is_zarr(path: Path) -> bool:
    """True for a folder or zip file with Zarr metadata at its root."""
    if path.is_dir():
        return any((path / m).is_file() for m in ZARR_METADATA)
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
    return any(m in names for m in ZARR_METADATA)


def convert_command(path: str | Path) -> str:
    """The ``chute convert SRC DST`` line for ``path``, quoted for the shell (DST: ``.chute``)."""
    dst = Path(path).with_suffix(".chute")
    return f"chute convert {shlex.quote(str(path))} {shlex.quote(str(dst))}"


def not_a_dataset(path: Path) -> str | None:
    """Why the existing ``path`` is not a chute dataset, when it is a file or a source that
    ``chute convert`` reads: the sentence to put in a :class:`DatasetNotFoundError`.

    A folder of ``.npy`` files without a manifest may be a dataset whose write did not finish,
    so its sentence says so before suggesting the conversion. None for a folder that is none
    of these (the caller's own message applies) and for a path that does not exist.
    """
    try:
        kind = source_kind(path, _MAX_SNIFF) if path.exists() else None
    except OSError:  # unreadable: the caller's message applies
        kind = None
    if kind == "npy_folder":
        return (
            f"{path} is not a chute dataset: it has no {fmt.MANIFEST} (an unfinished write "
            f"leaves none); if it is a folder of .npy files, convert it with "
            f"`{convert_command(path)}`"
        )
    if kind is not None:
        command = convert_command(path)
        return f"{path} is {NOUNS[kind]}, not a chute dataset: convert it with `{command}`"
    if path.is_file():
        return f"{path} is a file, not a chute dataset (a folder holding {fmt.MANIFEST})"
    return None


def image_layout(path: Path) -> str | None:
    """``"image_folder"`` when ``path`` holds images as an ImageFolder (class folders holding
    image files, by extension) or as a flat folder (image files at its root); None otherwise.
    Hidden entries do not count. Looks at a few files per folder only."""
    try:
        entries = [e for e in os.scandir(path) if not e.name.startswith(".")]
    except OSError:
        return None
    if any(e.is_file() and e.name.lower().endswith(IMAGE_EXTENSIONS) for e in entries):
        return "image_folder"
    for e in entries:
        if not e.is_dir():
            continue
        for _, _, files in islice(os.walk(e.path), _PROBE_FILES):
            if any(f.lower().endswith(IMAGE_EXTENSIONS) for f in files[:_PROBE_FILES]):
                return "image_folder"
    return None
