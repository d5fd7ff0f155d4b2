"""``dtype=``, ``pad_to=`` and ``pad_multiple=`` in both loaders (chute/loader/finish.py): the
fields cast in the workers and padded fields widened to constant shapes, with the same values
and lengths as the batches without them, from worker threads and worker processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import chute

N = 45  # 5 full batches of 8 and a last one of 5

KINDS = [
    ("Loader", 0),
    ("Loader", 1),
    ("dataloader", 0),
    pytest.param("dataloader", 1, marks=pytest.mark.slow),  # a worker process
]


@pytest.fixture(scope="module")
def ds(tmp_path_factory: pytest.TempPathFactory) -> chute.Dataset:
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("finish") / "d.chute"
    schema = {
        "tokens": chute.Ragged("uint16"),
        "y": chute.fields.Tensor((), "int32"),
        "x": chute.fields.Tensor((3,), "float32"),
        "name": chute.String(),
    }
    with chute.Writer(path, schema) as w:
        for i in range(N):
            n = int(rng.integers(1, 60))
            w.append(
                {
                    "tokens": rng.integers(0, 65_000, n).astype(np.uint16),
                    "y": i,
                    "x": np.full(3, i, np.float32),
                    "name": f"doc {i}",
                }
            )
    return chute.open(path)


def batches(ds: Any, kind: str, workers: int, **kw: Any) -> list[dict[str, Any]]:
    """One epoch of ``kind`` (``Loader`` or ``dataloader``), batch 8, seed 1."""
    make = chute.Loader if kind == "Loader" else chute.dataloader
    return list(make(ds, 8, seed=1, num_workers=workers, pin_memory=False, **kw))


# ----------------------------------------------------------------------- dtype=


@pytest.mark.parametrize(("kind", "workers"), KINDS)
def test_dtype_casts_the_named_fields_and_keeps_their_values(ds, kind, workers):
    plain = batches(ds, kind, workers)
    cast = batches(ds, kind, workers, dtype={"tokens": torch.int64, "y": "int64"})
    assert len(cast) == len(plain) == 6
    for a, b in zip(plain, cast, strict=True):
        assert isinstance(b["tokens"], chute.RaggedBatch)
        assert b["tokens"].values.dtype == torch.int64 and b["y"].dtype == torch.int64
        assert torch.equal(b["tokens"].values, a["tokens"].values.long())
        assert torch.equal(b["tokens"].offsets, a["tokens"].offsets)
        assert torch.equal(b["y"], a["y"].long())
        assert b["x"].dtype == torch.float32 and torch.equal(b["x"], a["x"])  # not named
        assert b["name"] == a["name"]


@pytest.mark.parametrize(("kind", "workers"), KINDS)
def test_dtype_casts_the_padded_tensor(ds, kind, workers):
    plain = batches(ds, kind, workers, pad=0)
    cast = batches(ds, kind, workers, pad=0, dtype={"tokens": torch.int64})
    for a, b in zip(plain, cast, strict=True):
        assert b["tokens"].dtype == torch.int64
        assert torch.equal(b["tokens"], a["tokens"].long())
        assert torch.equal(b["tokens_lengths"], a["tokens_lengths"])


def test_one_dtype_casts_every_fixed_numeric_field(ds):
    (b, *_) = batches(ds, "Loader", 1, dtype=torch.float64)
    assert b["y"].dtype == b["x"].dtype == torch.float64
    assert b["tokens"].values.dtype == torch.uint16  # a Ragged field keeps its dtype
    loader = chute.Loader(ds, 8, dtype=torch.float64, num_workers=0)
    assert loader.dataset.schema["y"].dtype == "float64"
    assert loader.dataset.schema["tokens"].dtype == "uint16"
    assert loader.dataset[3]["y"].dtype == torch.float64


@pytest.mark.parametrize(("kind", "workers"), KINDS)
def test_token_windows_cast_to_int64(ds, kind, workers):
    """Windows are small fixed-shape batches: the Loader gathers several at once (a group,
    into its pool), the dataloader into a worker's shared-memory slot."""
    w = chute.windows(ds, "tokens", length=17)
    want = [b["tokens"].long() for b in batches(w, kind, workers)]
    got = batches(w, kind, workers, dtype={"tokens": torch.int64})
    assert len(got) == len(want) > 2
    for a, b in zip(want, got, strict=True):
        assert b["tokens"].dtype == torch.int64 and torch.equal(b["tokens"], a)


@pytest.mark.parametrize("workers", [0, 2])
def test_cast_into_the_ring(ds, workers):
    """``reuse_after=1``: each batch compared before the next is asked for."""
    w = chute.windows(ds, "tokens", length=5)
    opts = {"seed": 1, "num_workers": workers, "reuse_after": 1}
    plain = chute.Loader(w, 8, **opts)
    cast = chute.Loader(w, 8, **opts, dtype={"tokens": torch.int64})
    assert cast.group == (1 if workers == 0 else 32)  # with threads, batches in groups
    n = 0
    for a, b in zip(plain, cast, strict=True):
        assert b["tokens"].dtype == torch.int64 and torch.equal(b["tokens"], a["tokens"].long())
        n += 1
    assert n == len(plain) > 2


def test_dtype_through_a_mix_of_datasets(ds):
    """A mix draws its samples per epoch: the cast view is bound to each epoch too."""
    m = chute.mix({"a": ds, "b": ds}, weights={"a": 0.5, "b": 0.5}, epoch_size=20, seed=3)
    for e in (0, 1):
        plain = chute.Loader(m, 8, num_workers=1)
        cast = chute.Loader(m, 8, num_workers=1, dtype={"y": torch.int64})
        plain.set_epoch(e)
        cast.set_epoch(e)
        for a, b in zip(plain, cast, strict=True):
            assert b["y"].dtype == torch.int64 and torch.equal(b["y"], a["y"].long())


