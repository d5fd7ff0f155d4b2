"""chute.fields.Image fields: the manifest entry, writing PIL images / bytes / arrays through
Writer, write and from_iterable, reading back (ds[i] decoded, gather encoded), corrupt data."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("simplejpeg")
import torch
from _image_files import corrupt_second_image, jpeg, kinds, picture, pil_rgb
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image, ImageOps

import chute
from chute.columns.encoded_images import EncodedImages
from chute.image import EncodedImage, encode_image
from chute.kinds import field_from_json


def upright_rgb(data: bytes) -> np.ndarray:
    """What a stored image must decode to (up to JPEG loss): PIL's exif_transpose +
    convert("RGB"), (3, H, W)."""
    im = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")
    return np.asarray(im).transpose(2, 0, 1)


def test_manifest_entry_and_files(tmp_path: Path) -> None:
    dst = chute.write(
        tmp_path / "d.chute",
        {"image": [jpeg(40, 50)], "label": np.arange(1)},
        schema={
            "image": chute.fields.Image(max_side=64),
            "label": chute.fields.Tensor((), "int64"),
        },
    )
    manifest = json.loads((dst / "chute.json").read_text())
    assert manifest["version"] == 1
    assert manifest["fields"]["image"] == {
        "kind": "image",
        "codec": "jpeg",
        "max_side": 64,
        "quality": 90,
    }
    sizes = np.load(dst / "image.sizes.npy")
    assert sizes.dtype == np.int32 and sizes.tolist() == [[40, 50]]
    assert (dst / "image.values.npy").exists() and (dst / "image.offsets.npy").exists()
    ds = chute.open(dst)
    assert ds.schema["image"] == chute.fields.Image(64, 90)
    chute.verify(dst)


def test_unknown_kind_or_codec_is_refused() -> None:
    """What a reader that does not know a kind does (chute before Image: kind "image" was
    unknown to it, so such a dataset fails to open with this message, not mid-epoch)."""
    with pytest.raises(chute.FormatError, match="unknown kind 'video'"):
        field_from_json("v", {"kind": "video"})
    with pytest.raises(chute.FormatError, match="image codec 'webp' is not supported"):
        field_from_json("i", {"kind": "image", "codec": "webp"})
    with pytest.raises(chute.FormatError, match="quality"):
        field_from_json("i", {"kind": "image", "codec": "jpeg", "quality": 0})
    with pytest.raises(chute.SchemaError):
        chute.fields.Image(max_side=0)


@pytest.mark.parametrize("how", ["writer", "write", "from_iterable"])
def test_round_trip_pil_bytes_arrays(tmp_path: Path, how: str) -> None:
    """Every kind of input: kept JPEGs decode exactly as PIL; converted ones (PNG, CMYK,
    palette + alpha, EXIF-rotated, arrays, PIL images) as PIL's exif_transpose +
    convert("RGB") up to one JPEG encode at quality 90 (mean abs diff < 2, < 6 for a
    palette's sharp steps)."""
    files = kinds()
    values: list[object] = list(files.values())
    refs = [upright_rgb(d) for d in files.values()]
    arr = picture(37, 53, seed=3)
    values += [arr, arr.transpose(2, 0, 1).copy(), torch.from_numpy(arr[..., 0].copy())]
    refs += [arr.transpose(2, 0, 1), arr.transpose(2, 0, 1), np.stack([arr[..., 0]] * 3)]
    pil = Image.fromarray(picture(40, 61, seed=4)).convert("P", palette=Image.Palette.ADAPTIVE)
    values.append(pil)
    refs.append(np.asarray(pil.convert("RGB")).transpose(2, 0, 1))
    schema = {"image": chute.fields.Image(), "i": chute.fields.Tensor((), "int64")}
    dst = tmp_path / "d.chute"
    if how == "writer":
        with chute.Writer(dst, schema) as w:
            for i, v in enumerate(values[:5]):
                w.append({"image": v, "i": i})
            w.extend({"image": values[5:], "i": np.arange(5, len(values))})
    elif how == "write":
        chute.write(dst, {"image": values, "i": np.arange(len(values))}, schema=schema)
    else:
        chute.from_iterable(
            ({"image": v, "i": i} for i, v in enumerate(values)), dst, schema, progress=False
        )
    ds = chute.open(dst)
    kept = {"jpeg", "gray_jpeg", "progressive_jpeg"}
    names = [*files, "hwc", "chw", "gray_tensor", "pil_palette"]
    for i, (name, ref) in enumerate(zip(names, refs, strict=True)):
        got = ds[i]["image"]
        assert got.dtype == torch.uint8 and got.shape == ref.shape, name
        diff = np.abs(got.numpy().astype(int) - ref)
        if name in kept:
            assert diff.max() == 0, name
        else:
            assert diff.mean() < (6.0 if "palette" in name else 2.0), (name, diff.mean())
    # kept byte for byte: the stored bytes are the file's
    b = ds.gather([0, 1])
    assert isinstance(b["image"], EncodedImages)
    assert bytes(b["image"][0].numpy()) == files["jpeg"]
    assert b["image"].sizes.tolist() == [list(ref.shape[1:]) for ref in refs[:2]]


def test_encoded_images_infer_an_image_field_pil_stays_lossless(tmp_path: Path) -> None:
    """Only an explicit choice makes JPEGs: chute.fields.Image() in the schema, or values already
    encoded (chute.image.encode_image). A PIL image alone stays its exact pixels; bytes stay
    Bytes."""
    ims = [Image.fromarray(picture(30, 40, seed=s)) for s in range(3)]
    encoded = [encode_image(im) for im in ims]
    dst = chute.write(tmp_path / "a.chute", {"image": encoded, "raw": [jpeg()] * 3})
    assert chute.open(dst).schema == {"image": chute.fields.Image(), "raw": chute.Bytes()}
    with chute.Writer(tmp_path / "b.chute") as w:
        w.append({"image": ims[0]})
    ds = chute.open(tmp_path / "b.chute")
    assert ds.schema["image"] == chute.fields.Tensor((30, 40, 3), "uint8")
    np.testing.assert_array_equal(ds[0]["image"].numpy(), np.asarray(ims[0]))


def test_ds_i_equals_pil_decode(tmp_path: Path) -> None:
    data = [jpeg(60 + i, 90 - i, seed=i, progressive=i % 2 == 1) for i in range(6)]
    dst = chute.write(
        tmp_path / "d.chute", {"image": data}, schema={"image": chute.fields.Image()}, part_size=4
    )
    ds = chute.open(dst)
    for i, d in enumerate(data):
        assert np.array_equal(ds[i]["image"].numpy(), pil_rgb(d).transpose(2, 0, 1))
    # gather across parts, in the order given; slices are encoded too
    b = ds.gather([5, 0, 4, -1])
    assert [bytes(x.numpy()) for x in b["image"].tolist()] == [data[5], data[0], data[4], data[5]]
    assert b["image"].sizes.tolist() == [[65, 85], [60, 90], [64, 86], [65, 85]]
    assert np.array_equal(b["image"].decode(1).numpy(), ds[0]["image"].numpy())
    s = ds[1:3]["image"]
    assert isinstance(s, EncodedImages) and len(s) == 2 and s.heights.tolist() == [61, 62]


def test_max_side_and_quality_are_applied(tmp_path: Path) -> None:
    dst = chute.write(
        tmp_path / "d.chute",
        {"image": [jpeg(200, 300)]},
        schema={"image": chute.fields.Image(max_side=90, quality=50)},
    )
    ds = chute.open(dst)
    assert tuple(ds[0]["image"].shape) == (3, 60, 90)


def test_not_an_image_names_field_and_sample(tmp_path: Path) -> None:
    with pytest.raises(chute.SchemaError, match=r"field 'image', sample 2: .*not a decodable"):
        chute.write(
            tmp_path / "d.chute",
            {"image": [jpeg(), jpeg(), b"nope"]},
            schema={"image": chute.fields.Image()},
        )
    with pytest.raises(chute.SchemaError, match=r"field 'image', sample 0: .*PIL image"):
        chute.write(tmp_path / "e.chute", {"image": [1.5]}, schema={"image": chute.fields.Image()})
    assert not (tmp_path / "d.chute").exists()


def test_corrupt_image_at_load_time_names_dataset_field_and_index(tmp_path: Path) -> None:
    dst = chute.write(
        tmp_path / "d.chute",
        {"image": [jpeg(seed=i) for i in range(3)]},
        schema={"image": chute.fields.Image()},
    )
    corrupt_second_image(dst)
    ds = chute.open(dst)
    ds[0]
    with pytest.raises(chute.FormatError, match=r"d\.chute: field 'image', sample 1: "):
        ds[1]


def test_encoded_image_values_are_stored_as_they_are(tmp_path: Path) -> None:
    e = encode_image(kinds()["png"])
    assert isinstance(e, EncodedImage)
    dst = chute.write(tmp_path / "d.chute", {"image": [e]}, schema={"image": chute.fields.Image()})
    b = chute.open(dst).gather([0])["image"]
    assert bytes(b[0].numpy()) == e.data and b.sizes.tolist() == [[e.height, e.width]]


@pytest.fixture(scope="module")
def parts_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[bytes]]:
    data = [jpeg(8 + i % 5, 9 + i % 3, seed=i) for i in range(23)]
    dst = tmp_path_factory.mktemp("parts") / "d.chute"
    chute.write(dst, {"image": data}, schema={"image": chute.fields.Image()}, part_size=6)
    return dst, data


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-23, 22), max_size=30))
def test_gather_is_the_samples_in_order(parts_dataset, indices: list[int]) -> None:
    """Any indices (repeats, negatives, across parts): each sample's own bytes and size."""
    dst, data = parts_dataset
    b = chute.open(dst).gather(np.array(indices, np.int64))["image"]
    assert len(b) == len(indices)
    assert [bytes(x.numpy()) for x in b.tolist()] == [data[i] for i in indices]
    want = [[8 + (i % 23) % 5, 9 + (i % 23) % 3] for i in indices]
    assert b.sizes.tolist() == want


