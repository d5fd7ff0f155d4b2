"""``chute.mix``: several datasets read as one, in exact proportions per epoch.

Training mixes sources: 70% web text and 30% code, or a small curated set seen 3 times per
epoch next to a large one seen once. :func:`mix` returns a :class:`Mix`, which the loaders read
like a Dataset (``Loader``, ``chute.dataloader``), with a ``source`` field saying where each
sample came from. Unlike LitData (its RNG replayed on resume, a varying epoch length), Grain
(proportions rounded to small integers) or Streaming (proportion or repeat, not both), the counts
are exact, the mapping is a pure function of ``(seed, epoch)`` and resume is O(1).

Semantics, per epoch ``e`` (``N = len(mix)``, the epoch size; ``L_s`` = ``len`` of source ``s``):

* Counts. Source ``s`` contributes exactly ``count_s`` of the epoch's ``N`` positions, the same
  every epoch (``mix.counts``). With ``weights``: ``count_s = N * w_s / sum(w)`` computed exactly
  (fractions of the given floats), the floors first, then the leftover positions one each to
  the largest remainders, ties to the source given first. ``epoch_size`` defaults to the
  largest ``N`` at which no source is read more than once per epoch: ``floor(min_s L_s *
  sum(w) / w_s)`` over the sources of positive weight, i.e. the scarcest source relative to its
  weight is read (about) once. With ``repeat`` (``{"a": 3, "b": 0.5}``) instead:
  ``count_s = round(L_s * repeat_s)``, halves rounded up, and ``N = sum(count_s)``. With
  neither, ``repeat=1`` for every source (a shuffled concatenation).
* Which samples. Each source is read as an endless stream: its ``k``-th sample overall is
  ``P_{s,c}[k mod L_s]`` with ``c = k // L_s``, ``P_{s,c}`` a fresh
  :class:`~chute.order.permute.Permutation` of ``range(L_s)`` per cycle ``c``. Epoch ``e`` takes
  stream samples ``e * count_s ... (e + 1) * count_s - 1``. So every sample of a source is used
  once before any is used again, across epoch boundaries (``repeat=0.5``: epochs 0 and 1 see
  the two halves of a cycle); a source read ``r`` (integer) times per epoch sees each sample
  exactly ``r`` times. Where a cycle ends inside an epoch, the next cycle's order may bring back
  a sample that appeared earlier in that epoch (never more often than the cycle rule allows).
* Where. Position ``p`` of epoch ``e`` is slot ``q = Permutation(N, (seed, 0, e))[p]``; slots
  ``[start_s, start_s + count_s)`` belong to source ``s`` in the order given. The sources are
  thus interleaved at random even with ``shuffle=False``, and every lookup is O(batch), nothing
  materialised per epoch.

Tokens. With ``by="tokens"`` the weights are shares of *tokens*, not samples: source ``s``
counts as ``w_s / t_s`` in the rule above, ``t_s`` its tokens per sample (a
:func:`chute.windows` view's ``length``, a :func:`chute.pack`'s mean row, a dataset's mean
document length: :func:`chute.reader.tokens.tokens_per_sample`). The counts stay exact in
samples; the tokens then hold the weights within a document's worth per source.

The epoch. A mix's samples depend on the epoch, so its readers pass it: ``mix.gather(indices,
epoch=e)``, or ``mix.at_epoch(e)`` (a copy bound to ``e``, what ``Loader`` gathers from), or
``mix.set_epoch(e)`` for ``mix[i]`` / ``gather`` without ``epoch=``. ``Loader`` and
``chute.dataloader`` do this themselves from their order's epoch, so sharding across ranks with
equal steps and exact resume (``state_dict``, any world size) come from their
:class:`~chute.order.Order` over ``range(len(mix))``, unchanged. A torch ``Subset`` of a mix is
refused (its positions hold other samples each epoch): split the sources, then mix.
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .. import format as fmt
from .. import kinds
from .._args import check_int, one_index
from .._arrays import distinct
from ..batch import Pad
from ..errors import ArgumentError, ArgumentValueError
from ..kinds import empty_buffers
from ..order.counts import source_counts
from ..order.permute import Permutation
from ..order.steps import check_epoch
from .gather_args import check_gather_args, check_indices
from .mix_sources import common_schema, per_token, select
from .samples import ReadsBatches
from .subset import loadable

__all__ = ["Mix", "mix"]

SOURCE = "source"
_SOURCE_FIELD = kinds.Tensor((), "int64")


def mix(
    sources: Mapping[str, Any],
    weights: Mapping[str, float] | None = None,
    epoch_size: int | None = None,
    repeat: Mapping[str, float] | None = None,
    seed: int = 0,
    fields: Sequence[str] | None = None,
    *,
    by: str = "samples",
    source_field: str = SOURCE,
) -> Mix:
    """Datasets ``sources`` (``{name: chute Dataset or torch Subset of one}``) read as one
    :class:`Mix` of ``epoch_size`` samples per epoch, by ``weights`` or by ``repeat`` per source
    (see the module docstring for the exact counts). ``fields``: the fields to read, which
    every source must have (default: all, and all sources must have the same ones).
    ``by="tokens"``: the weights are shares of tokens. ``source_field``: the name of the field
    saying each sample's source (``"source"``), when the sources have a field of that name.
    Example::

        train = chute.mix({"web": chute.open("web.chute"), "code": chute.open("code.chute")},
                          weights={"web": 0.7, "code": 0.3})
        loader = chute.Loader(train, batch_size=256)   # batch["source"]: 0 web, 1 code
    """
    return Mix(sources, weights, epoch_size, repeat, seed, fields, by=by, source_field=source_field)


_KEEP_PERMS = 64  # Permutations a Mix keeps (a few per source and epoch are in use at once)
_KEEP_LOCATED = 4  # chunks of positions a Mix keeps located (~32k positions each)


class Mix(ReadsBatches):
    """Several chute datasets as one, exact counts per source per epoch (see the module doc).

    ``len(mix)`` is the epoch size; ``mix.sources`` the names (``batch["source"]`` indexes it);
    ``mix.counts`` the samples of each source per epoch; ``schema``, ``gather``, ``mix[i]`` and
    ``empty_batch`` as for a Dataset, plus the int64 ``source`` field. Made by :func:`mix`.
    """

    def __init__(
        self,
        sources: Mapping[str, Any],
        weights: Mapping[str, float] | None = None,
        epoch_size: int | None = None,
        repeat: Mapping[str, float] | None = None,
        seed: int = 0,
        fields: Sequence[str] | None = None,
        *,
        by: str = "samples",
        source_field: str = SOURCE,
    ) -> None:
        if by not in ("samples", "tokens") or (by == "tokens" and weights is None):
            raise ArgumentValueError(
                f"by= is 'samples' or 'tokens' (which weighs weights=), got by={by!r} with "
                f"weights={weights!r}"[:300]
            )
        self.source_field = fmt.check_field_name(source_field)
        if not isinstance(sources, Mapping) or not sources:
            raise ArgumentError(
                f"chute.mix takes a non-empty dict {{name: dataset}}, got {sources!r}"[:200]
            )
        for name in sources:
            if not isinstance(name, str):
                raise ArgumentError(f"source names are strings, got {name!r}")
        self.sources: tuple[str, ...] = tuple(sources)
        datasets = []
        for name, ds in sources.items():
            if hasattr(ds, "at_epoch"):
                what = "a mix" if isinstance(ds, Mix) else "a view whose samples change per epoch"
                raise ArgumentError(
                    f"source {name!r} is {what} ({type(ds).__name__}); a mix draws its own "
                    "order per epoch from sources that do not change: mix the datasets in one "
                    "chute.mix, or plain windows (without random_offset / shuffle_documents)"
                )
            datasets.append(loadable(ds, f"chute.mix (source {name!r})"))
        self.seed = check_int("seed", seed, 0)
        self.schema: dict[str, kinds.Field] = common_schema(
            self.sources, datasets, fields, self.source_field
        )
        self.datasets: dict[str, Any] = {
            name: select(ds, list(self.schema))
            for name, ds in zip(self.sources, datasets, strict=True)
        }
        self.schema[self.source_field] = _SOURCE_FIELD
        sizes = [len(ds) for ds in datasets]
        if by == "tokens" and weights is not None:  # a share of tokens: w_s / tokens a sample
            weights = per_token(self.sources, datasets, weights)
        self.counts: dict[str, int] = dict(
            zip(
                self.sources,
                source_counts(self.sources, sizes, weights, epoch_size, repeat),
                strict=True,
            )
        )
        self._sizes = np.array(sizes, np.int64)
        counts = np.array(list(self.counts.values()), np.int64)
        self._ends = np.cumsum(counts)
        self._starts = self._ends - counts
        self._counts = counts
        self._len = int(self._ends[-1])
        self._epoch = 0
        # the Permutations locate() used lately, by seed words: built once, not per batch
        # (their round tables then pay off); shared by at_epoch() copies, bounded
        self._perms: dict[tuple[int, ...], Permutation] = {}
        # (epoch, positions, their sources, their indices) of the chunks prepare()
        # located; shared by at_epoch() copies (the loaders prepare on the mix they were
        # given and gather from a copy)
        self._located: collections.deque[tuple[int, np.ndarray, np.ndarray, np.ndarray]]
        self._located = collections.deque(maxlen=_KEEP_LOCATED)

    # ------------------------------------------------------------------ the epoch

    @property
    def epoch(self) -> int:
        """The epoch that ``mix[i]`` and ``gather`` without ``epoch=`` read."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch`` from now on where no ``epoch=`` is given: in ``mix[i]`` and
        ``gather``. A loader made afterwards starts at this epoch; from then on the loader's
        own epoch (``loader.set_epoch``, or a whole pass moving on) decides what it loads."""
        self._epoch = check_epoch("epoch", epoch)

    def at_epoch(self, epoch: int) -> Mix:
        """A copy of this mix bound to ``epoch`` (sharing the datasets): what loaders gather
        from, so that concurrent passes never race on :meth:`set_epoch`."""
        bound = copy.copy(self)
        bound.set_epoch(epoch)
        return bound

    # ------------------------------------------------------------------ where positions are

    def __len__(self) -> int:
        return self._len

    def locate(self, positions: Any, epoch: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(source ids, sample indices in those sources)`` of ``positions`` in ``epoch``
        (default: :attr:`epoch`): int64 arrays, O(len(positions)), a pure function of
        ``(seed, epoch, positions)``."""
        pos = check_indices(positions, self._len, self, positions=True)
        e = self._epoch if epoch is None else check_epoch("epoch", epoch)
        for at_epoch, chunk, srcs, idxs in reversed(tuple(self._located)):  # newest first
            if at_epoch == e and pos.ndim == 1 and len(pos):
                # a loader's batch (or group of batches) is a run of a prepared chunk
                first = np.flatnonzero(chunk == pos[0])
                a = int(first[0]) if len(first) else len(chunk)
                if np.array_equal(chunk[a : a + len(pos)], pos):
                    return srcs[a : a + len(pos)].copy(), idxs[a : a + len(pos)].copy()
        return self._locate(pos, e)

    def prepare(self, positions: np.ndarray, epoch: int) -> None:
        """Locate ``positions`` of ``epoch`` now, in one call, for the :meth:`locate` (and
        :meth:`gather`) of any run of them later. The loaders call it with each chunk of
        ~32k positions their order computes, of which each batch is a run: a permutation of
        256 random positions costs ~50 us in numpy calls, of 32k a few ns a position."""
        pos = np.array(positions, np.int64)
        src, idx = self._locate(pos, epoch)
        self._located.append((epoch, pos, src, idx))

    def _locate(self, pos: np.ndarray, e: int) -> tuple[np.ndarray, np.ndarray]:
        slot = self._permutation(self._len, (self.seed, 0, e))[pos]
        src = np.searchsorted(self._ends, slot, side="right").astype(np.int64)
        kth = slot - self._starts[src]  # the k-th of its source this epoch, k < its count
        idx = np.empty_like(pos)
        for s in distinct(src).tolist():
            mine = src == s
            size = int(self._sizes[s])
            # the source's stream position e * count + k, split into (cycle, within): the
            # epoch's part in exact Python ints (e * count passes int64 for epochs past
            # ~2**63 / count), the rest in int64 (within + k < size + count)
            base_cycle, base_within = divmod(e * int(self._counts[s]), size)
            cycles, within = np.divmod(base_within + kth[mine], size)
            got = np.empty(len(cycles), np.int64)
            for c in distinct(cycles).tolist():
                at = cycles == c
                perm = self._permutation(size, (self.seed, 1, s, base_cycle + c))
                got[at] = perm[within[at]]
            idx[mine] = got
        return src, idx

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (to DataLoader workers) without the caches: each process makes its own."""
        return {**self.__dict__, "_perms": {}, "_located": collections.deque(maxlen=_KEEP_LOCATED)}

    def _permutation(self, n: int, seed: tuple[int, ...]) -> Permutation:
        perm = self._perms.get(seed)
        if perm is None:
            if len(self._perms) >= _KEEP_PERMS:
                self._perms.clear()
            perm = self._perms[seed] = Permutation(n, seed)
        return perm

    # ------------------------------------------------------------------ reading

    def gather(
        self,
        indices: Any,
        out: Mapping[str, torch.Tensor] | None = None,
        pad: Pad | None = None,
        *,
        epoch: int | None = None,
    ) -> dict[str, Any]:
        """Positions ``indices`` of ``epoch`` (default :attr:`epoch`) as one batch, in the order
        given, as :meth:`chute.Dataset.gather` returns it (``out=``, ``pad=`` likewise), plus
        ``source`` (int64, an index into :attr:`sources`). One gather per source hit."""
        check_gather_args(self.schema, out, pad, "mix with fields=")
        src, idx = self.locate(indices, epoch)
        b = len(idx)
        parts = []  # (positions in the batch, the source's sub-batch)
        for s in distinct(src).tolist():
            where = np.flatnonzero(src == s)
            parts.append((where, self.datasets[self.sources[s]].gather(idx[where])))
        batch: dict[str, Any] = {}
        for name, f in self.schema.items():
            got = (
                [(np.arange(b), src)]
                if name == self.source_field
                else [(w, sub[name]) for w, sub in parts]
            )
            batch.update(f.merge_batches(name, b, got, out, pad))
        return batch

    def __getitem__(self, i: Any) -> dict[str, Any]:
        """Position ``i`` of the current :attr:`epoch` as one sample, with its ``source``."""
        i = one_index(i, "a Mix is indexed by an int position")
        src, idx = self.locate([i])
        sample = dict(self.datasets[self.sources[int(src[0])]][int(idx[0])])
        sample[self.source_field] = torch.tensor(int(src[0]), dtype=torch.int64)
        return sample

    def empty_batch(self, batch_size: int, pin_memory: bool = False) -> dict[str, torch.Tensor]:
        """Pre-allocated ``out=`` buffers for :meth:`gather`, one per fixed-shape field."""
        return empty_buffers(self.schema, batch_size, pin_memory)

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{n!r}: {self.counts[n]} of {s}"
            for n, s in zip(self.sources, self._sizes.tolist(), strict=True)
        )
        return f"chute.Mix({{{parts}}}, {self._len} per epoch, seed={self.seed})"
