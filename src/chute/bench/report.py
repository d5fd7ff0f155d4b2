"""Presenting a bench run: a plain-text table, JSON, and a PNG bar chart (matplotlib, lazily)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import require
from .measure import Result

CHUTE_ROW = "chute Loader"


@dataclass
class BenchReport:
    """A whole bench run: the setup it ran with and one :class:`Result` per contender."""

    dataset: dict[str, Any]  # source, samples, fields, bytes
    config: dict[str, Any]  # batch size, workers, seed, cache mode
    machine: dict[str, Any]
    results: list[Result] = field(default_factory=list)

    def result(self, name: str) -> Result | None:
        return next((r for r in self.results if r.name == name), None)

    def speedup(self, r: Result) -> float | None:
        """Throughput of ``r`` relative to the chute Loader, measured in the same run."""
        ref = self.result(CHUTE_ROW)
        if ref is None or not ref.samples_per_s or r.samples_per_s is None:
            return None
        return r.samples_per_s / ref.samples_per_s

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "config": self.config,
            "machine": self.machine,
            "results": [{**_public(r), "vs_chute": self.speedup(r)} for r in self.results],
        }

    def save_json(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        return path


def aligned(heads: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    """The one table printer of chute bench and benchmarks/: a header, a rule, the rows; each
    column as wide as its widest cell, right-aligned where ``right`` (numbers)."""
    widths = [max(len(str(x)) for x in col) for col in zip(heads, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            s.rjust(w) if r else s.ljust(w) for s, w, r in zip(cells, widths, right, strict=True)
        ).rstrip()

    return "\n".join([line(heads), line(["-" * w for w in widths]), *map(line, rows)])


def columns_table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str, str]]
) -> str:
    """Dict rows as an :func:`aligned` table. ``columns``: (key, header, format spec); a missing
    or None value prints as ``-``; text columns (spec ``""`` or ``"s"``) are left-aligned."""
    cells = [
        ["-" if row.get(key) is None else format(row[key], spec) for key, _, spec in columns]
        for row in rows
    ]
    right = [spec not in ("", "s") for _, _, spec in columns]
    return aligned([head for _, head, _ in columns], cells, right)


def _public(r: Result) -> dict[str, Any]:
    return {k: v for k, v in asdict(r).items() if k != "prefix"}  # prefix: one digest a batch


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def table(report: BenchReport) -> str:
    """The results as an aligned plain-text table, with a header line saying what was run."""
    d, c = report.dataset, report.config
    head = [
        "contender",
        "first batch ms",
        "samples/s",
        "MB/s",
        "vs chute",
        "peak PSS MB (anon)",
        "checksum",
    ]
    rows = []
    notes = []
    for r in report.results:
        if r.status != "ok":
            notes.append(f"  {r.name}: {r.status}: {r.reason}")
            rows.append([r.name, *(["-"] * 5), r.status])
            continue
        ok = {True: "ok", False: "MISMATCH", None: "?"}[r.checksum_ok]
        if r.stopped:
            ok += f", {r.samples / d['samples']:.0%} read"
        if r.extra.get("order") == "own":
            ok += " (own order, as a set)"
        rows.append(
            [
                r.name,
                _num(None if r.first_batch_s is None else r.first_batch_s * 1e3, ",.0f"),
                _num(r.samples_per_s, ",.0f"),
                _num(r.mb_per_s, ",.0f"),
                _num(report.speedup(r), ".2f") + "x",
                f"{_num(r.peak_pss_mb, ',.0f')} ({_num(r.peak_anon_mb, ',.0f')})",
                f"{r.checksum[:8]} {ok}",
            ]
        )
    title = (
        f"chute bench: {d['samples']:,} samples x {d['row_bytes']:,} B "
        f"({d['bytes'] / 1e6:,.0f} MB) of {d['source']}; batch {c['batch_size']}, "
        f"{c['workers']} workers, seed {c['seed']}, {c['cache']} cache"
    )
    load = report.machine.get("load_avg_1_5_15min")
    if load:
        title += f"; load average {load[0]:.1f} on {report.machine.get('cpus')} CPUs"
    out = [title, aligned(head, rows, [False] + [True] * 5 + [False])]
    if any(r.stopped for r in report.results):
        notes.insert(
            0,
            f"  'N% read': stopped at the {c['time_limit_s']:g} s time limit; "
            "throughput and checksum cover what was read",
        )
    if notes:
        out += ["", *notes]
    return "\n".join(out)


def plot(report: BenchReport, path: str | os.PathLike) -> Path:
    """Bar chart: time to first batch and throughput per contender, side by side (log scales)."""
    require("matplotlib", "bench")
    from matplotlib.figure import Figure  # the OO API: no pyplot state, no GUI backend

    rows = [r for r in report.results if r.status == "ok"]
    n = report.dataset["samples"]
    names = [f"{r.name} ({r.samples / n:.0%} read)" if r.stopped else r.name for r in rows]
    colors = [
        "#d62728" if r.name.startswith("chute") else "#7f7f7f" if "limit" in r.name else "#1f77b4"
        for r in rows
    ]
    fig = Figure(figsize=(12, 0.45 * len(rows) + 1.8), layout="constrained")
    left, right = fig.subplots(1, 2, sharey=True)
    panels: list[tuple[Any, list[float], str]] = [
        (
            left,
            [(r.first_batch_s or 0) * 1e3 for r in rows],
            "time to first batch, ms (lower: better)",
        ),
        (
            right,
            [r.samples_per_s or 0 for r in rows],
            "samples/s after the 1st batch (higher: better)",
        ),
    ]
    for ax, values, label in panels:
        ax.barh(names, values, color=colors)
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.grid(axis="x", which="both", alpha=0.3)
        for y, v in enumerate(values):
            ax.text(v, y, f" {v:,.0f}", va="center", fontsize=8)
        ax.margins(x=0.25)
    left.invert_yaxis()  # shared y axis: first contender on top
    d, c = report.dataset, report.config
    fig.suptitle(
        f"chute bench: {d['samples']:,} samples, {d['bytes'] / 1e6:,.0f} MB, batch "
        f"{c['batch_size']}, {c['workers']} workers, {c['cache']} cache, "
        f"{report.machine.get('cpus', '?')} CPUs"
    )
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path
