"""PNG figures for the session report, drawn from plain per-configuration result rows.

matplotlib is imported inside the drawing functions only: importing this module
(and so collecting tests) must stay cheap, and a run that writes no report never
pays for matplotlib. Figures are standalone ``Figure`` objects on an Agg canvas,
never pyplot, so no global figure state leaks between calls or threads.
"""

from __future__ import annotations

import math
import io
import os
import statistics
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..atomic import write_atomic
from .figure_kit import DPI, Row, Target, _config, _figure, _number, _save  # noqa: F401 - Row, Target re-exported
from ..verdict.metric_names import geometric_mean
from ..load.patterns import CATALOG as PATTERN_CATALOG
from ..load.workloads import CATALOG as WORKLOAD_CATALOG
from ..formatting import UNAVAILABLE

# Axes follow the catalogs' order (the published tables' order); other names come after.
WORKLOAD_ORDER = tuple(WORKLOAD_CATALOG)
PATTERN_ORDER = tuple(PATTERN_CATALOG)


def sweeps(rows: Iterable[Row]) -> dict[tuple[str, str], list[Row]]:
    """Rows grouped by (config, workload), keeping groups that span >= 2 concurrency levels.

    Only closed-loop rows count (request rate unlimited, as ``concurrency_sweep``
    sends): with a rate limit, concurrency is a cap, not the load.  Each group
    is sorted by ``max_concurrency`` (stable, so repeats keep their order).
    """
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        closed_loop = row.get("request_rate") in ("inf", float("inf"))
        if closed_loop and isinstance(row.get("max_concurrency"), int):
            groups.setdefault((_config(row), str(row.get("workload"))), []).append(row)
    return {
        key: sorted(members, key=lambda r: r["max_concurrency"])
        for key, members in groups.items()
        if len({r["max_concurrency"] for r in members}) >= 2
    }


def speedup_heatmap(rows: Iterable[Row], path: Target) -> Path | BinaryIO | None:
    """Workload x access-pattern grid of speedup, one panel per SD config."""
    configs, workloads, patterns, cells = _heatmap_data(rows)
    if not cells:
        return None
    import numpy as np
    from matplotlib.colors import TwoSlopeNorm

    values = list(cells.values())
    # One norm for all panels keeps colours comparable. The span is symmetric about 1.0 so a
    # marginal 0.98x is not painted deep red just because it happens to be the minimum.
    span = max(0.05, max(abs(v - 1.0) for v in values))
    norm = TwoSlopeNorm(vcenter=1.0, vmin=max(1e-3, min(min(values), 1.0 - span)), vmax=max(max(values), 1.0 + span))
    fig, axes = _figure(
        len(configs), ncols=min(3, len(configs)), panel=(1.2 * len(patterns) + 2.0, 0.5 * len(workloads) + 1.6)
    )
    cmap = _cmap("RdYlGn")
    image = None
    for ax, config in zip(axes, configs):
        grid = np.array([[cells.get((config, w, p), np.nan) for p in patterns] for w in workloads])
        image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, norm=norm, aspect="auto")
        for (i, j), v in np.ndenumerate(grid):
            if not math.isnan(v):
                r, g, b, _ = cmap(norm(v))
                dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5
                ax.text(j, i, f"{v:.2f}x", ha="center", va="center", fontsize=9, color="white" if dark else "black")
        ax.set_xticks(range(len(patterns)), patterns, rotation=30, ha="right", fontsize=8)
        ax.set_yticks(range(len(workloads)), workloads, fontsize=8)
        # Labels of real configs run long (draft paths, flags): wrap, never overlap a neighbour.
        ax.set_title(textwrap.fill(config, 36), fontsize=9)
    fig.colorbar(image, ax=list(axes), shrink=0.8, label="speedup (SD / reference)")
    fig.suptitle("Output-throughput speedup")
    return _save(fig, path)


def concurrency_sweep_plot(rows: Iterable[Row], path: Target) -> Path | BinaryIO | None:
    """Throughput and median TPOT against concurrency, one row of two panels per sweep."""
    groups = {k: v for k, v in sweeps(rows).items() if _has_sweep_metrics(v)}
    if not groups:
        return None
    fig, axes = _figure(2 * len(groups), ncols=2, panel=(5.0, 3.4))
    for n, ((config, workload), members) in enumerate(groups.items()):
        levels = sorted({r["max_concurrency"] for r in members})
        at = {c: [r for r in members if r["max_concurrency"] == c] for c in levels}
        gm = geometric_mean(_median(r.get("speedup_output_throughput") for r in at[c]) for c in levels)
        gm_text = f"{gm:.2f}x" if not math.isnan(gm) else UNAVAILABLE
        for ax, metric, ylabel in (
            (axes[2 * n], "output_throughput", "output throughput (tok/s)"),
            (axes[2 * n + 1], "median_tpot_ms", "median TPOT (ms)"),
        ):
            for side, style in (("reference", "o--"), ("speculative", "s-")):
                points = [(c, _median((r.get(side) or {}).get(metric) for r in at[c])) for c in levels]
                points = [(c, y) for c, y in points if y is not None]
                if points:
                    ax.plot(*zip(*points), style, label=side if side == "reference" else "SD")
            if metric == "output_throughput" and (cross := _crossover(at, levels)) is not None:
                ax.axvline(cross, color="tab:red", linestyle=":", label=f"SD stops paying at {cross:.3g}")
            ax.set_xscale("log")
            ax.set_xticks(levels, [str(c) for c in levels], fontsize=8)
            ax.minorticks_off()  # log minor ticks would crowd the few labelled levels
            ax.set_xlabel("max concurrency")
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
            if ax.lines:
                ax.legend(fontsize=8)
            ax.set_title(textwrap.fill(f"{config} / {workload}  (geomean speedup {gm_text})", 60), fontsize=9)
    return _save(fig, path)


