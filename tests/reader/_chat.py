"""A chat-template-like corpus for the aligned-field tests: documents of system / user /
assistant turns with a loss mask of 1 on the assistant's tokens only, and the pure-Python
references that pack or window them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import chute

SYSTEM, USER, ASSISTANT, END = 1, 2, 3, 4  # the template's special tokens
IGNORE = -100


def chat_documents(n: int, seed: int, longest: int = 12) -> list[dict[str, list[int]]]:
    """``n`` conversations: an optional system turn, then 0-3 user/assistant rounds (text of
    0 to ``longest`` tokens each, ids from 10). Fields: ``tokens``, ``loss_mask`` (1 on the
    assistant's text and its END), ``doc`` (the document) and ``at`` (the token's index in it),
    so that any packed or windowed token says where it came from."""
    rng = np.random.default_rng(seed)
    docs = []
    for d in range(n):
        turns = [(SYSTEM, 0)] if rng.random() < 0.5 else []
        turns += [(USER, 0), (ASSISTANT, 1)] * int(rng.integers(0, 4))
        toks: list[int] = []
        mask: list[int] = []
        for marker, trained in turns:
            text = rng.integers(10, 500, int(rng.integers(0, longest + 1))).tolist()
            toks += [marker, *text, END]
            mask += [0] + [trained] * (len(text) + 1)
        at = list(range(len(toks)))
        docs.append({"tokens": toks, "loss_mask": mask, "doc": [d] * len(toks), "at": at})
    return docs


def write_chat(
    path: Path, docs: list[dict[str, list[int]]], part_size: int | None
) -> chute.Dataset:
    schema = {
        "tokens": chute.Ragged("int32"),
        "loss_mask": chute.Ragged("uint8"),
        "doc": chute.Ragged("int32"),
        "at": chute.Ragged("int32"),
    }
    with chute.Writer(path, schema, part_size=part_size) as w:
        for doc in docs:
            w.append({k: np.array(v, schema[k].dtype) for k, v in doc.items()})
    return chute.open(path)


def labels_of(tokens: list[int], mask: list[int] | None, mode: str) -> list[int]:
    """One sequence's labels, the obvious way: the next token ("next", the last one ignored)
    or the token ("same", the first ignored), ignored where the target's mask is 0."""
    out = []
    for t in range(len(tokens)):
        target = t + 1 if mode == "next" else t
        edge = target >= len(tokens) if mode == "next" else t == 0
        if edge or (mask is not None and mask[target] == 0):
            out.append(IGNORE)
        else:
            out.append(tokens[target])
    return out


def reference_row(
    docs: list[dict[str, list[int]]],
    pieces: list[tuple[int, int, int]],
    length: int,
    pad_id: int,
    labels: str | None,
    use_mask: bool,
    fill: dict[str, int],
) -> dict[str, list[int]]:
    """A packed row built the obvious way from its pieces ``(document, start, length)``, in
    order: each field's values back to back, then padding (``pad_id`` tokens, ``fill`` or 0
    elsewhere, labels ignored)."""
    row: dict[str, list[int]] = {k: [] for k in ("tokens", "loss_mask", "doc", "at")}
    row["position_ids"], row["labels"] = [], []
    for d, s, n in pieces:
        for k in ("tokens", "loss_mask", "doc", "at"):
            row[k] += docs[d][k][s : s + n]
        row["position_ids"] += list(range(n))
        if labels:
            mask = docs[d]["loss_mask"][s : s + n] if use_mask else None
            row["labels"] += labels_of(docs[d]["tokens"][s : s + n], mask, labels)
    pad = length - len(row["tokens"])
    row["tokens"] += [pad_id] * pad
    for k in ("loss_mask", "doc", "at", "position_ids"):
        row[k] += [fill.get(k, 0)] * pad
    row["labels"] += [IGNORE] * pad
    return row
