"""Image bombs and lying headers: a small file whose header claims a huge image, stored sizes
that disagree with the header, PIL's decompression-bomb sizes, symlink loops in a folder.
Each is a chute error (or a skipped file) before any large allocation, never a MemoryError."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("simplejpeg")
from _image_files import jpeg
from _reliability import recorded
from PIL import Image

import chute
from chute.errors import FormatError, SourceError
from chute.image import decode_batch, decode_image, encode_image
from chute.sources.image_folder import ImageFolder

OPS = [chute.RandomResizedCrop(32)]
_row = recorded(
    {
        "test_jpeg_bomb_is_refused_before_decoding": (
            "image: JPEG bomb",
            "a 1 KB JPEG whose header says 30000x30000 (and 65500x65500): decode, encode",
            "FormatError over the pixel limit, before decoding (was 2.7 GB / MemoryError)",
        ),
        "test_png_bomb_is_a_format_error": (
            "image: PNG bomb",
            "a PNG header over 2x PIL's MAX_IMAGE_PIXELS: decode, encode",
            "FormatError (was PIL's DecompressionBombError)",
        ),
        "test_the_limit_follows_pils_setting": (
            "image: pixel limit setting",
            "PIL.Image.MAX_IMAGE_PIXELS lowered, then None",
            "the limit follows it",
        ),
        "test_folder_with_a_bomb_skips_it": (
            "image: bomb in an image folder",
            "from_image_folder with a JPEG and a PNG bomb, on_error skip and raise",
            "skipped with the reason / SourceError naming the file (aborted before)",
        ),
        "test_loaded_header_that_disagrees_with_stored_size": (
            "image: header vs stored size",
            "a stored JPEG's header changed to 30000x30000; ds[i], decode_batch, Loader "
            "(threads, and the device decode path on the CPU)",
            "FormatError naming the sample, before any buffer is sized",
        ),
        "test_loaded_stored_size_over_the_limit": (
            "image: stored size over the limit",
            "header and stored size both 30000x30000; ds[i], Loader",
            "FormatError naming the sample, before any buffer is sized",
        ),
        "test_kernels_stay_inside_the_batch_on_any_shape": (
            "image: augmentation kernels on odd shapes",
            "every augmentation (colour, blur of any sigma, erasing, each RandAugment op at "
            "magnitudes 0-30, MixUp, CutMix) on 1x1, one-row, one-column, tall and wide "
            "batches, with numba's bounds checks on; each per-sample op also given 3 more "
            "indices than samples, and draws for 3 more samples",
            "no index outside the batch (an IndexError would fail the run); the extra "
            "indices and draws an ArgumentValueError before any kernel runs (wrote past the "
            "batch before: SIGSEGV / SIGABRT)",
        ),
        "test_symlink_loops_in_a_folder_end": (
            "image: symlink loops",
            "an image folder with two symlink loops and a class that is a link",
            "each real folder walked once; the scan ends (ran forever before)",
        ),
    }
)


def with_size(data: bytes, h: int, w: int) -> bytes:
    """The JPEG ``data`` with its frame header (SOF0/SOF2) saying ``h`` x ``w``."""
    out = bytearray(data)
    i = 2
    while out[i + 1] not in (0xC0, 0xC2):
        i += 2 + int.from_bytes(out[i + 2 : i + 4], "big")
    out[i + 5 : i + 9] = struct.pack(">HH", h, w)
    return bytes(out)


def png_claiming(h: int, w: int) -> bytes:
    """A PNG whose header (IHDR, with a valid CRC) says ``h`` x ``w``: a tiny file."""
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    head = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk
    return head + struct.pack(">I", zlib.crc32(chunk)) + b"\0\0\0\0IEND\xaeB`\x82"


BOMB = with_size(jpeg(16, 16), 30000, 30000)  # ~1 KB; 2.7 GB decoded


def test_jpeg_bomb_is_refused_before_decoding() -> None:
    assert len(BOMB) < 4096
    with pytest.raises(FormatError, match=r"30000x30000 \(900,000,000 pixels\) is over the limit"):
        decode_image(BOMB)
    with pytest.raises(FormatError, match="over the limit"):
        encode_image(BOMB)
    with pytest.raises(FormatError, match="over the limit"):
        decode_image(with_size(jpeg(16, 16), 65500, 65500))


@pytest.mark.parametrize("claim", [(20000, 20000), (13000, 14000)])
def test_png_bomb_is_a_format_error(claim: tuple[int, int]) -> None:
    """Over 2x PIL's limit PIL itself refuses (DecompressionBombError); chute's limit is the
    same one, checked on the header."""
    data = png_claiming(*claim)
    for fn in (decode_image, encode_image):
        with pytest.raises(FormatError, match=r"over the limit|decompression bomb"):
            fn(data)


def test_the_limit_follows_pils_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    small = jpeg(64, 64)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 2000 pixels at most
    with pytest.raises(FormatError, match="limit of 2,000 pixels"):
        decode_image(small)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)
    assert decode_image(small).shape == (3, 64, 64)


def test_folder_with_a_bomb_skips_it(tmp_path: Path) -> None:
    root = tmp_path / "train"
    (root / "cat").mkdir(parents=True)
    (root / "cat" / "ok.jpg").write_bytes(jpeg(40, 50))
    (root / "cat" / "bomb.jpg").write_bytes(BOMB)
    (root / "cat" / "bomb.png").write_bytes(png_claiming(20000, 20000))
    out = chute.from_image_folder(root, tmp_path / "o.chute", on_error="skip", progress=False)
    with chute.open(out) as ds:
        assert len(ds) == 1
        skipped = ds.metadata["skipped"]
    assert sorted(s["path"] for s in skipped) == ["cat/bomb.jpg", "cat/bomb.png"]
    assert all("limit" in s["reason"] or "bomb" in s["reason"] for s in skipped)
    with pytest.raises(SourceError, match=r"bomb\.jpg.*over the limit"):
        chute.from_image_folder(root, tmp_path / "p.chute", progress=False)


def image_dataset(tmp_path: Path) -> Path:
    return chute.write(
        tmp_path / "imgs.chute",
        {"image": [jpeg(40, 50, seed=i) for i in range(4)]},
        schema={"image": chute.Image()},
    )


def patch(path: Path, sample_file: str, old: bytes, new: bytes) -> None:
    file = path / sample_file
    raw = file.read_bytes()
    assert raw.count(old) >= 1
    file.write_bytes(raw.replace(old, new, 1))


def test_loaded_header_that_disagrees_with_stored_size(tmp_path: Path) -> None:
    """The JPEG's header says 30000x30000, its stored size 40x50: refused on the header."""
    path = image_dataset(tmp_path)
    sof = struct.pack(">HH", 40, 50)
    patch(path, "image.values.npy", sof, struct.pack(">HH", 30000, 30000))
    with chute.open(path) as ds:
        with pytest.raises(FormatError, match=r"field 'image', sample 0: .*30000x30000.*40x50"):
            ds[0]["image"]
        batch = ds.gather(np.arange(4))["image"]
        out = np.empty((4, 3, 32, 32), np.uint8)
        with pytest.raises(FormatError, match=r"sample 0 .*do not match the JPEG"):
            decode_batch(batch, batch.heights, batch.widths, OPS, np.arange(4), 0, 0, out)
        with pytest.raises(FormatError, match=r"sample 0 .*do not match the JPEG"):
            list(chute.Loader(ds, 4, decode={"image": OPS}))
        on_device = [chute.RandomResizedCrop(32, device="cpu")]  # the device path checks too
        batch = next(iter(chute.Loader(ds, 4, shuffle=False, decode={"image": on_device})))
        with pytest.raises(FormatError, match=r"sample 0 .*30000x30000"):
            batch["image"].decode()


