"""chute.windows with aligned per-token fields, labels, and per-epoch variety (a random start
offset, a per-epoch document order): every window against the epoch's stream built the
obvious way in Python; the loaders read epoch e's windows, resume exactly, and hand out other
windows in other epochs."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch
from _chat import IGNORE, chat_documents, write_chat
from hypothesis import given, settings
from hypothesis import strategies as st

import chute
from chute.order.permute import Permutation
from chute.reader.gatherable import PerEpoch
from chute.reader.window_order import ORDER_KEY, epoch_offset

EOS = 7
FIELDS = ["tokens", "loss_mask", "doc", "at"]


def epoch_stream(docs, eos, order, fill) -> dict[str, np.ndarray]:
    """The documents in ``order`` back to back, ``eos`` after each (``fill`` in the aligned
    fields there), with each token's document and position."""
    out: dict[str, list[int]] = {k: [] for k in [*FIELDS, "document_ids", "positions"]}
    for d in order:
        doc = docs[d]
        n = len(doc["tokens"]) + (eos is not None)
        for k in FIELDS:
            after = [] if eos is None else [eos if k == "tokens" else fill.get(k, 0)]
            out[k] += doc[k] + after
        out["document_ids"] += [d] * n
        out["positions"] += list(range(n))
    return {k: np.array(v, np.int64) for k, v in out.items()}


def window_labels(s: dict[str, np.ndarray], a: int, e: int, length: int, mode, use_mask):
    """The labels of stream[a:e] (padded to ``length``), position by position."""
    out = [IGNORE] * length
    for t in range(e - a):
        if mode == "next":
            u = a + t + 1
            if t + 1 < e - a and s["positions"][u] != 0 and (not use_mask or s["loss_mask"][u]):
                out[t] = int(s["tokens"][u])
        elif t > 0 and s["positions"][a + t] != 0 and (not use_mask or s["loss_mask"][a + t]):
            out[t] = int(s["tokens"][a + t])
    return out


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 20),
    seed=st.integers(0, 10_000),
    length=st.integers(1, 40),
    stride=st.one_of(st.none(), st.integers(1, 45)),
    part_size=st.one_of(st.none(), st.integers(1, 6)),
    eos=st.sampled_from([None, EOS]),
    labels=st.sampled_from([None, "next", "same"]),
    use_mask=st.booleans(),
    random_offset=st.booleans(),
    shuffle_documents=st.booleans(),
    epoch=st.integers(0, 3),
    drop_tail=st.booleans(),
)
def test_windows_are_the_epochs_stream(
    n,
    seed,
    length,
    stride,
    part_size,
    eos,
    labels,
    use_mask,
    random_offset,
    shuffle_documents,
    epoch,
    drop_tail,
):
    docs = chat_documents(n, seed)
    drop_tail = drop_tail or random_offset
    fill = {"doc": -1, "at": -2}
    with tempfile.TemporaryDirectory() as tmp:
        ds = write_chat(Path(tmp) / "chat.chute", docs, part_size)
        w = chute.windows(
            ds,
            FIELDS,
            length,
            stride,
            eos=eos,
            pad_id=-5,
            drop_tail=drop_tail,
            fill=fill,
            document_ids=True,
            positions=True,
            labels=labels,
            label_mask="loss_mask" if labels and use_mask else None,
            random_offset=random_offset,
            shuffle_documents=shuffle_documents,
            seed=seed % 5,
        )
        per_epoch = random_offset or shuffle_documents
        assert isinstance(w, PerEpoch) == per_epoch
        view = w.at_epoch(epoch) if per_epoch else w
        order = np.arange(n)
        if shuffle_documents:
            order = Permutation(n, (seed % 5, ORDER_KEY, epoch))[np.arange(n)]
        s = epoch_stream(docs, eos, order.tolist(), fill)
        total = len(s["tokens"])
        step = stride or length
        offset = epoch_offset(seed % 5, epoch, step) if random_offset else 0
        assert 0 <= offset < step
        usable = total - (step - 1 if random_offset else 0)
        want_n = len(range(0, usable - length + 1, step))
        covered = (want_n - 1) * step + length if want_n else 0
        if not drop_tail and covered < total and want_n * step < total:
            want_n += 1
        assert len(view) == want_n
        batch = view.gather(np.random.default_rng(seed).permutation(want_n))
        for row, i in enumerate(np.random.default_rng(seed).permutation(want_n).tolist()):
            a = offset + i * step
            e = min(a + length, total)
            pads = {"tokens": -5, "document_ids": -1, "positions": 0, **fill}
            for k in [*FIELDS, "document_ids", "positions"]:
                got = batch[k][row].tolist()
                assert got[: e - a] == s[k][a:e].tolist(), (k, i)
                assert got[e - a :] == [pads.get(k, 0)] * (length - (e - a)), (k, i)
            if labels:
                want = window_labels(s, a, e, length, labels, use_mask)
                assert batch["labels"][row].tolist() == want


