"""Figures of the per-request acceptance analyses (see `analysis.inside_acceptance`).

- `request_length_plot`: the per-request acceptance length (tokens per drafted
  step) as a box per result, whiskers at the 5th and 95th percentiles, as the
  study "Speculative Decoding: Performance or Illusion?" draws it (Fig. 6).
- `tokens_per_step_heatmap`: request x output position, coloured by the tokens
  each step emitted, requests sorted by output length (the study's Fig. 4).

Both read only the rows' ``per_request`` entries, so a report rebuilt from
``results.json`` draws the same figures.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from .figure_kit import Row, Target, _config, _figure, _number, _save

MAX_HEATMAP_PANELS = 6


def _label(row: Row) -> str:
    info = row["per_request"]
    estimated = " (estimated)" if info.get("estimated") else ""
    return f"{_config(row)} / {row.get('workload')} / {row.get('access_pattern')}{estimated}"


def _analysed(rows: Iterable[Row]) -> list[Row]:
    return [r for r in rows if (r.get("per_request") or {}).get("per_request_lengths")]


def request_length_plot(rows: Iterable[Row], path: Target) -> Path | BinaryIO | None:
    """One box per result: the spread of per-request acceptance lengths."""
    analysed = _analysed(rows)
    series = [
        (r, [v for v in map(_number, r["per_request"]["per_request_lengths"]) if v is not None]) for r in analysed
    ]
    series = [(r, values) for r, values in series if values]
    if not series:
        return None
    fig, (ax,) = _figure(1, ncols=1, panel=(max(5.0, 1.1 * len(series) + 2.5), 4.2))
    ax.boxplot([values for _, values in series], whis=(5, 95), showfliers=True, widths=0.5)
    for i, (_, values) in enumerate(series, start=1):
        ax.plot([i] * len(values), values, ".", alpha=0.35, color="tab:blue", markersize=4)
    ax.set_xticks(range(1, len(series) + 1), [textwrap.fill(_label(r), 28) for r, _ in series], fontsize=7)
    ax.set_ylabel("acceptance length per request (tokens per drafted step)")
    ax.set_title("Per-request acceptance length (box: p25-p75, whiskers: p5-p95)", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, path)


def tokens_per_step_heatmap(rows: Iterable[Row], path: Target) -> Path | BinaryIO | None:
    """Request x output position of tokens per step, one panel per result (at most six)."""
    import numpy as np

    panels = []
    for row in _analysed(rows):
        steps = [list(s) for s in row["per_request"].get("tokens_per_step") or [] if s]
        if steps:
            panels.append((row, steps))
    if not panels:
        return None
    panels = panels[:MAX_HEATMAP_PANELS]
    fig, axes = _figure(len(panels), ncols=min(2, len(panels)), panel=(6.0, 3.6))
    image, top = None, max(max(max(s) for s in steps) for _, steps in panels)
    for ax, (row, steps) in zip(axes, panels):
        # Each step covers as many output positions as it emitted tokens; requests sorted by length.
        grid_rows = sorted(([n for n in s for _ in range(n)] for s in steps), key=len)
        width = max(len(r) for r in grid_rows)
        grid = np.full((len(grid_rows), width), math.nan)
        for i, positions in enumerate(grid_rows):
            grid[i, : len(positions)] = positions
        image = ax.imshow(
            np.ma.masked_invalid(grid), aspect="auto", cmap="Blues", vmin=1, vmax=max(top, 2), interpolation="nearest"
        )
        ax.set_xlabel("output position (tokens of drafted steps)")
        ax.set_ylabel("request (sorted by length)")
        ax.set_title(textwrap.fill(_label(row), 60), fontsize=8)
    if image is not None:
        fig.colorbar(image, ax=axes, label="tokens emitted by the step", shrink=0.8)
    return _save(fig, path)
