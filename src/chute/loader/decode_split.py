"""A batch's decodes split across threads: a pass's first batch (the consumer waits for it
while the other workers have nothing to do yet) and its last ones (so that the workers end
together) are decoded by several threads at once, each a slice of the batch
(:func:`decode_split`); the Loader's threads choose how many (:func:`decode_threads`), and
:func:`chute.loader.decode.with_split` gives them a view that does it."""

from __future__ import annotations

import itertools
import os
import threading
from typing import Any

import numpy as np

from ..image.ops import Plan

__all__ = ["FIRST_SPLIT", "MIN_SPLIT", "decode_split", "decode_threads", "split_cuts"]

FIRST_SPLIT = min(4, os.cpu_count() or 1)  # threads that decode a pass's first batch
MIN_SPLIT = 16  # images per thread, at least


def decode_threads(q: int, items: int, workers: int, first_batch: bool) -> int:
    """The threads that decode a batch of work item ``q`` (of ``items`` in the pass, with
    ``workers`` worker threads): the pass's first batch by :data:`FIRST_SPLIT` (the consumer
    waits for it while the other workers have nothing to do yet), each of the last
    ``workers`` items by ``workers`` threads (a worker that finishes early would idle while
    the others end the pass: with the last batches spread over every thread, they end
    together), any other by its worker alone."""
    if first_batch:
        return FIRST_SPLIT
    return workers if workers > 1 and q >= items - workers else 1


def split_cuts(n: int, threads: int, min_per_thread: int = MIN_SPLIT) -> list[int]:
    """Where a batch of ``n`` images is cut to be decoded by ``threads`` threads at once:
    slice boundaries ``[0, ..., n]``, at most ``threads`` slices of ``min_per_thread``
    images or more (one slice: not split)."""
    k = max(1, min(threads, n // min_per_thread))
    return np.linspace(0, n, k + 1).astype(int).tolist()


def decode_split(
    enc: Any,
    h: np.ndarray,
    w: np.ndarray,
    p: Plan,
    out: np.ndarray,
    idx: Any,
    threads: int,
    min_per_thread: int = MIN_SPLIT,
) -> None:
    """``decode_planned`` with the batch cut by :func:`split_cuts`, the slices decoded at
    once by this thread and short-lived helper threads (the GIL is released while
    decoding). The same pixels as one call (a plan depends on each sample's index only)."""
    from ..image.batch_decode import as_buffers, decode_planned, plan_slice

    cuts = split_cuts(len(idx), threads, min_per_thread)
    if len(cuts) < 3:
        decode_planned(enc, h, w, p, out, idx)
        return
    bufs = as_buffers(enc)
    errors: dict[int, BaseException] = {}  # by the slice's start

    def part(a: int, b: int) -> None:
        try:
            decode_planned(bufs[a:b], h[a:b], w[a:b], plan_slice(p, a, b), out[a:b], idx[a:b])
        except BaseException as exc:  # re-raised in the calling thread, first slice first
            errors[a] = exc

    helpers = [
        threading.Thread(target=part, args=(a, b), name="chute-decode-split", daemon=True)
        for a, b in itertools.pairwise(cuts[1:])
    ]
    for t in helpers:
        t.start()
    part(cuts[0], cuts[1])
    for t in helpers:
        t.join()
    if errors:
        raise errors[min(errors)]
