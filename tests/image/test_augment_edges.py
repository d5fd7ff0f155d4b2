"""Augmentations at their edges: a batch, draws, rows or labels that do not fit, degenerate
batches (no samples, no pixels, one or four channels, floats) and every bad parameter of
every op. Each is a chute error naming the op and what it accepts, or the right result;
never a write outside the batch (numba checks no index), a raw numpy / numba / torch error
or a huge allocation."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

pytest.importorskip("numba")
import torch
from _image_files import picture
from _reliability import record

import chute
from chute.errors import ArgumentError, ArgumentValueError, SchemaError
from chute.image import uniforms
from chute.image.augment import AUGMENTS, augment
from chute.image.blur_taps import blur, gaussian_taps
from chute.image.randaugment import MAX_BINS, OPS, apply_ops

Record = Callable[[str, Any], None]

PER_SAMPLE = [
    chute.ColorJitter(0.4, 0.4, 0.4, 0.1),
    chute.Grayscale(1.0),
    chute.GaussianBlur(3),
    chute.RandomErasing(1.0),
    chute.RandAugment(2, 9),
    chute.TrivialAugmentWide(),
    chute.RandomAffine(15, (0.1, 0.1), (0.8, 1.2), 10),
    chute.RandomRotation(30),
    chute.RandomPerspective(0.5, p=1.0),
]
assert {type(op) for op in PER_SAMPLE} == set(AUGMENTS)
WARPING = (chute.RandomAffine, chute.RandomRotation, chute.RandomPerspective)


def images(b: int, c: int = 3, h: int = 12, w: int = 14) -> torch.Tensor:
    planes = [picture(h, w, s).transpose(2, 0, 1) for s in range(b)]
    x = np.stack(planes) if b else np.zeros((0, 3, h, w), np.uint8)
    return torch.from_numpy(np.ascontiguousarray(np.resize(x, (b, c, h, w))))


def name(op: object) -> str:
    return type(op).__name__


@pytest.mark.parametrize("op", PER_SAMPLE, ids=name)
def test_indices_or_draws_that_do_not_fit_the_batch_are_refused(
    op: Any, record_property: Record
) -> None:
    """More indices than samples, negative ones, draws for another batch size: refused before
    any kernel runs, the batch untouched."""
    x = images(2)
    before = x.clone()
    with pytest.raises(ArgumentValueError, match=r"augment: 400 indices for a batch of 2"):
        augment([op], x, np.arange(400), 0, 0)
    with pytest.raises(ArgumentValueError, match=r"augment: 1 indices for a batch of 2"):
        augment([op], x, [7], 0, 0)
    with pytest.raises(ArgumentValueError, match=r"augment: index -3 is negative"):
        augment([op], x, [-3, 4], 0, 0)
    with pytest.raises(ArgumentError, match="augment: indices must be integers"):
        augment([op], x, [0.5, 1.5], 0, 0)
    for rows in (400, 1):
        u = uniforms(0, 0, np.arange(rows), 0, op.draws)
        with pytest.raises(ArgumentValueError, match=rf"{name(op)}: u must have one row .*got"):
            op.apply(x, u)
    assert torch.equal(x, before)
    augment([op], x, [3, 4], 0, 0)  # the batch as the loader gives it still works
    record(
        record_property,
        "image: indices that do not fit the batch",
        f"{name(op)} through augment() with 400, 1, negative and float indices for 2 "
        "samples, and .apply(out, u) with draws for 400 and 1 samples",
        6,
        f"ArgumentValueError / ArgumentError naming {name(op)} or augment, the batch "
        "untouched (wrote past the batch before: SIGSEGV / SIGABRT)",
    )


def test_kernel_entries_check_rows_shapes_and_dtypes(record_property: Record) -> None:
    """blur() and apply_ops(), the entries that hand rows to the kernels, check them."""
    x = images(2)
    taps = gaussian_taps(3, np.array([1.0, 1.0]))
    outcomes: Counter = Counter()

    def refused(error: type[Exception], match: str, fn: Callable[[], Any]) -> None:
        with pytest.raises(error, match=match):
            fn()
        outcomes[error.__name__] += 1

    refused(ArgumentValueError, r"blur: row 5 is outside \[0, 2\)", lambda: blur(x, [0, 5], taps))
    refused(ArgumentValueError, r"blur: row -1", lambda: blur(x, [-1, 0], taps))
    refused(ArgumentError, "blur: rows must be a 1-d integer", lambda: blur(x, [0.0, 1.0], taps))
    refused(ArgumentError, "float32", lambda: blur(x, [0, 1], taps.astype(np.float64)))
    refused(ArgumentValueError, "one odd-length kernel per row", lambda: blur(x, [0], taps))
    big = gaussian_taps(31, np.array([3.0]))  # radius 15 > the 12 x 14 image
    refused(ArgumentValueError, r"radius below .*\(12, 14\)", lambda: blur(x, [0], big))
    refused(ArgumentError, "blur takes a contiguous uint8", lambda: blur(x.float(), [0], taps[:1]))
    refused(ArgumentValueError, "non-contiguous", lambda: blur(x[:, :, ::2], [0], taps[:1]))
    n = len(OPS)
    refused(
        ArgumentValueError,
        rf"apply_ops: op number {n} is outside \[0, {n}\)",
        lambda: apply_ops(x, np.array([1, n]), np.zeros(2)),
    )
    refused(
        ArgumentValueError,
        "one op and one magnitude per sample",
        lambda: apply_ops(x, np.array([1, 2, 3]), np.zeros(3)),
    )
    refused(
        ArgumentValueError, "finite", lambda: apply_ops(x, np.array([1, 5]), np.full(2, np.nan))
    )
    posterize = OPS.index("Posterize")
    refused(
        ArgumentValueError,
        "Posterize keeps 0 to 8 bits",
        lambda: apply_ops(x, np.array([posterize, 0]), np.array([100.0, 0.0])),
    )
    blur(x, np.array([], np.int64), taps[:0])  # no rows: nothing to do
    record(
        record_property,
        "image: kernel entries given bad rows",
        "blur() with rows outside the batch, negative or float, taps of another dtype or "
        "count or wider than the image, a float or strided batch; apply_ops() with an op "
        "number out of range, more ops than samples, NaN or out-of-range magnitudes",
        outcomes.total(),
        outcomes,
    )


def test_magnitude_bins_and_rounds_are_bounded(record_property: Record) -> None:
    """RandAugment(num_magnitude_bins=10**9) made a (14, 10**9) table per batch (7.45 GiB)."""
    with pytest.raises(ArgumentValueError, match=rf"num_magnitude_bins .*\[2, {MAX_BINS}\]"):
        chute.RandAugment(num_magnitude_bins=10**9)
    with pytest.raises(ArgumentValueError, match="num_magnitude_bins"):
        chute.TrivialAugmentWide(num_magnitude_bins=10**9)
    with pytest.raises(ArgumentValueError, match="num_ops"):
        chute.RandAugment(num_ops=10**9)  # 2 * 10**9 draws per sample
    x = images(2)
    augment(
        [chute.RandAugment(1, 0, MAX_BINS), chute.TrivialAugmentWide(MAX_BINS)], x, [0, 1], 0, 0
    )
    record(
        record_property,
        "image: huge RandAugment tables",
        "RandAugment / TrivialAugmentWide num_magnitude_bins=10**9, RandAugment num_ops=10**9",
        3,
        f"ArgumentValueError when built, bins at most {MAX_BINS} (allocated 7.45 GiB per batch)",
    )


@pytest.mark.parametrize("mixing", [chute.MixUp(10), chute.CutMix(10)], ids=name)
def test_mixing_labels_that_do_not_fit_are_refused(mixing: Any, record_property: Record) -> None:
    x = images(4)
    idx = np.arange(4)
    cases = {
        "2 labels": (
            torch.tensor([1, 2]),
            r"2 labels \(field 'label'\) and 4 indices for 4 images",
        ),
        "label 10": (torch.tensor([1, 2, 10, 3]), r"label 10 of sample 2 .*outside \[0, 10\)"),
        "label -1": (torch.tensor([-1, 2, 1, 3]), r"label -1 of sample 0 .*num_classes=10"),
        "float labels": (
            torch.tensor([1.0, 2.0, 1.5, 0.0]),
            "field .label. must hold integer class indices, got",
        ),
    }
    for labels, match in cases.values():
        with pytest.raises(SchemaError, match=rf"{name(mixing)}: {match}"):
            mixing.apply({"image": x, "label": labels}, idx, 0, 0)
    with pytest.raises(SchemaError, match=r"2 labels .* and 3 indices for 2 images"):
        mixing.apply({"image": x[:2], "label": torch.tensor([1, 2])}, np.arange(3), 0, 0)
    got = mixing.apply({"image": x, "label": torch.tensor([[1], [2], [9], [0]])}, idx, 0, 0)
    assert got["label"].shape == (4, 10)  # (B, 1) labels are one per image
    record(
        record_property,
        "image: MixUp / CutMix labels that do not fit",
        f"{name(mixing)} with 2 labels for 4 images, labels 10 and -1 for num_classes=10, float "
        "labels, 3 indices for 2 images",
        len(cases) + 1,
        "SchemaError naming the field, the label, its sample and num_classes (were mismatched "
        "labels returned silently, or torch's one_hot error)",
    )


@pytest.mark.parametrize("op", PER_SAMPLE, ids=name)
def test_degenerate_batches(op: Any, record_property: Record) -> None:
    """No samples or no pixels: nothing to do. One or four channels: blurred / erased /
    warped as any planes, gray already (Grayscale), else refused; floats refused."""
    outcomes: Counter = Counter()
    for b, h, w in [(0, 12, 14), (2, 0, 14), (2, 12, 0)]:
        x = images(b, 3, h, w)
        augment([op], x, np.arange(b), 0, 0)
        op.apply(x, uniforms(0, 0, np.arange(b), 0, op.draws))
        outcomes["empty: no-op"] += 1
    for c, planes in ((1, "1 channel"), (4, "4 channels")):
        x = images(2, c)
        planewise = (chute.GaussianBlur, chute.RandomErasing, *WARPING)
        if isinstance(op, planewise):
            rgb = images(2, 3)  # each plane on its own: as the first planes of an RGB batch
            rgb[:, : min(c, 3)] = x[:, : min(c, 3)]
            augment([op], x, [5, 6], 0, 0)
            augment([op], rgb, [5, 6], 0, 0)
            assert torch.equal(x[:, : min(c, 3)], rgb[:, : min(c, 3)])
            outcomes[f"{planes}: done"] += 1
        elif isinstance(op, chute.Grayscale) and c == 1:
            before = x.clone()
            augment([op], x, [5, 6], 0, 0)
            assert torch.equal(x, before)
            outcomes["1 channel: no-op"] += 1
        else:
            with pytest.raises(
                ArgumentValueError, match=rf"{name(op)} takes .*uint8 \(B, (1 or )?3,"
            ):
                augment([op], x, [5, 6], 0, 0)
            outcomes[f"{planes}: ArgumentValueError"] += 1
    for bad in (images(2).float(), images(2).numpy()):
        with pytest.raises(ArgumentError, match="augment takes a uint8"):
            augment([op], bad, [0, 1], 0, 0)
        with pytest.raises(ArgumentError, match=rf"{name(op)} takes a contiguous uint8"):
            op.apply(bad, uniforms(0, 0, np.arange(2), 0, op.draws))
        outcomes["float / numpy: ArgumentError"] += 1
    record(
        record_property,
        "image: degenerate batches",
        f"{name(op)} on 0 samples, 0 rows, 0 columns, 1 and 4 channels, float and numpy "
        "batches (were ZeroDivisionError, reshape ValueError, numba TypingError)",
        outcomes.total(),
        outcomes,
    )


@pytest.mark.parametrize("mixing", [chute.MixUp(3), chute.CutMix(3)], ids=name)
def test_mixing_degenerate_batches(mixing: Any, record_property: Record) -> None:
    for b, h, w in [(0, 8, 8), (2, 0, 8), (2, 8, 0)]:
        x = images(b, 3, h, w)
        labels = torch.arange(b) % 3
        got = mixing.apply({"image": x, "label": labels}, np.arange(b), 0, 0)
        assert got["image"].shape == x.shape and got["label"].shape == (b, 3)
    with pytest.raises(SchemaError, match=rf"{name(mixing)}: field 'image' must be a tensor"):
        mixing.apply({"image": [1, 2], "label": torch.tensor([0, 1])}, np.arange(2), 0, 0)
    record(
        record_property,
        "image: MixUp / CutMix on degenerate batches",
        f"{name(mixing)} on 0 samples, 0 rows, 0 columns; images that are a list",
        4,
        "the batch as it is, labels one-hot (CutMix raised numpy's ValueError on 0 rows or "
        "columns); SchemaError",
    )


NAN, INF = math.nan, math.inf
BAD: dict[type, dict[str, list[Any]]] = {
    chute.ColorJitter: {
        "brightness": [-0.1, NAN, INF, "0.4", (0.6, 1.4), True],
        "contrast": [-1, NAN, INF, None],
        "saturation": [-1, NAN, INF, [0.5]],
        "hue": [-0.1, 0.51, NAN, INF, "0.1"],
    },
    chute.Grayscale: {"p": [-0.1, 1.5, NAN, "0.5", None]},
    chute.GaussianBlur: {
        "kernel_size": [4, 0, -3, 3.0, True, (3, 3), 10**6 + 1],
        "sigma": [(0.0, 1.0), (2.0, 1.0), (NAN, 1.0), (1.0, INF), 1.0, (1.0,), ("a", "b")],
        "p": [5, -0.5, NAN, "1"],
    },
    chute.RandomErasing: {
        "p": [1.5, -0.1, NAN, "0.5"],
        "scale": [(0.0, 0.3), (0.5, 0.2), (0.1, 1.5), (NAN, 0.3), 0.3, None],
        "ratio": [(0.0, 1.0), (2.0, 1.0), (1.0, INF), (NAN, 1.0), 1.0],
        "value": [NAN, -1, 256, INF, "random", (0, 0, 0)],
    },
    chute.RandAugment: {
        "num_ops": [-1, 65, 2.0, True, 10**9],
        "magnitude": [-1, 31, 9.0, None],
        "num_magnitude_bins": [1, 0, MAX_BINS + 1, 10**9, 31.0],
    },
    chute.TrivialAugmentWide: {"num_magnitude_bins": [1, MAX_BINS + 1, 10**9, 31.5, "31"]},
    chute.MixUp: {
        "num_classes": [0, -1, 2.5, True, None, 2**40],
        "alpha": [0.0, -1.0, NAN, INF, "1"],
        "image": [3, None],
        "label": ["image", 0],
    },
    chute.RandomResizedCrop: {
        "size": [0, -5, 2.5, (0, 4), (4, 4, 4), None],
        "scale": [(0.0, 1.0), (0.5, 0.1), (NAN, 1.0), (0.1, INF), 0.5],
        "ratio": [(0.0, 1.0), (2.0, 1.0), (1.0, INF), 1.0],
        "exact": ["yes", 1, None],
    },
    chute.CenterCrop: {"size": [0, None], "ratio": [0.0, 1.5, NAN, "0.875"], "exact": [0, "no"]},
    chute.Resize: {"size": [0, (1, 0), "8"], "exact": [1, None]},
    chute.RandomHorizontalFlip: {"p": [-0.1, 1.1, NAN, "0.5"]},
}
BAD[chute.CutMix] = BAD[chute.MixUp]
REQUIRED: dict[type, dict[str, Any]] = {
    chute.MixUp: {"num_classes": 10},
    chute.CutMix: {"num_classes": 10},
    chute.RandomResizedCrop: {"size": 8},
    chute.CenterCrop: {"size": 8},
    chute.Resize: {"size": 8},
}


@pytest.mark.parametrize("cls", list(BAD), ids=lambda c: c.__name__)
def test_every_bad_parameter_is_refused_when_built(cls: type, record_property: Record) -> None:
    """Each bad value of each parameter: an ArgumentError (wrong type) or ArgumentValueError
    (a value that cannot work) naming the op and the parameter, when the op is built."""
    outcomes: Counter = Counter()
    base = REQUIRED.get(cls, {})
    cls(**base)  # the defaults are fine
    for param, values in BAD[cls].items():
        for value in values:
            with pytest.raises((ArgumentError, ArgumentValueError)) as info:
                cls(**{**base, param: value})
            message = str(info.value)
            assert message.startswith(cls.__name__) and param in message, message
            outcomes[type(info.value).__name__] += 1
    record(
        record_property,
        "image: bad op parameters",
        f"{cls.__name__}: " + "; ".join(f"{p}={v!r}" for p, vs in BAD[cls].items() for v in vs),
        outcomes.total(),
        outcomes,
    )


def test_followers_that_warps_cannot_move_are_refused_when_configured(
    tmp_path: Any, record_property: Record
) -> None:
    """A Follow fill that is no integer, that a mask's dtype cannot hold or that is given to
    an image follower, and a leader op that does not say how followers move: refused when
    the Follow or the Loader is made, never a mask silently left behind or wrapped around."""
    pytest.importorskip("simplejpeg")
    from _image_files import jpeg

    dst = tmp_path / "seg.chute"
    chute.write(
        dst,
        {
            "image": [jpeg(20, 24, seed=i) for i in range(4)],
            "copy": [jpeg(20, 24, seed=i) for i in range(4)],
            "mask": [np.zeros((20, 24), np.uint8)] * 4,
        },
        schema={
            "image": chute.fields.Image(),
            "copy": chute.fields.Image(),
            "mask": chute.fields.Mask(),
        },
    )
    ds = chute.open(dst)
    ops = [chute.RandomResizedCrop(16), chute.RandAugment(2, 20)]
    outcomes: Counter = Counter()
    for fill in (1.5, "255", True, None, np.float32(3)):
        with pytest.raises(ArgumentError, match=r"Follow\('image'\): fill must be an integer"):
            chute.Follow("image", fill=fill)  # type: ignore[arg-type]
        outcomes["ArgumentError at Follow()"] += 1
    for fill in (256, -1, 2**40):
        with pytest.raises(ArgumentError, match=rf"fill={fill} does not fit the mask's uint8"):
            chute.Loader(ds, 2, decode={"image": ops, "mask": chute.Follow("image", fill=fill)})
        outcomes["ArgumentError at Loader()"] += 1
    with pytest.raises(ArgumentError, match="an image follower is filled with 0"):
        chute.Loader(ds, 2, decode={"image": ops, "copy": chute.Follow("image", fill=255)})
    outcomes["ArgumentError at Loader()"] += 1

    class Wobble(chute.ColorJitter):  # says nothing known of its followers
        moves = "sideways"

    with pytest.raises(ArgumentError, match="left behind"):
        chute.Loader(ds, 2, decode={"image": [*ops, Wobble()], "mask": chute.Follow("image")})
    outcomes["ArgumentError at Loader()"] += 1
    batch = next(
        iter(chute.Loader(ds, 4, decode={"image": ops, "mask": chute.Follow("image", 255)}))
    )
    assert batch["mask"].dtype == torch.uint8  # 255 fits: the warps fill with it
    record(
        record_property,
        "image: followers a warp cannot move",
        "Follow fills 1.5, '255', True, None, float32; 256, -1, 2**40 for a uint8 mask; 255 "
        "for an image follower; a decode op whose 'moves' is unknown",
        outcomes.total(),
        outcomes,
    )
