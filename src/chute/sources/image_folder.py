"""torchvision's ImageFolder layout (``root/CLASS/.../file.jpg``) -> chute samples.

:class:`ImageFolder` scans the folder as torchvision's ``ImageFolder`` does (class names
sorted, each class's tree walked in ``sorted(os.walk(...))`` order, files sorted, image
extensions matched case-insensitively), so sample ``i`` is torchvision's sample ``i`` and
index-based splits carry over. Two differences, both listed in ``ignored``: hidden files and
folders (names starting with ``.``, e.g. ``.ipynb_checkpoints``, macOS ``._x.jpg``) are left
out, and files that are not images by extension are never read. A class folder with no image
is refused (torchvision raises ``FileNotFoundError``) unless ``allow_empty=True``: it would
shift no label but would hold no sample. A folder with images at its root is a flat folder of
images (torchvision would ignore those): every image in its tree, in the same order, no label.

Iterated, it yields ``{"image": EncodedImage, "label": int, "path": str}`` per image (no
``label`` for a flat folder), encoded with :func:`chute.image.encode_image` in a pool of
threads (PIL and simplejpeg release the GIL), in file order, with a progress bar: samples a
:class:`chute.Writer` with a :class:`chute.fields.Image` field stores as they are.
:func:`from_image_folder` writes them.

A file that cannot be decoded raises :class:`chute.SourceError` naming it
(``on_error="raise"``), or is left out and recorded in ``skipped`` (``on_error="skip"``).
Symlinked folders are followed, each real folder once: a symlink loop ends the walk there.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..columns.source_images import check_on_error, encode
from ..errors import ArgumentError, DatasetNotFoundError, SourceError
from ..image.codec import EncodedImage
from ..sniff import IMAGE_EXTENSIONS

__all__ = ["IMAGE_EXTENSIONS", "ImageFolder"]


class ImageFolder:
    """The images of an ImageFolder tree, encoded for storage when iterated.

    ``classes``: sorted class folder names (label ``k`` is ``classes[k]``; empty for a flat
    folder), ``class_to_idx`` as torchvision's; ``files``: ``(relative path, label)`` in order
    (label -1 in a flat folder); ``ignored``: relative paths of hidden entries (folders end in
    ``/``) and of files that are not images by extension (never read); ``skipped``:
    ``(relative path, reason)`` of images that failed to decode, filled while iterating with
    ``on_error="skip"``. ``samples`` (``(path, label)``) and ``classes`` replace the scan: a
    torchvision ``DatasetFolder``'s lists, taken as they are.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        max_side: int | None = None,
        quality: int = 90,
        num_workers: int | None = None,
        on_error: str = "raise",
        progress: bool = True,
        allow_empty: bool = False,
        samples: Sequence[tuple[str, int]] | None = None,
        classes: Sequence[str] | None = None,
    ):
        check_on_error(on_error)
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
        self.ignored: list[str] = []
        if samples is None:
            self.classes, self.files = self._scan(allow_empty)
        else:  # a torchvision DatasetFolder's own list: its order and labels, paths kept
            self.classes, self.files = (
                list(classes or []),
                [_relative(p, self.root, y) for p, y in samples],
            )
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        self.skipped: list[tuple[str, str]] = []

    def _scan(self, allow_empty: bool) -> tuple[list[str], list[tuple[str, int]]]:
        """(classes, files) in torchvision's order; fills ``ignored``."""
        root_files, classes = [], []
        for e in sorted(os.scandir(self.root), key=lambda e: e.name):
            if e.name.startswith("."):
                self.ignored.append(e.name + ("/" if e.is_dir() else ""))
            elif e.is_dir():
                classes.append(e.name)
            else:
                root_files.append(e.name)
        if any(f.lower().endswith(IMAGE_EXTENSIONS) for f in root_files):
            return [], [(rel, -1) for rel in self._walk(self.root)]  # a flat folder of images
        if not classes:
            raise SourceError(f"{self.root}: no class folders (an ImageFolder is root/CLASS/file)")
        self.ignored.extend(root_files)  # not images: torchvision never reads them either
        files: list[tuple[str, int]] = []
        empty = []
        for label, name in enumerate(classes):
            found = self._walk(self.root / name)
            if not found:
                empty.append(name)
            files.extend((rel, label) for rel in found)
        if empty and not allow_empty:
            raise SourceError(
                f"{self.root}: class folder(s) {empty} hold no image ({', '.join(IMAGE_EXTENSIONS)}"
                "); remove them (torchvision's ImageFolder refuses them too), or pass "
                "allow_empty=True to keep them as classes without samples"
            )
        return classes, files

    def _walk(self, top: Path) -> list[str]:
        """Image paths (relative to the root) under ``top`` in torchvision's order:
        ``sorted(os.walk(top, followlinks=True))``, then sorted file names; hidden entries and
        other files go to ``ignored``."""
        images = []
        tree = []
        walked: set[tuple[int, int]] = set()  # (device, inode): each folder once, so
        for dirpath, dirnames, filenames in os.walk(top, followlinks=True):  # symlink loops end
            st = os.stat(dirpath)
            if (st.st_dev, st.st_ino) in walked:
                dirnames.clear()
                continue
            walked.add((st.st_dev, st.st_ino))
            dirnames.sort()  # a folder reached twice is kept under its first name in order
            hidden = [d for d in dirnames if d.startswith(".")]
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            tree.append((dirpath, hidden, filenames))
        for dirpath, hidden, filenames in sorted(tree):
            rel_dir = Path(dirpath).relative_to(self.root)
            self.ignored.extend((rel_dir / d).as_posix() + "/" for d in sorted(hidden))
            for f in sorted(filenames):
                rel = (rel_dir / f).as_posix()
                if not f.startswith(".") and f.lower().endswith(IMAGE_EXTENSIONS):
                    images.append(rel)
                else:
                    self.ignored.append(rel)
        return images

    def __len__(self) -> int:
        return len(self.files)

    def _encode(self, rel: str) -> EncodedImage | str:
        """Encoded image, or the reason it failed (a string) when skipping."""
        path = self.root / rel
        return encode(path, self.max_side, self.quality, self.on_error, str(path))

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
                if self.classes:
                    yield {"image": res, "label": label, "path": rel}
                else:
                    yield {"image": res, "path": rel}

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


def _relative(path: str, root: Path, label: int) -> tuple[str, int]:
    """``(path relative to root, label)``; a path elsewhere stays as it is."""
    rel = os.path.relpath(path, root)
    return (Path(path).as_posix() if rel.startswith("..") else Path(rel).as_posix()), int(label)