def test_window_zero_differs_between_epochs_and_resume_is_exact(tmp_path):
    docs = chat_documents(60, 3, longest=20)
    ds = write_chat(tmp_path / "c.chute", docs, 11)
    for kw in ({"random_offset": True}, {"shuffle_documents": True, "eos": EOS}):
        w = chute.windows(ds, ["tokens", "loss_mask"], 32, **kw)
        assert not torch.equal(w.at_epoch(0)[0]["tokens"], w.at_epoch(1)[0]["tokens"])
        assert torch.equal(w.at_epoch(1)[0]["tokens"], w.at_epoch(1)[0]["tokens"])
        loader = chute.Loader(w, batch_size=4, seed=1, num_workers=2)
        epochs = []
        for e in range(3):
            loader.set_epoch(e)
            epochs.append(torch.cat([b["tokens"] for b in loader]))
            assert sorted(epochs[-1][:, 0].tolist()) == sorted(
                w.at_epoch(e).gather(np.arange(len(w)))["tokens"][:, 0].tolist()
            )
        assert not torch.equal(epochs[0], epochs[1])
        # resume in the middle of epoch 1 with another world size: the same windows
        one = chute.Loader(w, batch_size=4, seed=1, num_workers=1)
        one.set_epoch(1)
        it = iter(one)
        got = [next(it)["tokens"] for _ in range(3)]
        state = one.state_dict()
        del it
        ranks = []
        for r in range(2):
            lo = chute.Loader(w, batch_size=2, seed=1, rank=r, world_size=2, num_workers=2)
            lo.load_state_dict(state)
            ranks.append([b["tokens"] for b in lo])
        rest = [b for step in zip(*ranks, strict=True) for b in step]
        assert torch.equal(torch.cat(got + rest)[: len(w)], epochs[1])
        # chute.dataloader's worker processes read the same epoch's windows
        dl = chute.dataloader(w, batch_size=4, seed=1, num_workers=2)
        dl.set_epoch(2)
        assert torch.equal(torch.cat([b["tokens"] for b in dl]), epochs[2])


def test_every_token_once_per_epoch_with_shuffled_documents(tmp_path):
    docs = chat_documents(40, 4)
    ds = write_chat(tmp_path / "c.chute", docs, 7)
    w = chute.windows(ds, ["tokens", "at"], 16, shuffle_documents=True, drop_tail=False, pad_id=-1)
    n = sum(len(d["tokens"]) for d in docs)
    for e in (0, 1):
        b = w.at_epoch(e).gather(np.arange(len(w)))
        keep = b["tokens"] != -1
        assert int(keep.sum()) == n
        pairs = sorted(zip(b["tokens"][keep].tolist(), b["at"][keep].tolist(), strict=True))
        want = sorted((t, k) for d in docs for k, t in enumerate(d["tokens"]))
        assert pairs == want


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 30), max_size=25),
    length=st.integers(1, 40),
    seed=st.integers(0, 1000),
    dtype=st.sampled_from(["uint16", "int64", "bool", "float32"]),
)
def test_eos_rows_compiled_and_numpy_agree(lengths, length, seed, dtype):
    """Both placements of eos windows inside a part (the compiled loop, and numpy's boolean
    assignment where numba is missing) write what the stream built the obvious way holds."""
    from chute.reader.window_fill import compiled_eos, copy_rows_eos

    rng = np.random.default_rng(seed)
    values = rng.integers(0, 2, sum(lengths)).astype(dtype)
    ends = np.cumsum(lengths)
    eos_at = ends + np.arange(len(lengths))
    stream = np.insert(values, ends, 1) if len(lengths) else values
    if len(stream) < length:
        return
    x = rng.integers(0, len(stream) - length + 1, 9)
    want = np.stack([stream[a : a + length] for a in x])
    for compiled in (True, False) if compiled_eos() else (False,):
        rows = np.zeros((9, length), dtype)
        sel = np.arange(9)
        done = copy_rows_eos([(rows, values, 1)], sel, x, eos_at, length, compiled=compiled)
        assert (rows[done] == want[done]).all()
        if compiled:  # the compiled loop writes every window inside the part
            assert done.all()
