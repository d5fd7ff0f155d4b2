"""Order: which samples each rank reads at each step, a pure function of (seed, epoch, rank,
world size) (``order``); permutations that are never materialised (``permute``); the exact
per-source counts of a mix of datasets (``counts``)."""

from .order import Order
from .plan import Plan

__all__ = ["Order", "Plan"]
