"""The sources of a :func:`chute.mix`, checked and narrowed when the mix is made: the fields
they share (each of one kind, dtype and shape everywhere), token weights turned into sample
weights (``by="tokens"``), and each source reading only the mix's fields."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import kinds
from ..errors import ArgumentError, ArgumentValueError, SchemaError
from .dataset import Dataset
from .subset import SubsetDataset
from .tokens import tokens_per_sample

__all__ = ["common_schema", "per_token", "select"]


def common_schema(
    names: tuple[str, ...], datasets: list[Any], fields: Sequence[str] | None, source: str
) -> dict[str, kinds.Field]:
    """The fields the mix reads: ``fields``, or all (then every source must have the same);
    every field the same kind, dtype and shape in every source. Else a SchemaError."""
    schemas = [dict(ds.schema) for ds in datasets]
    if isinstance(fields, str):
        raise ArgumentError("fields= takes a list of field names, not a string")
    common = [k for k in schemas[0] if all(k in sc for sc in schemas)]
    if fields is None:
        odd = {
            n: sorted(set(sc) - set(common))
            for n, sc in zip(names, schemas, strict=True)
            if set(sc) != set(common)
        }
        if odd:
            extra = "; ".join(f"{n!r} also has {f}" for n, f in odd.items())
            raise SchemaError(
                f"the sources have different fields ({extra}); pass fields= with common ones, "
                f"e.g. fields={common}"
            )
        wanted = common
    else:
        wanted = list(fields)
        for n, sc in zip(names, schemas, strict=True):
            missing = [k for k in wanted if k not in sc]
            if missing:
                raise SchemaError(
                    f"source {n!r} has no field(s) {missing}; its fields are {sorted(sc)}, the "
                    f"fields all sources have are {common}"
                )
    if source in wanted:
        raise SchemaError(
            f"the sources have a field {source!r}, which would clash with the mix's own "
            f"{source!r} field; pass fields= without it, or source_field= another name"
        )
    for k in wanted:
        specs = {n: sc[k] for n, sc in zip(names, schemas, strict=True)}
        if len(set(specs.values())) > 1:
            got = ", ".join(f"{n!r}: {f.describe()}" for n, f in specs.items())
            raise SchemaError(
                f"field {k!r} differs between the sources ({got}); convert one, or leave the "
                "field out with fields="
            )
    return {k: schemas[0][k] for k in wanted}


def per_token(
    names: tuple[str, ...], datasets: list[Any], weights: Mapping[str, float]
) -> Mapping[str, Any]:
    """Token weights as sample weights: each source's weight over its tokens per sample
    (what is not a positive number is left for source_counts to name)."""
    if not isinstance(weights, Mapping):
        return weights
    out: dict[str, Any] = {}
    for name, ds in zip(names, datasets, strict=True):
        w = weights.get(name)
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not w:
            out[name] = w
            continue
        per = tokens_per_sample(ds, f"chute.mix(by='tokens') (source {name!r})")
        if per <= 0:
            raise ArgumentValueError(
                f"chute.mix(by='tokens'): source {name!r} has no tokens but weight {w}"
            )
        out[name] = w / per
    return out


def select(ds: Any, wanted: list[str]) -> Any:
    """``ds`` reading only the fields ``wanted`` (a chute Dataset, also under a Subset, is
    narrowed, O(1); another chute dataset is gathered whole and the rest dropped)."""
    if list(ds.schema) == wanted:
        return ds
    if isinstance(ds, SubsetDataset):
        return SubsetDataset(select(ds.dataset, wanted), np.array(ds.indices))
    if isinstance(ds, Dataset):  # as to_memory() does: the files open() saw, fewer fields
        narrowed = Dataset.__new__(Dataset)
        narrowed.__setstate__({**ds.__getstate__(), "fields": wanted})
        return narrowed
    return ds
