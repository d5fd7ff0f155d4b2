"""torchvision's ImageFolder layout (``root/CLASS/.../file.jpg``) -> chute samples.

:class:`ImageFolder` scans the folder (class names sorted, files sorted, files that are not
images by extension listed apart) and, iterated, yields ``{"image": EncodedImage, "label":
int, "path": str}`` per image, encoded with :func:`chute.image.encode_image` in a pool of
threads (PIL and simplejpeg release the GIL), in file order, with a progress bar: samples a
:class:`chute.Writer` with a :class:`chute.Image` field stores as they are.
:func:`from_image_folder` writes them.

A file that cannot be decoded raises :class:`chute.SourceError` naming it
(``on_error="raise"``), or is left out and recorded in ``skipped`` (``on_error="skip"``).
Symlinked folders are followed, each real folder once: a symlink loop ends the walk there.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .. import format as fmt
from ..errors import ArgumentError, ChuteError, DatasetNotFoundError, SourceError
from ..image.codec import EncodedImage, encode_image
from ..sniff import IMAGE_EXTENSIONS
from ..writer.writer import Writer

__all__ = ["IMAGE_EXTENSIONS", "ImageFolder", "from_image_folder"]


class ImageFolder:
    """The images of an ImageFolder tree, encoded for storage when iterated.

    ``classes``: sorted class folder names (label ``k`` is ``classes[k]``); ``files``:
    ``(relative path, label)`` in order; ``ignored``: relative paths of files that are not
    images by extension (never read); ``skipped``: ``(relative path, reason)`` of images that
    failed to decode, filled while iterating with ``on_error="skip"``.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        max_side: int | None = None,
        quality: int = 90,
        num_workers: int | None = None,
        on_error: str = "raise",
        progress: bool = True,
    ):
        if on_error not in ("raise", "skip"):
            raise ArgumentError(f'on_error must be "raise" or "skip", got {on_error!r}')
        if num_workers is not None and (type(num_workers) is not int or num_workers < 0):
            raise ArgumentError(f"num_workers must be an int >= 0 or None, got {num_workers!r}")
        if max_side is not None and (type(max_side) is not int or max_side < 1):
            raise ArgumentError(f"max_side must be a positive int or None, got {max_side!r}")
        if type(quality) is not int or not 1 <= quality <= 100:
            raise ArgumentError(f"quality must be an int in 1..100, got {quality!r}")
        self.root = Path(root)
        if not self.root.is_dir():
            raise DatasetNotFoundError(f"{self.root}: no such folder")
        self.max_side, self.quality = max_side, quality
        self.num_workers = (os.cpu_count() or 1) if num_workers is None else num_workers
        self.on_error, self.progress = on_error, progress
        self.classes = sorted(e.name for e in os.scandir(self.root) if e.is_dir())
        if not self.classes:
            raise SourceError(f"{self.root}: no class folders (an ImageFolder is root/CLASS/file)")
        self.files: list[tuple[str, int]] = []
        self.ignored: list[str] = []
        walked: set[tuple[int, int]] = set()  # (device, inode): each folder once, so
        for label, name in enumerate(self.classes):  # symlink loops end
            for dirpath, dirnames, filenames in os.walk(self.root / name, followlinks=True):
                st = os.stat(dirpath)
                if (st.st_dev, st.st_ino) in walked:
                    dirnames.clear()
                    continue
                walked.add((st.st_dev, st.st_ino))
                dirnames.sort()
                for f in sorted(filenames):
                    rel = Path(dirpath, f).relative_to(self.root).as_posix()
                    if f.lower().endswith(IMAGE_EXTENSIONS):
                        self.files.append((rel, label))
                    else:
                        self.ignored.append(rel)
        self.skipped: list[tuple[str, str]] = []

    def __len__(self) -> int:
        return len(self.files)

    def _encode(self, rel: str) -> EncodedImage | str:
        """Encoded image, or the reason it failed (a string) when skipping."""
        path = self.root / rel
        try:
            return encode_image(path.read_bytes(), self.max_side, self.quality)
        except (ChuteError, OSError) as exc:
            if self.on_error == "skip":
                return f"{type(exc).__name__}: {exc}"
            raise SourceError(
                f"{path}: {exc}; fix or remove the file, or pass on_error='skip' to leave it "
                "out (it is then listed in the metadata)"
            ) from None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        from tqdm.auto import tqdm

        self.skipped = []
        bar = tqdm(total=len(self.files), unit=" images", disable=not self.progress)
        with bar:
            for (rel, label), res in zip(self.files, self._results(), strict=True):
                bar.update(1)
                if isinstance(res, str):
                    self.skipped.append((rel, res))
                    continue
                yield {"image": res, "label": label, "path": rel}

    def _results(self) -> Iterator[EncodedImage | str]:
        """Encoded files in order, at most ``4 * num_workers`` in flight (bounded memory)."""
        if self.num_workers == 0:
            yield from (self._encode(rel) for rel, _ in self.files)
            return
        with ThreadPoolExecutor(self.num_workers, thread_name_prefix="chute-image") as ex:
            pending: deque[Future[Any]] = deque()
            todo = iter(self.files)
            try:
                for rel, _ in todo:
                    pending.append(ex.submit(self._encode, rel))
                    if len(pending) >= 4 * self.num_workers:
                        yield pending.popleft().result()
                while pending:
                    yield pending.popleft().result()
            finally:
                for f in pending:
                    f.cancel()


def from_image_folder(
    root: str | os.PathLike,
    dst: str | os.PathLike,
    max_side: int | None = None,
    quality: int = 90,
    num_workers: int | None = None,
    on_error: str = "raise",
    *,
    overwrite: bool = False,
    progress: bool = True,
    batch_size: int = 256,
) -> Path:
    """Convert an ImageFolder tree (``root/CLASS/.../file.jpg``) to a chute dataset at ``dst``.

    Fields: ``image`` (:class:`chute.Image`: JPEGs within ``max_side`` kept byte for byte,
    others converted to RGB, shrunk to ``max_side`` and encoded at ``quality``, see
    :func:`chute.image.encode_image`), ``label`` (int64, the class's position in the sorted
    class folders), ``path`` (the file's path relative to ``root``). Encoded in
    ``num_workers`` threads (default: one per CPU). Metadata: ``classes`` (label -> class
    name), ``skipped`` (files left out with ``on_error="skip"``, with the reason),
    ``ignored`` (files that are not images by extension). A file that fails to decode raises
    :class:`chute.SourceError` naming it (``on_error="raise"``); nothing is left at ``dst``.
    """
    import numpy as np

    folder = ImageFolder(root, max_side, quality, num_workers, on_error, progress)
    schema: dict[str, Any] = {
        "image": fmt.Image(max_side, quality),
        "label": fmt.Tensor((), "int64"),
        "path": fmt.String(),
    }
    meta = {"classes": folder.classes, "ignored": folder.ignored}
    with Writer(dst, schema, overwrite=overwrite, metadata=meta) as w:
        batch: list[dict[str, Any]] = []
        for sample in folder:
            batch.append(sample)
            if len(batch) == batch_size:
                w.extend(_columns(batch, np))
                batch = []
        if batch:
            w.extend(_columns(batch, np))
        w.metadata["skipped"] = [{"path": p, "reason": r} for p, r in folder.skipped]
    return Path(dst)


def _columns(batch: list[dict[str, Any]], np: Any) -> dict[str, Any]:
    return {
        "image": [s["image"] for s in batch],
        "label": np.array([s["label"] for s in batch], np.int64),
        "path": [s["path"] for s in batch],
    }
