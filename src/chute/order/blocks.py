"""The block shuffle for data larger than RAM, computed a batch at a time.

The ``n`` samples are cut into blocks of ``block_size`` consecutive samples (the last one may
be short). Each epoch the blocks are put in a random order (a :class:`Permutation` of the
blocks), the shuffled blocks are grouped into windows of ``window`` blocks, and the samples of
each window are shuffled among themselves (a :class:`Permutation` per window). Reads stay
near-sequential and the working set is one window, ``block_size * window`` samples.

Nothing of size ``n`` is ever built: position ``p`` of the epoch's order is located in its
window arithmetically (every block is full but one, whose place is found by inverting the
block permutation once), shuffled within the window, then mapped back through the block
permutation. O(batch) memory and time, for any ``n``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._arrays import distinct
from .permute import Permutation


class BlockPermutation:
    """Position -> sample of the block shuffle of ``n`` samples, for one ``(seed, epoch)``."""

    def __init__(self, n: int, block_size: int, window: int, seed: int, epoch: int) -> None:
        self.n, self.bs, self.window = n, block_size, window
        self.seed, self.epoch = seed, epoch
        self.nblocks = -(-n // block_size)
        self.blocks = Permutation(self.nblocks, (seed, epoch, 1))
        self.short = self.nblocks * block_size - n  # samples missing from the last block
        # the slot (position among the shuffled blocks) of the short block, if there is one
        self.short_slot = int(self.blocks.inverse(self.nblocks - 1)) if self.nblocks else 0
        self.span = block_size * window  # samples of a full window

    def __len__(self) -> int:
        return self.n

    def _window_start(self, w: np.ndarray) -> np.ndarray:
        """First position of window ``w``: full windows before it, less the short block's
        missing samples when that block lies in an earlier window."""
        return w * self.span - np.where(w > self.short_slot // self.window, self.short, 0)

    def __getitem__(self, positions: Any) -> np.ndarray:
        p = np.asarray(positions, dtype=np.int64)
        short_window = self.short_slot // self.window
        end_of_short = (short_window + 1) * self.span - self.short
        w = np.where(p < end_of_short, p // self.span, (p + self.short) // self.span)
        start = self._window_start(w)
        out = np.empty_like(p)
        for win in distinct(w).tolist():  # a batch spans one window, or a few
            at = w == win
            first_slot = win * self.window
            slots = min(self.window, self.nblocks - first_slot)
            length = slots * self.bs - (self.short if win == short_window else 0)
            k = Permutation(length, (self.seed, self.epoch, 2, win))[p[at] - start[at]]
            # k: an offset into the window's blocks laid end to end, in slot order
            if win == short_window:
                js = self.short_slot - first_slot  # the short block's slot in the window
                past = k >= js * self.bs + (self.bs - self.short)  # beyond the short block
                k = np.where(past, k + self.short, k)  # as if every block were full
            slot = first_slot + k // self.bs
            out[at] = self.blocks[slot] * self.bs + k % self.bs
        return out
