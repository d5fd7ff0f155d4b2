"""Libraries a user might pick instead of chute. They are listed so the table says what was not
measured and how to get it measured; chute bench does not install them.

None has an adapter yet: LitData, MosaicML Streaming and WebDataset read shards in their own
shuffled order (so they cannot be checked against the bench's order), and Hugging Face
``datasets`` needs Arrow fixed-shape array features per field.
"""

from __future__ import annotations

import importlib.util

OPTIONAL = [
    # (row name, module, pip install hint)
    ("Hugging Face datasets (Arrow)", "datasets", "pip install datasets"),
    ("LitData", "litdata", "pip install litdata"),
    ("MosaicML Streaming", "streaming", "pip install mosaicml-streaming"),
    ("WebDataset", "webdataset", "pip install webdataset"),
]


def skipped() -> list[tuple[str, str]]:
    """(row name, why it was not measured) for each optional library."""
    rows = []
    for name, module, hint in OPTIONAL:
        if importlib.util.find_spec(module) is None:
            rows.append((name, f"not installed: {hint}"))
        else:
            rows.append((name, "installed, but chute bench has no adapter for it yet"))
    return rows
