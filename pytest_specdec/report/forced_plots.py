"""The forced-acceptance sweep as a figure: the speedup against the forced acceptance length, with the
intervals the rule read, the break-even, and the theory's line from the c measured (analysis.forced_sweep)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from .figure_kit import Row, Target, _config, _figure, _finish_panel, _save

# What names one length in a row's config: the key as the label spells it, and the forced label.
LENGTH_WORDS = r" synthetic_acceptance_length=\S+| at forced acceptance [\d.]+"


def forced_sweeps(rows: Iterable[Row]) -> list[tuple[str, dict]]:
    """(title, curve) of every forced-acceptance sweep among the rows, once each, in the rows' order."""
    found: dict[tuple[str, str], tuple[str, dict]] = {}
    for row in rows:
        curve = row.get("forced_sweep")
        if not curve or len(curve.get("points") or ()) < 2:
            continue
        key = (str(row.get("test")), json.dumps(curve, sort_keys=True))
        config = re.sub(LENGTH_WORDS, "", _config(row))  # the sweep's, not one length's
        found.setdefault(key, (f"{config} / {row.get('workload')} ({row.get('engine')})", curve))
    return list(found.values())


def forced_sweep_plot(rows: Iterable[Row], path: Target):
    """Output-throughput speedup against the forced acceptance length, one panel per sweep."""
    sweeps = forced_sweeps(rows)
    if not sweeps:
        return None
    fig, axes = _figure(len(sweeps), ncols=min(2, len(sweeps)), panel=(5.4, 3.8))
    for ax, (title, curve) in zip(axes, sweeps):
        points = curve["points"]
        lengths = [p["length"] for p in points]
        speedups = [p["speedup"] for p in points]
        below = [max(0.0, s - p["low"]) for s, p in zip(speedups, points)]
        above = [max(0.0, p["high"] - s) for s, p in zip(speedups, points)]
        ax.errorbar(lengths, speedups, yerr=[below, above], fmt="o-", capsize=3, label="throughput speedup")
        ax.plot(lengths, [p["decode_speedup"] for p in points], "s--", label="decode (TPOT) speedup")
        if curve.get("theory_step_cost"):
            cost = curve["theory_step_cost"]
            ax.plot(lengths, [x / cost for x in lengths], ":", label=f"theory L / (1 + k*c) = L / {cost:.2f}")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        value = curve["break_even"].get("value")
        if value is not None:
            ax.axvline(value, color="tab:red", linestyle=":", label=f"break-even {value:.2f}")
        _finish_panel(ax, "forced acceptance length (tokens a step)", "speedup (SD / reference)", title)
    return _save(fig, path)