def test_loaded_stored_size_over_the_limit(tmp_path: Path) -> None:
    """Both the header and the stored size say 30000x30000: refused on the limit, before the
    decoder's buffers are sized from them."""
    path = image_dataset(tmp_path)
    patch(path, "image.values.npy", struct.pack(">HH", 40, 50), struct.pack(">HH", 30000, 30000))
    sizes = np.load(path / "image.sizes.npy")
    sizes[0] = (30000, 30000)
    raw = (path / "image.sizes.npy").read_bytes()
    (path / "image.sizes.npy").write_bytes(raw[: len(raw) - sizes.nbytes] + sizes.tobytes())
    with chute.open(path) as ds:
        with pytest.raises(FormatError, match=r"sample 0: .*over the limit"):
            ds[0]["image"]
        with pytest.raises(FormatError, match=r"sample 0 .*over the limit"):
            list(chute.Loader(ds, 4, decode={"image": OPS}))


def test_symlink_loops_in_a_folder_end(tmp_path: Path) -> None:
    root = tmp_path / "train"
    (root / "cat" / "a").mkdir(parents=True)
    (root / "cat" / "b").mkdir()
    (root / "cat" / "a" / "x.jpg").write_bytes(jpeg(20, 20))
    (root / "cat" / "a" / "up").symlink_to(root / "cat")  # a loop
    (root / "cat" / "b" / "over").symlink_to(root / "cat" / "a")  # and one into it
    (root / "dog").symlink_to(root / "cat")  # a class that is a link: its own files
    folder = ImageFolder(root, progress=False)
    # each class's walk visits a real folder once, under its first name in sorted order; a
    # class folder that links to another lists the files again, as torchvision's does
    assert folder.files == [("cat/a/x.jpg", 0), ("dog/a/x.jpg", 1)]


def test_kernels_stay_inside_the_batch_on_any_shape(tmp_path: Path) -> None:
    """numba does not check indices: every op on odd shapes (1 x 1, one row, one column, tall,
    wide, one sample) with numba's bounds checks on, in a fresh process and kernel cache; more
    indices or draws than samples are refused before the kernels."""
    code = """
import numpy as np, torch, chute
from chute.image import uniforms
from chute.image.augment import augment
ops = [chute.ColorJitter(0.5, 0.5, 0.5, 0.5), chute.Grayscale(1.0), chute.GaussianBlur(9),
       chute.GaussianBlur(3, sigma=(5.0, 9.0)), chute.RandomErasing(1.0),
       chute.TrivialAugmentWide()] + [chute.RandAugment(1, m) for m in (0, 9, 30)]
rng = np.random.default_rng(0)
for b, h, w in [(1, 1, 1), (3, 1, 7), (2, 9, 1), (2, 2, 2), (4, 3, 40), (2, 41, 5), (1, 17, 16)]:
    x = torch.from_numpy(rng.integers(0, 256, (b, 3, h, w), dtype=np.uint8))
    for seed in range(12):  # enough draws that every RandAugment op runs on every shape
        for op in ops:
            augment([op], x, np.arange(b), seed, 0)
            for wrong in (lambda: augment([op], x, np.arange(b + 3), seed, 0),
                          lambda: op.apply(x, uniforms(seed, 0, np.arange(b + 3), 0, op.draws))):
                try:
                    wrong()
                except chute.ArgumentValueError:
                    pass
                else:
                    raise AssertionError(f"{op} took more indices than samples")
        labels = torch.zeros(b, dtype=torch.long)
        for mixing in (chute.MixUp(3), chute.CutMix(3)):
            mixing.apply({"image": x, "label": labels}, np.arange(b), seed, 0)
print("ok")
"""
    env = {**os.environ, "NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]