def test_gathered_bytes_reuse_a_dropped_batch_never_a_kept_one(tmp_path: Path) -> None:
    """The image gather writes a batch's bytes into its thread's buffer of the last batch
    once nothing refers to it (what a loader does: decode, drop); a batch someone keeps (or
    any view of it) is never written over: the next gather takes a new buffer."""
    datas = [jpeg(30 + i, 40, seed=i) for i in range(6)]
    dst = chute.write(
        tmp_path / "d.chute", {"image": datas}, schema={"image": chute.fields.Image()}
    )
    ds = chute.open(dst)

    def ptr(batch: EncodedImages) -> int:
        return batch.values.data_ptr()

    first = ds.gather([0, 1, 2])["image"]
    kept_ptr, kept = ptr(first), first.values.clone()
    view = first.values.numpy()[:10]  # a numpy view keeps the buffer too
    del first
    second = ds.gather([3, 4, 5])["image"]
    assert ptr(second) != kept_ptr
    assert np.array_equal(view, kept.numpy()[:10])
    second_ptr = ptr(second)
    del second
    third = ds.gather([5, 4])["image"]  # smaller: fits the dropped buffer
    assert ptr(third) == second_ptr
    assert [bytes(memoryview(x.numpy())) for x in third.tolist()] == [datas[5], datas[4]]
    again = ds.gather([0, 1, 2])["image"]  # ``third`` is held: a new buffer
    assert ptr(again) != ptr(third)
    assert torch.equal(again.values, kept)


def test_a_gather_above_the_keep_limit_is_not_held(tmp_path: Path, monkeypatch) -> None:
    """A gather larger than KEEP_MAX (a one-off gather of a whole dataset) gets its own
    buffer, which the thread does not hold on to once the batch is dropped."""
    import chute.buffers as buffers

    datas = [jpeg(30, 40, seed=i) for i in range(4)]
    ds = chute.open(
        chute.write(tmp_path / "d.chute", {"image": datas}, schema={"image": chute.fields.Image()})
    )

    def held_after(limit: int) -> list[int]:  # in a new thread: its own, empty buffers
        monkeypatch.setattr(buffers, "KEEP_MAX", limit)
        out: list[int] = []

        def run() -> None:
            got = ds.gather([0, 1, 2, 3])["image"]
            assert [bytes(memoryview(x.numpy())) for x in got.tolist()] == datas
            out.extend(len(b) for b in buffers._THREAD.__dict__.get("bytes", [])[1:])

        t = threading.Thread(target=run)
        t.start()
        t.join()
        return out

    assert held_after(100) == []
    assert len(held_after(1 << 20)) == 1  # under the limit: kept for the next batch
