"""A field kind written by the recipe of docs/field_kinds.md and nothing else: mono PCM audio
per sample, stored as int16 values + offsets and read back as float32 in [-1, 1). It is what
an ``audio.py`` in ``src/chute/kinds/`` would hold; its test adds it to the registry."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from chute.batch import RaggedBatch
from chute.columns.gather import FieldPart, Piece, batch_pieces, gather_var
from chute.columns.values import prepare_var, to_array
from chute.errors import FormatError, SchemaError
from chute.kinds.kind import Sampler, VarKind

SCALE = 32768.0  # int16 full scale: -32768..32767 <-> -1.0..32767/32768


@dataclass(frozen=True)
class Audio(VarKind):
    """A 1-D waveform per sample at ``sample_rate`` Hz: written from floats in [-1, 1]
    (rounded to int16) or int16 arrays, read back as float32. Stored as
    ``NAME.values.npy`` (int16) + ``NAME.offsets.npy``."""

    sample_rate: int = 16000
    kind: ClassVar[str] = "audio"
    dtype: ClassVar[str] = "int16"  # type: ignore[misc]
    inner_shape: tuple[int | None, ...] = field(default=(), init=False)
    pads: ClassVar[bool] = True
    cuts: ClassVar[bool] = True  # a batch is a RaggedBatch: a Loader may gather several at once

    def __post_init__(self) -> None:
        rate = self.sample_rate
        if type(rate) is not int or not 1 <= rate <= 1_000_000:
            raise SchemaError(f"Audio: sample_rate must be an int in 1..1000000, got {rate!r}")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "sample_rate": self.sample_rate}

    @classmethod
    def from_json(cls, name: str, obj: dict[str, Any]) -> Audio:
        try:
            return cls(obj.get("sample_rate"))  # type: ignore[arg-type]
        except SchemaError as exc:
            raise FormatError(f"field {name!r}: {exc}") from None

    def describe(self) -> str:
        return f"audio {self.sample_rate} Hz"

    def prepare(self, values: Any, name: str, start: int, auto: bool) -> Any:
        return prepare_var(values, self, name, start, _pcm_row(name))

    def sampler(self) -> Sampler:
        stored = super().sampler()  # the int16 samples as a tensor

        def sample(col: Mapping[str, np.ndarray], j: int, at: FieldPart) -> Any:
            return stored(col, j, at).float() / SCALE

        return sample

    def take(self, col: Mapping[str, np.ndarray], a: int, b: int, at: FieldPart) -> Any:
        return _as_float(super().take(col, a, b, at))

    def gather(
        self, name: str, pieces: Sequence[Piece], b: int, out: Mapping[str, Any] | None, pad: Any
    ) -> dict[str, Any]:
        rb = gather_var(pieces, self.dtype, self.inner_shape, b)
        return self._padded(name, _as_float(rb), pad)

    def merge_batches(
        self, name: str, b: int, parts: Sequence[tuple[np.ndarray, Any]], out: Any, pad: Any
    ) -> dict[str, Any]:
        rb = gather_var(batch_pieces(parts, name), "float32", (), b)  # gathered: float already
        return self._padded(name, rb, pad)


def _as_float(rb: RaggedBatch) -> RaggedBatch:
    return RaggedBatch(rb.values.float() / SCALE, rb.offsets)


def _pcm_row(name: str) -> Callable[[Any, int], np.ndarray]:
    """One sample of Audio field ``name`` as int16: a 1-D int16 array as it is, floats scaled
    from [-1, 1] and rounded (clipped at full scale)."""

    def row(value: Any, index: int) -> np.ndarray:
        arr, dtype, _ = to_array(value, name, index)
        if arr.ndim != 1 or not (dtype == "int16" or arr.dtype.kind == "f"):
            raise SchemaError(
                f"field {name!r}, sample {index}: Audio takes a 1-D float or int16 waveform, "
                f"got {dtype} {arr.shape}"
            )
        if dtype == "int16":
            return np.ascontiguousarray(arr)
        return np.clip(np.round(arr * SCALE), -SCALE, SCALE - 1).astype(np.int16)

    return row
