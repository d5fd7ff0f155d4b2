"""chute.to_device: CPU pass-through here, the CUDA prefetch path on a GPU machine."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import chute
from chute.device import DeviceLoader, map_tensors, to_device
from chute.errors import ArgumentError, ArgumentValueError

HAS_CUDA = torch.cuda.is_available()


def cuda_test(f: Any) -> Any:
    """Marked ``cuda`` and skipped cleanly on a machine without CUDA."""
    return pytest.mark.cuda(pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")(f))


class Pair(NamedTuple):
    values: torch.Tensor
    shapes: torch.Tensor | None


class Counting:
    """A stateful, sized source like chute's Loader: batch i is {"x": full(i), ...}."""

    def __init__(self, n: int, rows: int = 4) -> None:
        self.n, self.rows, self.epoch, self.produced = n, rows, 0, 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        for i in range(self.produced, self.n):
            self.produced = i + 1
            yield {"x": torch.full((self.rows, 3), float(i)), "i": i, "name": f"b{i}"}
        self.produced = 0
        self.epoch += 1

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "produced": self.produced}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.produced = state["epoch"], state["produced"]


def batch_ids(batches: list[dict[str, Any]]) -> list[int]:
    return [b["i"] for b in batches]


# ---------------------------------------------------------------- CPU path


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")])
def test_cpu_passes_batches_through_unchanged(device: Any) -> None:
    src = [{"x": torch.arange(3)}, (torch.ones(2), "a"), torch.zeros(1)]
    out = list(to_device(src, device))
    assert len(out) == 3
    assert all(a is b for a, b in zip(out, src, strict=True))


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-CUDA fallback")
@pytest.mark.parametrize("device", ["cuda", 0, "cuda:1", torch.device("cuda")])
def test_cuda_requested_without_cuda_warns_once_and_passes_through(device: Any) -> None:
    src = [{"x": torch.arange(3)} for _ in range(4)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # count every warning, not once per place
        wrapped = to_device(src, device)
        for _ in range(2):  # two passes: no warning per pass or per batch
            assert [b is s for b, s in zip(wrapped, src, strict=True)] == [True] * 4
    assert len(caught) == 1 and caught[0].category is UserWarning
    message = str(caught[0].message)
    assert repr(device) in message and "stay on the CPU" in message
    assert caught[0].filename == __file__  # points at the caller's to_device line
    assert not wrapped.prefetches


@pytest.mark.parametrize("args", [(), ("auto",)])
def test_auto_picks_cuda_when_available_else_the_cpu_silently(args: tuple[str, ...]) -> None:
    src = [{"x": torch.arange(3)}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wrapped = to_device(src, *args)
        out = list(wrapped)
    assert wrapped.device.type == ("cuda" if HAS_CUDA else "cpu")
    assert wrapped.prefetches == HAS_CUDA
    assert out[0]["x"].device.type == wrapped.device.type


class Planned:
    """Work a batch carries for the device stage, as images planned for the device do."""

    def __init__(self, value: int) -> None:
        self.value = value


def _finish_planned(batch: Any) -> tuple[Any, list[torch.Tensor]]:
    if not isinstance(batch, dict) or not any(isinstance(v, Planned) for v in batch.values()):
        return batch, []
    done = {k: torch.full((2,), v.value) if isinstance(v, Planned) else v for k, v in batch.items()}
    return done, [t for k, t in done.items() if isinstance(batch[k], Planned)]


@pytest.mark.parametrize("device", ["cpu", "meta"] + (["cuda"] if HAS_CUDA else []))
def test_a_registered_batch_hook_runs_on_every_batch(
    monkeypatch: pytest.MonkeyPatch, device: str
) -> None:
    """A stage registers what to_device does to its batches (images planned for the device
    register their decode): it runs on each batch, before the copy; the image hook is one."""
    from chute.image.on_device import decode_images

    assert decode_images in chute.device._HOOKS
    monkeypatch.setattr(chute.device, "_HOOKS", list(chute.device._HOOKS))
    chute.device.register_batch_hook(_finish_planned)
    chute.device.register_batch_hook(_finish_planned)  # once only
    assert chute.device._HOOKS.count(_finish_planned) == 1
    source = [{"x": torch.zeros(2), "p": Planned(i)} for i in range(3)]
    got = list(to_device(source, device))
    assert [b["p"].device.type for b in got] == [device] * 3
    if device != "meta":
        assert [b["p"].tolist() for b in got] == [[0, 0], [1, 1], [2, 2]]


def test_len_and_reiteration_per_epoch() -> None:
    src = Counting(5)
    wrapped = to_device(src, "cpu")
    assert len(wrapped) == 5
    for _ in range(2):
        assert batch_ids(list(wrapped)) == [0, 1, 2, 3, 4]
    assert src.epoch == 2


def test_len_of_unsized_source_is_a_type_error() -> None:
    wrapped = to_device(iter([torch.ones(1)]), "cpu")
    with pytest.raises(TypeError):
        len(wrapped)


def test_other_device_gets_a_plain_to_and_keeps_structure() -> None:
    batch = {
        "img": Pair(torch.arange(6), None),
        "meta": [torch.ones(2, 2), ("s", 3)],
        "name": "n",
    }
    (out,) = list(to_device([batch], "meta"))
    assert isinstance(out["img"], Pair)
    assert out["img"].values.device.type == "meta" and out["img"].shapes is None
    assert out["meta"][0].device.type == "meta" and out["meta"][0].shape == (2, 2)
    assert out["meta"][1] == ("s", 3) and out["name"] == "n"


def test_passthrough_of_epoch_and_state() -> None:
    src = Counting(6)
    wrapped = to_device(src, "cpu")
    wrapped.set_epoch(3)
    assert src.epoch == 3
    it = iter(wrapped)
    assert batch_ids([next(it), next(it)]) == [0, 1]
    state = wrapped.state_dict()
    assert state == {"epoch": 3, "produced": 2}

    resumed = to_device(Counting(6), "cpu")
    resumed.load_state_dict(state)
    assert batch_ids(list(resumed)) == [2, 3, 4, 5]


def test_missing_passthrough_is_an_attribute_error() -> None:
    wrapped = to_device([torch.ones(1)], "cpu")
    with pytest.raises(AttributeError):
        wrapped.set_epoch(1)
    with pytest.raises(AttributeError):
        wrapped.state_dict()


@pytest.mark.parametrize("depth", [0, -1, True, 1.5, "2"])
def test_bad_depth_is_rejected(depth: Any) -> None:
    wrong_type = isinstance(depth, bool) or not isinstance(depth, int)
    with pytest.raises(ArgumentError if wrong_type else ArgumentValueError, match="depth"):
        to_device([], "cpu", depth=depth)


@pytest.mark.parametrize("device", ["gpu", -1, 1.5, None, True, "cuda:x"])
def test_bad_device_is_an_argument_error(device: Any) -> None:
    with pytest.raises(ArgumentError, match="device"):
        to_device([], device)


def test_returns_a_device_loader() -> None:
    assert isinstance(to_device([], "cpu"), DeviceLoader)


leaves = st.one_of(
    st.integers(-5, 5).map(lambda v: torch.full((2,), v)),
    st.text(max_size=3),
    st.none(),
    st.integers(),
)
nests = st.recursive(
    leaves,
    lambda kids: st.one_of(
        st.lists(kids, max_size=3),
        st.lists(kids, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=2), kids, max_size=3),
        st.tuples(kids, kids).map(lambda p: Pair(*p)),
    ),
    max_leaves=10,
)


def describe(b: Any, f: Any = lambda t: t) -> Any:
    """An independent walk of a nest: container type names, leaves, f(tensor) as lists."""
    if isinstance(b, torch.Tensor):
        return ("T", f(b).tolist())
    if isinstance(b, dict):
        return ("D", {k: describe(v, f) for k, v in b.items()})
    if isinstance(b, (list, tuple)):
        return (type(b).__name__, [describe(v, f) for v in b])
    return ("L", b)


@given(nests)
def test_map_tensors_keeps_structure_and_types(batch: Any) -> None:
    out = map_tensors(batch, lambda t: t + 1)
    assert describe(out) == describe(batch, lambda t: t + 1)


# ---------------------------------------------------------------- CUDA path


@cuda_test
@pytest.mark.parametrize("n", [0, 1, 2, 3, 7])
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_cuda_yields_every_batch_once_in_order(n: int, depth: int) -> None:
    wrapped = to_device(Counting(n), "cuda", depth=depth)
    assert wrapped.prefetches
    for _epoch in range(2):
        out = list(wrapped)
        assert batch_ids(out) == list(range(n))
        for i, b in enumerate(out):
            assert b["x"].is_cuda and b["name"] == f"b{i}"
            assert torch.equal(b["x"].cpu(), torch.full((4, 3), float(i)))


@cuda_test
def test_cuda_copies_pageable_and_pinned_nests() -> None:
    pinned = torch.arange(10, dtype=torch.float32).pin_memory()
    batch = {"r": Pair(pinned, None), "l": [torch.ones(3, dtype=torch.int64), "s"]}
    (out,) = list(to_device([batch], torch.device("cuda", 0)))
    assert isinstance(out["r"], Pair) and out["r"].shapes is None
    assert out["r"].values.is_cuda and torch.equal(out["r"].values.cpu(), pinned)
    assert out["l"][0].is_cuda and out["l"][0].sum().item() == 3 and out["l"][1] == "s"


class ReusedBuffer:
    """A source that overwrites one pinned buffer in place per batch, like a ring of one slot."""

    def __init__(self, n: int, numel: int) -> None:
        self.n, self.buf = n, torch.empty(numel).pin_memory()

    def __iter__(self):
        for i in range(self.n):
            self.buf.fill_(float(i))
            yield self.buf


@cuda_test
def test_cuda_source_buffers_are_not_overwritten_mid_copy() -> None:
    src = ReusedBuffer(12, 8 << 20)  # 32 MB per batch: the copy takes a while
    whole = [(b == i).all() for i, b in enumerate(to_device(src, "cuda", depth=3))]
    assert len(whole) == 12 and all(w.item() for w in whole)


@cuda_test
def test_cuda_consumer_on_its_own_slow_stream_reads_whole_batches() -> None:
    numel = 4 << 20
    src = [torch.full((numel,), float(i)) for i in range(8)]
    consumer = torch.cuda.Stream()
    whole = []
    with torch.cuda.stream(consumer):
        for i, b in enumerate(to_device(src, "cuda", depth=2)):
            torch.cuda._sleep(2_000_000)  # compute longer than the copy, on the consumer stream
            whole.append((b == i).all())
            del b  # memory goes back to the allocator while the consumer may still be reading
    consumer.synchronize()
    assert len(whole) == 8 and all(w.item() for w in whole)


@cuda_test
def test_cuda_state_dict_is_that_of_the_last_batch_handed_out() -> None:
    src = Counting(6)
    wrapped = to_device(src, "cuda", depth=2)
    it = iter(wrapped)
    next(it)
    next(it)
    assert src.produced == 4  # the source runs depth batches ahead ...
    assert wrapped.state_dict() == {"epoch": 0, "produced": 2}  # ... the state does not
    rest = list(it)
    assert batch_ids(rest) == [2, 3, 4, 5]
    assert wrapped.state_dict() == {"epoch": 1, "produced": 0}


@cuda_test
def test_cuda_over_a_loader_that_reuses_pinned_slots(tmp_path: Path) -> None:
    n = 96
    x = np.arange(n * 256 * 1024, dtype=np.float32).reshape(n, -1)  # 1 MB a sample
    ds = chute.open(chute.write(tmp_path / "d.chute", {"x": x, "y": np.arange(n)}))
    loader = chute.Loader(ds, 8, seed=0, num_workers=2, pin_memory=True)
    wrapped = to_device(loader, depth=3)
    seen = []
    for k, b in enumerate(wrapped):
        assert b["x"].is_cuda
        seen.append((b["y"].cpu(), b["x"]))  # kept on the GPU: its source slot is reused
        assert wrapped.state_dict()["consumed"] == min(n, 8 * (k + 1))
    assert sorted(torch.cat([y for y, _ in seen]).tolist()) == list(range(n))
    for y, xb in seen:
        assert torch.equal(xb.cpu(), torch.from_numpy(x[y.numpy()]))


@cuda_test
@pytest.mark.parametrize("workers", [0, 2])
def test_cuda_break_then_iterate_again_skips_nothing(tmp_path: Path, workers: int) -> None:
    # The wrapper pulled `depth` batches the consumer never saw: its state does not count them.
    ds = chute.open(chute.write(tmp_path / "d.chute", {"y": np.arange(80)}))
    loader = chute.Loader(ds, 8, shuffle=False, num_workers=workers)
    wrapped = to_device(loader, depth=3)

    def take(upto: int | None = None) -> list[int]:
        seen: list[int] = []
        for b in wrapped:
            seen += b["y"].cpu().tolist()
            if len(seen) == upto:
                break
        return seen

    assert take(16) == list(range(16))
    assert wrapped.state_dict()["consumed"] == 16
    assert take() == list(range(80))  # a fresh pass: the whole epoch
    loader.set_epoch(0)
    assert take(16) == list(range(16))
    wrapped.load_state_dict(wrapped.state_dict())  # continue where the consumer stopped
    assert take() == list(range(16, 80))
