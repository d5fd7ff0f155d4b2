"""A permutation of ``range(n)`` that is never materialised: ``perm[positions]`` in O(batch).

Why. ``rng.permutation(n)`` costs 8 bytes a sample and seconds per epoch at a billion samples
(8 GB, and a bare ``MemoryError`` beyond RAM); a loader only ever needs the next batch of the
order. :class:`Permutation` computes ``perm[p]`` for any positions directly, from ``(n, seed)``.

How (a well-known scheme, Black & Rogaway, "Ciphers with arbitrary finite domains", 2002):

* A Feistel network on ``k``-bit integers, ``2**k`` the smallest power of two >= ``n``
  (``k >= 2``). Each round splits ``x`` into its high ``h`` and low ``l`` bits and maps it to
  ``(lo << h) | (hi ^ F_r(lo) mod 2**h)``: a bijection of ``k``-bit integers (``lo`` passes
  through, so ``hi`` is recovered), whatever ``h`` and ``l`` are, so odd ``k`` needs no
  balancing; the halves alternate from round to round. :data:`ROUNDS` rounds.
* Round function ``F_r(v) = fmix32(v ^ key_r)`` (MurmurHash3's 32-bit finaliser: full avalanche,
  every input bit flips each output bit with probability ~1/2), round keys from numpy's
  ``SeedSequence(seed)``, whose output is specified and stable across numpy versions.
* Cycle-walking: a value ``>= n`` is encrypted again until it lands in ``[0, n)``. A bijection of
  ``[0, 2**k)`` restricted that way is a bijection of ``[0, n)``; as ``2**k < 2n`` (``k >= 2``:
  ``< 4`` for ``n <= 2``), a position takes under 2 rounds of walking on average.

Everything is vectorised over the positions in numpy ``uint64`` (wrapping arithmetic): no
Python per position. Deterministic: the same ``(n, seed)`` gives the same permutation on every
machine, numpy and Python version.

Statistical quality (``tests/order/test_permute.py`` checks it; ``benchmarks/permute.py`` measures
speed): 4 rounds of a random round function already make a pseudo-random permutation (Luby &
Rackoff); with 6 rounds of fmix32 the positions of a given sample over 2000 seeds pass a
chi-square uniformity test, fixed points average 1 (Poisson(1), as for a uniform random
permutation), ascents ``(n - 1) / 2``, and neighbouring outputs are uncorrelated. It is not
cryptographic, and ``n!`` is far larger than the key space, as for any seeded shuffle.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import ChuteError, SampleIndexError, SchemaError

__all__ = ["ROUNDS", "Permutation", "check_materialise"]

ROUNDS = 6
TABLE_BITS = 16  # round functions of inputs up to this many bits are tabulated (256 KB a round)
_M1 = np.uint32(0x85EBCA6B)
_M2 = np.uint32(0xC2B2AE35)
_S16 = np.uint32(16)
_S13 = np.uint32(13)


def _seed_words(seed: Any) -> list[int]:
    """``seed`` (an int >= 0, or a sequence of them) as SeedSequence entropy."""
    words = list(seed) if isinstance(seed, (tuple, list)) else [seed]
    for w in words:
        if isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < 0:
            raise SchemaError(f"a Permutation seed is an int >= 0 or a tuple of them, got {seed!r}")
    return [int(w) for w in words]


class Permutation:
    """A bijection of ``range(n)`` decided by ``(n, seed)``; ``perm[positions]`` computes the
    permuted indices of an int64 array of positions (or one int) without materialising it.

    ``seed``: an int >= 0 or a tuple of them (e.g. ``(seed, epoch)``). ``len(perm) == n``.
    ``perm.inverse(indices)`` gives the positions of indices. See the module docstring.
    """

    __slots__ = ("_asked", "_hi", "_keys", "_lo", "_tables", "bits", "n", "seed")

    def __init__(self, n: int, seed: Any = 0) -> None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise SchemaError(f"a Permutation's n must be an int >= 0, got {n!r}")
        if n > 2**62:
            raise SchemaError(f"a Permutation's n must be <= 2**62, got {n}")
        self.n = int(n)
        self.seed = seed
        words = _seed_words(seed)
        self.bits = max(2, (self.n - 1).bit_length())
        state = np.random.SeedSequence([*words, self.n]).generate_state(ROUNDS, np.uint32)
        self._keys = [np.uint32(k) for k in state]
        # (high bits, low bits) of the state entering each round; they swap every round
        h, lo = self.bits // 2, self.bits - self.bits // 2
        self._hi: list[int] = []
        self._lo: list[int] = []
        for _ in range(ROUNDS):
            self._hi.append(h)
            self._lo.append(lo)
            h, lo = lo, h
        self._tables: list[np.ndarray] | None = None  # F_r for every input: see _round_tables
        self._asked = 0  # positions evaluated so far without tables

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"chute.Permutation(n={self.n}, seed={self.seed!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Permutation):
            return NotImplemented
        return (self.n, _seed_words(self.seed)) == (other.n, _seed_words(other.seed))

    def __hash__(self) -> int:
        return hash((self.n, tuple(_seed_words(self.seed))))

    def __getitem__(self, positions: Any) -> Any:
        """``perm[positions]``: int64 array in, int64 array out (same shape); int in, int out."""
        return self._apply(positions, self._encrypt)

    def inverse(self, indices: Any) -> Any:
        """The positions at which ``indices`` stand: ``perm.inverse(perm[p]) == p``."""
        return self._apply(indices, self._decrypt)

    def _apply(self, positions: Any, fn: Any) -> Any:
        scalar = np.ndim(positions) == 0
        p = np.asarray(positions)
        if p.size and p.dtype.kind not in "iu":
            raise SchemaError(f"Permutation positions must be ints, got {p.dtype}")
        p = p.astype(np.int64, copy=False)
        if p.size and (p.min() < 0 or p.max() >= self.n):
            bad = p.ravel()[(p.ravel() < 0) | (p.ravel() >= self.n)][0]
            raise SampleIndexError(
                f"position {int(bad)} is out of range for a permutation of {self.n}"
            )
        x = p.ravel().view(np.uint64)  # >= 0: checked above; not written to
        if self._tables is None and max(self._lo) <= TABLE_BITS:
            self._asked += x.size
            if 4 * self._asked >= 1 << max(self._lo):
                self._tables = self._round_tables()
        out = fn(x).view(np.int64) if self.n > 1 else x.astype(np.int64)  # fresh, not p
        res = out.reshape(p.shape)
        return int(res) if scalar else res

    def _walk(self, x: np.ndarray, step: Any) -> np.ndarray:
        """Apply ``step`` until every value is < n (cycle-walking), only to those that are not."""
        y = step(x)
        n = np.uint64(self.n)
        todo = np.flatnonzero(y >= n)
        while todo.size:
            z = step(y[todo])
            y[todo] = z
            todo = todo[z >= n]
        return y

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        return self._walk(x, self._forward)

    def _decrypt(self, x: np.ndarray) -> np.ndarray:
        return self._walk(x, self._backward)

    # Round r maps the pair (A, B) (high bits, low bits; A has hi[r] bits) to (B, A ^ F_r(B)):
    # B passes through, so A is recovered. The halves are uint32 arrays (<= 31 bits each for
    # n <= 2**62): 32-bit numpy arithmetic is 2-4x faster than 64-bit.
    def _forward(self, x: np.ndarray) -> np.ndarray:
        lo0 = self._lo[0]
        a = (x >> np.uint64(lo0)).astype(np.uint32)
        b = (x & np.uint64((1 << lo0) - 1)).astype(np.uint32)
        f, tmp = np.empty_like(b), np.empty_like(b)
        for r in range(ROUNDS):
            self._round(r, b, f, tmp)
            a ^= f
            a, b = b, a
        out = a.astype(np.uint64)
        out <<= np.uint64(self._hi[-1])
        out |= b
        return out

    def _backward(self, y: np.ndarray) -> np.ndarray:
        b = (y >> np.uint64(self._hi[-1])).astype(np.uint32)  # the last round's B passed on
        a = (y & np.uint64((1 << self._hi[-1]) - 1)).astype(np.uint32)
        f, tmp = np.empty_like(b), np.empty_like(b)
        for r in reversed(range(ROUNDS)):
            self._round(r, b, f, tmp)
            a ^= f
            a, b = b, a
        out = b.astype(np.uint64)
        out <<= np.uint64(self._lo[0])
        out |= a
        return out

    def _round(self, r: int, b: np.ndarray, out: np.ndarray, tmp: np.ndarray) -> None:
        """``out = F_r(b) mod 2**hi[r]``: a table lookup once tabulated, else fmix32."""
        if self._tables is not None:
            self._tables[r].take(b, out=out, mode="clip")  # b < 2**lo[r]: no check needed
        else:
            _fmix32(b, self._keys[r], out, tmp)
            out &= np.uint32((1 << self._hi[r]) - 1)

    def _round_tables(self) -> list[np.ndarray]:
        """``F_r(v) mod 2**hi[r]`` for every ``v`` of ``lo[r]`` bits, each round: one ``take``
        a round instead of the 9 array operations of fmix32 (~3x faster on any batch, and the
        same values). Built once a Permutation has evaluated a quarter as many positions as a
        table has entries (at most ``2**TABLE_BITS``), so a one-off lookup never pays for them.
        """
        tables = []
        for r in range(ROUNDS):
            v = np.arange(1 << self._lo[r], dtype=np.uint32)
            out = np.empty_like(v)
            _fmix32(v, self._keys[r], out, np.empty_like(v))
            out &= np.uint32((1 << self._hi[r]) - 1)
            tables.append(out)
        return tables


def _fmix32(v: np.ndarray, key: np.uint32, out: np.ndarray, tmp: np.ndarray) -> None:
    """``out = fmix32(v ^ key)``: MurmurHash3's 32-bit finaliser (wrapping uint32 arithmetic)."""
    np.bitwise_xor(v, key, out=out)
    for shift, mul in ((_S16, _M1), (_S13, _M2)):
        np.right_shift(out, shift, out=tmp)
        out ^= tmp
        out *= mul
    np.right_shift(out, _S16, out=tmp)
    out ^= tmp


def check_materialise(count: int, item_bytes: int, what: str, instead: str) -> None:
    """A :class:`ChuteError` (never a bare ``MemoryError``, never swapping the machine to death)
    if ``count`` items of ``item_bytes`` would take more than half of this machine's RAM;
    ``what`` names the allocation, ``instead`` says what to do."""
    need = count * item_bytes
    if need > _memory_bound():
        raise ChuteError(
            f"{what} would allocate {need / 2**30:.1f} GiB ({count:,} x {item_bytes} bytes), "
            f"more than half of this machine's RAM ({_memory_bound() * 2 / 2**30:.1f} GiB); "
            f"{instead}"
        )


def _memory_bound() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):  # not POSIX: assume 16 GiB of RAM
        return 8 << 30