def test_a_dataloader_built_from_the_loaders_batch_sampler_casts_too(ds):
    """Frameworks read ``loader.dataset`` with ``loader.batch_sampler``: a cast is not refused
    there (the dataset's samples are cast), and gives the Loader's batches."""
    w = chute.windows(ds, "tokens", length=17)
    loader = chute.Loader(w, 8, num_workers=0, dtype={"tokens": torch.int64})
    torch_dl = torch.utils.data.DataLoader(
        loader.dataset, batch_sampler=loader.batch_sampler, collate_fn=lambda s: s
    )
    got = [torch.stack([s["tokens"] for s in samples]) for samples in torch_dl]
    want = [b["tokens"] for b in chute.Loader(w, 8, num_workers=0, dtype={"tokens": "int64"})]
    assert all(g.dtype == torch.int64 for g in got)
    assert [g.tolist() for g in got] == [t.tolist() for t in want]


# ------------------------------------------------------------ pad_to=, pad_multiple=


@pytest.mark.parametrize(("kind", "workers"), KINDS)
def test_pad_to_gives_one_shape_for_every_batch(ds, kind, workers):
    plain = batches(ds, kind, workers, pad=7)
    wide = batches(ds, kind, workers, pad=7, pad_to=64)
    assert {tuple(b["tokens"].shape) for b in wide[:-1]} == {(8, 64)}
    assert tuple(wide[-1]["tokens"].shape) == (5, 64)  # the last, partial batch
    for a, b in zip(plain, wide, strict=True):
        width = a["tokens"].shape[1]
        assert torch.equal(b["tokens"][:, :width], a["tokens"])
        assert (b["tokens"][:, width:] == 7).all()
        assert b["tokens"].dtype == torch.uint16
        assert torch.equal(b["tokens_lengths"], a["tokens_lengths"])  # the true lengths
    dropped = batches(ds, kind, workers, pad=7, pad_to=64, drop_last=True)
    assert {tuple(b["tokens"].shape) for b in dropped} == {(8, 64)}
    assert len(dropped) == 5


@pytest.mark.parametrize(("kind", "workers"), KINDS)
def test_pad_multiple_rounds_the_width_up(ds, kind, workers):
    plain = batches(ds, kind, workers, pad=0)
    wide = batches(ds, kind, workers, pad=0, pad_multiple=16, dtype={"tokens": "int64"})
    for a, b in zip(plain, wide, strict=True):
        longest = int(a["tokens_lengths"].max())
        assert b["tokens"].shape[1] % 16 == 0 and longest <= b["tokens"].shape[1] < longest + 16
        assert b["tokens"].dtype == torch.int64
        assert torch.equal(b["tokens"][:, :longest], a["tokens"].long())
        assert torch.equal(b["tokens_lengths"], a["tokens_lengths"])


def test_pad_to_with_max_length_and_batch_tokens(ds):
    """``max_length`` cuts first, so ``pad_to=max_length`` never finds a longer sample."""
    got = batches(ds, "Loader", 1, pad=0, max_length=32, pad_to=32, batch_tokens=128)
    assert {b["tokens"].shape[1] for b in got} == {32}
    assert sorted(i for b in got for i in b["y"].tolist()) == list(range(N))
    assert max(int(b["tokens_lengths"].max()) for b in got) == 32


def test_pad_to_keeps_a_compiled_model_to_one_graph(ds):
    """Pad-to-longest batches recompile for new lengths and the last batch; ``pad_to`` with
    ``drop_last`` compiles once (torch._dynamo's count, the eager backend: no C compiler)."""
    counters = pytest.importorskip("torch._dynamo.utils").counters

    def compiles(**kw: Any) -> int:
        torch._dynamo.reset()
        counters.clear()
        step = torch.compile(lambda t: (t.float() * 2).sum(1), backend="eager", dynamic=False)
        for b in chute.Loader(ds, 8, seed=1, num_workers=0, pad=0, **kw):
            step(b["tokens"].long())
        return int(counters["stats"]["unique_graphs"])

    assert compiles(pad_to=64, drop_last=True) == 1
    assert compiles() > 2


@pytest.mark.parametrize("workers", [0, 2])
def test_decoded_images_cast_to_float(tmp_path: Path, workers: int) -> None:
    """``decode=`` then ``dtype=``: the decoded uint8 images cast in the workers, the decodes
    still split across threads (batches of 32: two slices of 16)."""
    pytest.importorskip("simplejpeg")
    import io

    from PIL import Image

    rng = np.random.default_rng(5)
    data = []
    for _ in range(64):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(buf, "JPEG")
        data.append(buf.getvalue())
    chute.write(tmp_path / "i", {"image": data}, schema={"image": chute.fields.Image()})
    ds = chute.open(tmp_path / "i")
    ops = {"image": [chute.RandomResizedCrop(24), chute.RandomHorizontalFlip()]}
    opts = {"decode": ops, "num_workers": workers, "pin_memory": False}
    plain = list(chute.Loader(ds, 32, **opts))
    cast = list(chute.Loader(ds, 32, **opts, dtype={"image": torch.float32}))
    for a, b in zip(plain, cast, strict=True):
        assert b["image"].dtype == torch.float32 and b["image"].shape == (32, 3, 24, 24)
        assert torch.equal(b["image"], a["image"].float())
