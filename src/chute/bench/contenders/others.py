"""Libraries a user might pick instead of chute that have no adapter yet. They are listed so the
table says what was not measured and how to get it measured; chute bench does not install them.

Hugging Face ``datasets`` and WebDataset have adapters (``hf.py``, ``webdataset.py``): they are
contenders, skipped with their install hint when missing.
"""

from __future__ import annotations

import importlib.util

OPTIONAL = [
    # (row name, module, pip install hint)
    ("LitData", "litdata", "pip install litdata"),
    ("MosaicML Streaming", "streaming", "pip install mosaicml-streaming"),
]

# Both stream shards in their own shuffled order through their own loader; an adapter would
# read one epoch in that order and be checked as a set of samples, as WebDataset is.
NO_ADAPTER = "installed, but chute bench has no adapter for it yet (reads in its own order)"


def skipped() -> list[tuple[str, str]]:
    """(row name, why it was not measured) for each optional library."""
    rows = []
    for name, module, hint in OPTIONAL:
        if importlib.util.find_spec(module) is None:
            rows.append((name, f"not installed: {hint}"))
        else:
            rows.append((name, NO_ADAPTER))
    return rows
