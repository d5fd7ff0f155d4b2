"""Reading: ``chute.open`` -> a :class:`~chute.reader.dataset.Dataset` (files checked at open,
mapped read-only on use), batched gathers, Subsets, and ``chute verify``."""
