"""The views the loaders read a dataset through, built once for :class:`~chute.Loader` and
:func:`chute.dataloader` alike: the dataset (a torch Subset flattened,
``chute/reader/subset.py``), its Ragged fields cut under ``max_length=``
(``chute/reader/truncate.py``), its images decoded under ``decode=``
(``chute/loader/decode.py``), its batches cast and widened under ``dtype=`` / ``pad_to=`` /
``pad_multiple=`` (``chute/loader/finish.py``)."""

from __future__ import annotations

from typing import Any, NamedTuple

from ..reader.gatherable import Gatherable, Pad
from ..reader.subset import loadable
from ..reader.truncate import Truncated
from .decode import with_decode
from .finish import with_finish

__all__ = ["Views", "loader_views"]


class Views(NamedTuple):
    plain: Gatherable  # the dataset itself (what the order measures lengths on)
    decoded: Gatherable  # up to decode= (its view counts the skipped samples)
    dataset: Gatherable  # what the loader gathers from


def loader_views(
    ds: Any,
    who: str,
    *,
    max_length: int | None,
    decode: dict[str, Any] | None,
    seed: int,
    on_error: str,
    warn: bool,
    dtype: Any,
    pad: Pad | None,
    pad_to: int | None,
    pad_multiple: int | None,
) -> Views:
    """``ds`` as loader ``who`` (``"Loader"``, ``"dataloader"``) reads it; every argument
    checked here. ``warn``: whether the decode view warns about the samples it skips."""
    plain = loadable(ds, who)
    base = plain if max_length is None else Truncated(plain, max_length)
    decoded = with_decode(base, decode, seed, on_error, warn=warn)
    finished = with_finish(decoded, dtype, pad, pad_to, pad_multiple, f"chute.{who}")
    return Views(plain, decoded, finished)