def acceptance_bars(rows: Iterable[Row], path: Target) -> Path | BinaryIO | None:
    """Grouped bars of acceptance rate per draft position, one series per row."""
    series = []
    for row in rows:
        rates = [_number(v) for v in row.get("per_position_acceptance") or []]
        if any(v is not None for v in rates):
            label = " / ".join(str(row.get(f) or "?") for f in ("workload", "access_pattern"))
            series.append((f"{_config(row)} / {label}", rates))
    if not series:
        return None
    k = max(len(rates) for _, rates in series)
    width = 0.8 / len(series)
    fig, (ax,) = _figure(1, ncols=1, panel=(max(6.0, 0.5 * k * min(len(series), 6) + 3.0), 4.0))
    for i, (label, rates) in enumerate(series):
        xs = [p + 1 + (i - (len(series) - 1) / 2) * width for p in range(len(rates))]
        ax.bar(xs, [math.nan if v is None else v for v in rates], width=width, label=label)
    ax.set_xticks(range(1, k + 1))
    ax.set_xlim(0.5, k + 0.5)
    ax.set_ylim(0.0, 1.0)
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance rate")
    ax.set_title("Per-position acceptance")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


@dataclass(frozen=True)
class PlotImage:
    """One report figure drawn in memory: its file name in the report directory, what it shows, PNG bytes."""

    name: str
    title: str
    png: bytes


def figure_catalog() -> tuple[tuple[str, str, Callable[[list[Row], Target], Any]], ...]:
    """(file name, title, drawing function) of every report figure, in the order the report shows them."""
    from .acceptance_plots import request_length_plot, tokens_per_step_heatmap
    from .forced_plots import forced_sweep_plot
    from .frontier_report import frontier_plot
    from .group_figures import category_plot, turn_plot
    from .slo_plots import capacity_plot
    from .series_report import series_plot

    return (
        ("speedup_heatmap.png", "Output-throughput speedup by workload and access pattern", speedup_heatmap),
        ("concurrency_sweep.png", "Throughput and TPOT against concurrency", concurrency_sweep_plot),
        ("throughput_interactivity_frontier.png", "Tok/s per GPU against tok/s per user, both sides", frontier_plot),
        ("acceptance_per_position.png", "Acceptance rate per draft position", acceptance_bars),
        ("forced_acceptance_sweep.png", "Speedup against a forced acceptance length", forced_sweep_plot),
        ("request_acceptance_length.png", "Per-request acceptance length", request_length_plot),
        ("tokens_per_step.png", "Tokens emitted per step, request by output position", tokens_per_step_heatmap),
        ("slo_capacity.png", "SLO capacity: percentiles against load", capacity_plot),
        ("per_category.png", "Acceptance length and TPOT speedup per prompt category", category_plot),
        ("per_turn.png", "Acceptance length and TPOT speedup per conversation turn", turn_plot),
        ("server_series.png", "What each server was doing: KV cache usage and requests waiting over time", series_plot),
    )


def render_plots(rows: Iterable[Row]) -> list[PlotImage]:
    """Every figure the rows support, as PNG bytes in memory (for files and for report.html alike)."""
    rows = list(rows)
    made = []
    for name, title, draw in figure_catalog():
        buffer = io.BytesIO()
        if draw(rows, buffer) is not None:
            made.append(PlotImage(name, title, buffer.getvalue()))
    return made


def write_plots(
    rows: Iterable[Row], directory: str | os.PathLike, images: Iterable[PlotImage] | None = None
) -> list[Path]:
    """Write every figure the rows support (or the given `images`) into ``directory``; return the written paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return [
        write_atomic(directory / image.name, image.png) for image in (render_plots(rows) if images is None else images)
    ]


# ----------------------------------------------------------------------------- helpers


def _median(values: Iterable[Any]) -> float | None:
    found = [v for v in map(_number, values) if v is not None]
    return statistics.median(found) if found else None


def _ordered(names: Iterable[str], catalog: tuple[str, ...]) -> list[str]:
    seen = list(dict.fromkeys(names))
    known = [n for n in catalog if n in seen]
    return known + [n for n in seen if n not in catalog]


def _heatmap_data(rows: Iterable[Row]):
    found: dict[tuple[str, str, str], list[float]] = {}
    for row in rows:
        v = _number(row.get("speedup_output_throughput"))
        if v is not None:
            key = (_config(row), str(row.get("workload")), str(row.get("access_pattern")))
            found.setdefault(key, []).append(v)
    cells = {key: statistics.median(vs) for key, vs in found.items()}
    configs = list(dict.fromkeys(c for c, _, _ in cells))
    workloads = _ordered((w for _, w, _ in cells), WORKLOAD_ORDER)
    patterns = _ordered((p for _, _, p in cells), PATTERN_ORDER)
    return configs, workloads, patterns, cells


def _crossover(at: dict[int, list[Row]], levels: list[int]) -> float | None:
    """The interpolated concurrency where the sweep's median speedup crosses 1, if it does."""
    from ..load.crossover import crossover

    speedups = [(c, _median(r.get("speedup_output_throughput") for r in at[c])) for c in levels]
    found = crossover([(c, math.nan if s is None else s) for c, s in speedups])
    return found.value if found.status == "crosses" else None


def _has_sweep_metrics(members: list[Row]) -> bool:
    return any(
        _number((r.get(side) or {}).get(m)) is not None
        for r in members
        for side in ("reference", "speculative")
        for m in ("output_throughput", "median_tpot_ms")
    )


def _cmap(name: str):
    import matplotlib

    # Masked (missing) cells draw as blank paper rather than a misleading colour.
    return matplotlib.colormaps[name].with_extremes(bad="white")
