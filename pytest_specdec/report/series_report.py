"""What each server was doing during a test's runs (a row's ``server_series``, analysis.series_figures): a table
for summary.md and report.html, and a figure of KV cache usage and requests waiting over time, per side."""

from __future__ import annotations

import math
from html import escape as html_escape
from pathlib import Path
from typing import BinaryIO

from .figure_kit import Row, Target, _figure, _save
from ..formatting import NOTHING
from .markup import html_table, markdown_table

SERIES_HEADER = [
    "test",
    "KV cache peak (reference / SD)",
    "KV cache mean",
    "running peak",
    "waiting peak",
    "preemptions",
    "reads (median ms each)",
]
MAX_PLOTTED = 6  # tests drawn in the figure: the first ones with a series on both sides


def _both(row: dict) -> bool:
    series = row.get("server_series") or {}
    return all(side in series and "unavailable" not in series[side] for side in ("reference", "speculative"))


def _pair(series: dict, key: str, fmt: str) -> str:
    def one(side: str) -> str:
        value = series[side].get(key)
        return NOTHING if value is None else format(value, fmt)

    return f"{one('reference')} / {one('speculative')}"


def series_cells(row: dict) -> list[str]:
    series = row["server_series"]
    reads = series["reference"]["samples"] + series["speculative"]["samples"]
    ms = max(series["reference"]["read_ms_median"], series["speculative"]["read_ms_median"])
    return [
        row["test"],
        _pair(series, "kv_cache_usage_peak", ".1%"),
        _pair(series, "kv_cache_usage_mean", ".1%"),
        _pair(series, "running_peak", "g"),
        _pair(series, "waiting_peak", "g"),
        _pair(series, "preemptions", "g"),
        f"{reads} ({ms:.1f} ms)",
    ]


def _reasons(rows: list[dict]) -> list[str]:
    found = []
    for row in rows:
        series = row.get("server_series") or {}
        for side in ("reference", "speculative"):
            if "unavailable" in (series.get(side) or {}):
                found.append(series[side]["unavailable"])
    return list(dict.fromkeys(found))


def _flags(rows: list[dict]) -> list[tuple[str, str]]:
    return [(row["test"], flag) for row in rows for flag in (row.get("server_series") or {}).get("flags") or []]


def series_markdown(rows: list[dict], escape) -> list[str]:
    shown, reasons = [r for r in rows if _both(r)], _reasons(rows)
    if not shown and not reasons:
        return []
    out = ["**What each server was doing** (its metrics read during the runs; `server_series.png` over time):", ""]
    if shown:
        out += markdown_table(SERIES_HEADER, (series_cells(r) for r in shown), escape) + [""]
    out += [f"- {escape(test)}: {escape(flag)}" for test, flag in _flags(rows)]
    out += [f"- unavailable: {escape(reason)}" for reason in reasons]
    return out + [""]


def series_section(rows: list[dict]) -> list[str]:
    shown, reasons = [r for r in rows if _both(r)], _reasons(rows)
    if not shown and not reasons:
        return []
    out = ['<section id="server-series">', "<h2>What each server was doing</h2>"]
    if shown:
        out += html_table(SERIES_HEADER, (series_cells(r) for r in shown))
    out += [f"<p>{html_escape(test)}: {html_escape(flag)}</p>" for test, flag in _flags(rows)]
    out += [f"<p>unavailable: {html_escape(reason)}</p>" for reason in reasons]
    return out + ["</section>"]


def series_plot(rows: list[Row], path: Target) -> Path | BinaryIO | None:
    """Per test (its first repeat), KV cache usage and requests waiting against time, the reference beside SD."""
    shown = [r for r in rows if _both(r)][:MAX_PLOTTED]
    if not shown:
        return None
    fig, axes = _figure(len(shown), ncols=1, panel=(8.0, 2.6))
    for ax, row in zip(axes, shown):
        waiting_ax = ax.twinx()
        for side, label, color in (("reference", "reference", "tab:blue"), ("speculative", "SD", "tab:orange")):
            run = row["server_series"][side]["first_run"]
            times, values = run["times"], run["values"]
            if "kv_cache_usage" in values:
                kv = [math.nan if v is None else 100 * v for v in values["kv_cache_usage"]]
                ax.plot(times, kv, color=color, label=f"{label}: KV cache %")
            if "waiting" in values:
                waiting = [math.nan if v is None else v for v in values["waiting"]]
                waiting_ax.step(times, waiting, where="post", color=color, linestyle=":", label=f"{label}: waiting")
        ax.set_ylabel("KV cache used (%)")
        waiting_ax.set_ylabel("requests waiting")
        ax.set_xlabel("seconds into the run")
        ax.set_title(str(row.get("test", "")).split("::")[-1], fontsize=9)
        ax.grid(True, alpha=0.3)
        handles = ax.get_legend_handles_labels()
        more = waiting_ax.get_legend_handles_labels()
        ax.legend(handles[0] + more[0], handles[1] + more[1], fontsize=7, loc="upper left", bbox_to_anchor=(1.08, 1.0))
    return _save(fig, path)
