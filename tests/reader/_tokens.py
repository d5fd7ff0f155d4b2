"""Token datasets for the token-view tests: documents written as a Ragged field, in parts, and
the stream they make, computed the slow obvious way to compare with."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import chute


def documents(lengths: list[int], seed: int = 0, dtype: str = "int32") -> list[np.ndarray]:
    """Documents of these lengths; token ``t`` of document ``d`` is ``d * 1000 + t`` (so any
    token says where it came from), as ``dtype``."""
    return [(np.arange(n) + 1000 * d).astype(dtype) for d, n in enumerate(lengths)]


def write_docs(path: Path, docs: list[np.ndarray], part_size: int | None = None) -> chute.Dataset:
    """``docs`` as field ``tokens`` (declared Ragged) of a dataset at ``path``."""
    dtype = docs[0].dtype.name if docs else "int32"
    with chute.Writer(path, {"tokens": chute.Ragged(dtype)}, part_size=part_size) as w:
        for d in docs:
            w.append({"tokens": d})
    return chute.open(path)


def stream(docs: list[np.ndarray], eos: int | None = None) -> tuple[np.ndarray, ...]:
    """(tokens, document ids, positions) of the documents back to back, ``eos`` after each."""
    toks, ids, pos = [], [], []
    for d, x in enumerate(docs):
        extra = [] if eos is None else [eos]
        toks += [*x.tolist(), *extra]
        ids += [d] * (len(x) + len(extra))
        pos += list(range(len(x) + len(extra)))
    return np.array(toks, np.int64), np.array(ids, np.int64), np.array(pos, np.int64)
