"""Device stage: copy the next batches to the GPU while the current step computes.

``to_device(loader)`` wraps any iterable of batches (a chute ``Loader``, a torch ``DataLoader``,
a list) where a batch is a tensor or a nest of dicts / lists / tuples / NamedTuples (such as
``chute.RaggedBatch``) holding tensors; other leaves (strings, ints, ``None``) pass through.

NOTE (streams, events and buffer lifetimes, CUDA path)
    * Copies run on one side stream per wrapper, from pinned host memory (a pageable tensor is
      pinned first, which costs a host copy: let the loader pin instead, ``pin_memory=True``).
    * Up to ``depth`` batches are copied ahead of the one the consumer holds. Each copy records an
      event; on hand-off the consumer's *current* stream waits on that event (not on the whole
      side stream, which may already carry later copies), so compute never reads a half-copied
      batch and the host never blocks on the hand-off.
    * Device tensors are allocated on the side stream; ``record_stream`` on hand-off tells the
      caching allocator that the consumer's stream uses them, so their memory is not handed to a
      later copy while that stream may still read it.
    * Host side: a loader may reuse the buffers of a batch once asked for the next one (chute's
      ring of pinned slots does), so before pulling a batch from the source the copy out of the
      previous one is waited for (an event sync on the host: it only blocks when copies are the
      bottleneck). Pinned tensors made here come from torch's caching host allocator, which
      itself keeps them until their copy is done.
    * The source is iterated lazily, never more than ``depth`` batches ahead, and every batch is
      yielded exactly once, in order; at the end of the epoch the queue is drained, no batch is
      dropped or repeated. A pass left early (``break``) has pulled batches the consumer never
      saw; the source is not repositioned: the next ``iter()`` is a fresh pass of the source
      (of the whole epoch, for a chute loader or a torch ``DataLoader``), and the wrapper's
      ``state_dict()`` still names the position after the last batch handed out, so
      ``wrapped.load_state_dict(wrapped.state_dict())`` continues exactly from there. The
      source's own ``state_dict()`` counts the batches copied ahead: checkpoint through the
      wrapper.
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from ._args import check_int
from .errors import ArgumentError

__all__ = ["BatchHook", "DeviceLoader", "map_tensors", "register_batch_hook", "to_device"]

# batch -> (the batch to copy, the tensors the hook made on a device)
BatchHook = Callable[[Any], tuple[Any, list[torch.Tensor]]]
_HOOKS: list[BatchHook] = []


def register_batch_hook(hook: BatchHook) -> None:
    """Run ``hook`` on every batch :func:`to_device` hands out, before the copy (on the side
    stream with CUDA): it returns the batch to copy and the device tensors it made (whose
    memory the consumer's stream is then told about). A stage whose batches carry work for
    the device registers one when it is imported (images planned for the device:
    :mod:`chute.image.on_device`), so this module knows none of them."""
    if hook not in _HOOKS:
        _HOOKS.append(hook)


def _run_hooks(batch: Any) -> tuple[Any, list[torch.Tensor]]:
    made: list[torch.Tensor] = []
    for hook in _HOOKS:
        batch, got = hook(batch)
        made += got
    return batch, made


def map_tensors(batch: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """Apply ``fn`` to every tensor in a nest of dicts, lists, tuples and NamedTuples.

    Containers are rebuilt with the same type: NamedTuples keep their class, and so does any
    object that names its parts in ``_fields`` and is built from them by keyword (a
    ``chute.RaggedBatch``, which iterates its samples, not its parts); leaves that are not
    tensors are returned as they are.
    """
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, dict):
        return {k: map_tensors(v, fn) for k, v in batch.items()}
    fields = getattr(type(batch), "_fields", None)
    if isinstance(fields, tuple):  # NamedTuple, RaggedBatch: rebuilt part by part, by name
        return type(batch)(**{k: map_tensors(getattr(batch, k), fn) for k in fields})
    if isinstance(batch, (list, tuple)):
        return type(batch)(map_tensors(v, fn) for v in batch)
    return batch


class DeviceLoader:
    """Iterable that yields the batches of ``source`` on ``device``; made by :func:`to_device`.

    Re-iterable when ``source`` is (one pass of ``source`` per ``iter()``, i.e. per epoch).
    ``len()``, ``set_epoch``, ``state_dict`` and ``load_state_dict`` pass through to ``source``.
    """

    def __init__(
        self, source: Iterable[Any], device: torch.device, depth: int, non_blocking: bool
    ) -> None:
        self.source = source
        self.device = device
        self.depth = depth
        self.non_blocking = non_blocking
        self._stream: torch.cuda.Stream | None = None
        # State of ``source`` right after it produced the batch last handed to the consumer:
        # the source runs ``depth`` batches ahead, so its live state would skip them on resume.
        self._state: dict[str, Any] | None = None

    @property
    def prefetches(self) -> bool:
        """True when batches are copied ahead on a side CUDA stream (else a plain pass)."""
        return self.device.type == "cuda" and torch.cuda.is_available()

    def __len__(self) -> int:
        return len(self.source)  # type: ignore[arg-type]  # TypeError when source has no len

    def __iter__(self) -> Iterator[Any]:
        self._state = None
        if self.prefetches:
            return self._prefetch()
        if self.device.type == "cpu" or self.device.type == "cuda":
            # CPU, or CUDA asked for on a machine without it: a pass-through (the batch
            # hooks still run, on the CPU: the only device there is).
            it = iter(self.source)  # now, not at the first next()
            return (_run_hooks(b)[0] for b in it)
        it = iter(self.source)
        return (self._to(_run_hooks(b)[0]) for b in it)

    def _to(self, batch: Any) -> Any:
        return map_tensors(batch, lambda t: t.to(self.device, non_blocking=self.non_blocking))

    def _prefetch(self) -> Iterator[Any]:
        device = self.device
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if self._stream is None or self._stream.device != device:
            self._stream = torch.cuda.Stream(device=device)
        stream = self._stream
        snapshot = getattr(self.source, "state_dict", None)
        # (device batch, its device tensors, copy-done event, source state after it)
        pending: deque[tuple[Any, list[torch.Tensor], torch.cuda.Event, Any]] = deque()
        it = iter(self.source)
        exhausted = False
        while True:
            while not exhausted and len(pending) <= self.depth:
                if pending:
                    pending[-1][2].synchronize()  # the source may reuse those buffers now
                try:
                    src = next(it)
                except StopIteration:
                    exhausted = True
                    break
                state = snapshot() if snapshot is not None else None
                pending.append((*self._copy(src, stream), state))
            if not pending:
                self._state = None  # epoch over: the source's own state is exact again
                return
            batch, tensors, event, state = pending.popleft()
            consumer = torch.cuda.current_stream(device)
            consumer.wait_event(event)
            for t in tensors:
                t.record_stream(consumer)
            self._state = state  # kept after a break: see the NOTE
            yield batch

    def _copy(
        self, batch: Any, stream: torch.cuda.Stream
    ) -> tuple[Any, list[torch.Tensor], torch.cuda.Event]:
        tensors: list[torch.Tensor] = []

        def copy(t: torch.Tensor) -> torch.Tensor:
            if t.device.type == "cpu" and not t.is_pinned():
                t = t.pin_memory()
            out = t.to(stream.device, non_blocking=self.non_blocking)
            if out is not t:  # a tensor already on the device comes back as itself
                tensors.append(out)
            return out

        with torch.cuda.stream(stream):
            batch, made = _run_hooks(batch)  # on the side stream too (nvjpeg)
            tensors += [t for t in made if t.device.type == "cuda"]
            out = map_tensors(batch, copy)
            event = torch.cuda.Event()
            event.record(stream)
        return out, tensors, event

    def set_epoch(self, epoch: int) -> None:
        """Forward to ``source.set_epoch`` (chute ``Loader``, a sampler-driven loader)."""
        self._state = None  # the position of a pass left early belongs to the old epoch
        self.source.set_epoch(epoch)  # type: ignore[attr-defined]

    def state_dict(self) -> dict[str, Any]:
        """The source's state as of the last batch handed out (not the ones copied ahead)."""
        if self._state is not None:
            return self._state
        return self.source.state_dict()  # type: ignore[attr-defined, no-any-return]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Forward to ``source.load_state_dict``; the next ``iter()`` resumes from there."""
        self._state = None
        self.source.load_state_dict(state)  # type: ignore[attr-defined]


def to_device(
    iterable: Iterable[Any],
    device: str | int | torch.device = "auto",
    depth: int = 2,
    non_blocking: bool = True,
) -> DeviceLoader:
    """Wrap ``iterable`` so that its batches arrive on ``device``, copied ahead of time.

    On CUDA, the next ``depth`` batches are copied from pinned memory on a side stream while the
    current step computes, which hides the host-to-device copy when compute takes at least as
    long. ``device="auto"`` (the default) is CUDA when torch sees a CUDA device, else the CPU;
    on the CPU batches pass through unchanged. A CUDA device asked for by name on a machine
    without one warns (once, here) and the batches stay on the CPU, as ``pin_memory=True``
    does in torch's DataLoader and chute's loaders. Another device type gets a plain
    ``.to(device)``. Image fields planned for the device side
    (``decode={"image": chute.RandomResizedCrop(224, device="cuda")}``) are decoded here, on
    the side stream (see :mod:`chute.image.on_device`). Example::

        for batch in chute.to_device(loader):  # "auto": CUDA when there is one
            loss = model(batch["x"]).sum()
    """
    depth = check_int("depth", depth, 1)  # batches copied ahead
    target = _device(device)
    if target.type == "cuda" and not torch.cuda.is_available():
        warnings.warn(
            f"to_device({device!r}) but torch sees no CUDA device here: batches stay on the "
            "CPU (device='auto' picks CUDA when there is one, without this warning)",
            stacklevel=2,
        )
    return DeviceLoader(iterable, target, depth, non_blocking)


def _device(device: Any) -> torch.device:
    """``device`` as a ``torch.device``; an int is a CUDA index, ``"auto"`` CUDA when
    available, else the CPU."""
    if isinstance(device, bool) or not isinstance(device, (str, int, torch.device)):
        raise ArgumentError(
            f"device must be a torch.device, 'auto', a string such as 'cuda', 'cuda:1' or "
            f"'cpu', or a CUDA index, not {device!r}"
        )
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if isinstance(device, int):  # torch.device(int) raises on a machine without an accelerator
        if device < 0:
            raise ArgumentError(f"device index must be >= 0, not {device}")
        return torch.device("cuda", device)
    try:
        return torch.device(device)
    except RuntimeError as exc:
        raise ArgumentError(
            f"not a device: {device!r} ({exc}); use e.g. 'auto', 'cuda', 'cuda:1' or 'cpu'"
        ) from None
