"""The SLO capacity figure: each SLO metric's percentile against load, reference and SD.

One row of panels per capacity search, one panel per SLO metric: every probe
of both sides (filled where the SLO held, hollow where it failed), the
objective as a horizontal line and each side's capacity as a vertical one.
Drawn from the rows' ``capacity`` entries alone, so a report rebuilt from
``results.json`` draws the same figure.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from .figure_kit import Row, Target, _config, _figure, _number, _save

SIDES = (("reference", "tab:gray", "o"), ("speculative", "tab:blue", "s"))


def _value(detail: dict, key: str) -> float | None:
    """The probe's percentile of `key` (``ttft``, ``tpot``, ``e2el``): detail keys read ``p99_tpot_ms``."""
    for name, value in detail.items():
        if name.startswith("p") and name.endswith(f"_{key}_ms"):
            return _number(value)
    return None


def capacity_plot(rows: Iterable[Row], path: Target) -> Path | BinaryIO | None:
    searched = [r for r in rows if r.get("capacity") and r.get("slo")]
    if not searched:
        return None
    ncols = max(len(r["slo"]) for r in searched)
    fig, axes = _figure(len(searched) * ncols, ncols=ncols, panel=(5.0, 3.6))
    index = 0
    for row in searched:
        info = row["capacity"]
        unit = "request rate (req/s)" if info["over"] == "request_rate" else "max concurrency"
        for key in row["slo"]:
            ax = axes[index]
            index += 1
            for side, colour, marker in SIDES:
                # A load the client could not offer measured the client: no point on the server's curve.
                probes = sorted(
                    (p for p in info[side].get("probes") or [] if p.get("offered", True)), key=lambda p: p["load"]
                )
                points = [(p["load"], _value(p.get("detail") or {}, key), p["holds"]) for p in probes]
                points = [(x, y, held) for x, y, held in points if y is not None]
                if not points:
                    continue
                label = "SD" if side == "speculative" else "reference"
                ax.plot([x for x, _, _ in points], [y for _, y, _ in points], "-", color=colour, alpha=0.6)
                for x, y, held in points:
                    ax.plot(x, y, marker, color=colour, markerfacecolor=colour if held else "white")
                capacity = info[side].get("capacity")
                if capacity is not None:
                    ax.axvline(capacity, color=colour, linestyle=":", label=f"{label} capacity {capacity:g}")
                ax.plot([], [], marker, color=colour, label=label)
            ax.axhline(row["slo"][key], color="tab:red", linestyle="--", label=f"SLO {row['slo'][key]:g} ms")
            ax.set_xscale("log")
            ax.set_xlabel(unit)
            ax.set_ylabel(f"p{info['percentile']:g} {key.upper()} (ms)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
            ax.set_title(textwrap.fill(f"{_config(row)} / {row.get('workload')}: {key}", 60), fontsize=9)
        for ax in axes[index : index + ncols - len(row["slo"])]:
            ax.remove()  # this search declared fewer SLO metrics than another
        index += ncols - len(row["slo"])
    return _save(fig, path)
