"""Trends people can see: a plot per series with its change points, and a Markdown section for a PR.

matplotlib is imported inside the drawing function only (as report.plots
does), on a standalone Agg figure, so reading a history costs nothing extra.
"""

from __future__ import annotations

import io
import math

from .changepoints import Detection, SeriesReport

DPI = 110
# A trend fits a 1280 px page: past this width sessions crowd closer and only every n-th commit is named
# (a 120-session history drew a 4499 px strip).
MAX_WIDTH_IN = 11.0
MAX_TICK_LABELS = 40


def _commit(point) -> str:
    return (point.commit or "?")[:8]


def environment_words(fingerprint: dict | None) -> str | None:
    """A series' environment as a reader names it (engine, version, hardware), not by its key's hash."""
    if not fingerprint:
        return None
    parts = [
        f"{fingerprint.get('engine') or '?'} {fingerprint.get('engine_version') or ''}".strip(),
        str(fingerprint.get("device_name") or fingerprint.get("device_kind") or ""),
    ]
    count = fingerprint.get("device_count")
    if count and fingerprint.get("device_kind") == "gpu":
        parts[-1] = f"{count}x {parts[-1]}"
    return " on ".join(p for p in parts if p)


def trend_png(report: SeriesReport, *, threshold: float | None = None, environment: str | None = None) -> bytes:
    """One series as a PNG: each session's value (with its repeat range), the segments' means, each change
    point as a vertical line named by the commits on either side; x ticks are the sessions' commits; a
    legend says what each mark is, the title which test, figure and environment."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    points = report.points
    xs = list(range(1, len(points) + 1))
    figure = Figure(figsize=(min(MAX_WIDTH_IN, max(6.0, 0.32 * len(points) + 2.5)), 3.6), dpi=DPI)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    values = [p.value for p in points]
    lower = [p.value - p.low if p.low is not None else 0.0 for p in points]
    upper = [p.high - p.value if p.high is not None else 0.0 for p in points]
    colors = ["#c0392b" if p.outcome == "failed" else "#1f77b4" for p in points]
    if any(lower) or any(upper):
        axes.errorbar(xs, values, yerr=[lower, upper], fmt="none", ecolor="#9bbcd9", elinewidth=1, capsize=2)
    axes.plot(xs, values, color="#1f77b4", linewidth=1, alpha=0.6)
    axes.scatter(xs, values, c=colors, s=18, zorder=3)
    starts = [0] + [cp.index for cp in report.change_points] + [len(points)]
    for begin, end in zip(starts, starts[1:]):
        if end > begin:
            mean = sum(values[begin:end]) / (end - begin)
            axes.hlines(mean, begin + 0.6, end + 0.4, colors="#555555", linestyles="dashed", linewidth=1)
    for cp in report.change_points:
        failing = threshold is not None and cp.regression and -cp.change > threshold
        color = "#c0392b" if cp.regression else "#2e8b57"
        axes.axvline(cp.index + 0.5, color=color, linewidth=2 if failing else 1.2)
        axes.annotate(
            f"{cp.change:+.1%}\n{_commit(cp.before)}→{_commit(cp.after)}",
            xy=(cp.index + 0.5, 1.0),
            xycoords=("data", "axes fraction"),
            ha="center",
            va="bottom",
            fontsize=7,
            color=color,
        )
    every = math.ceil(len(points) / MAX_TICK_LABELS) or 1
    axes.set_xticks(xs[::every])
    axes.set_xticklabels([_commit(p) for p in points[::every]], rotation=60, ha="right", fontsize=6)
    axes.set_ylabel(report.metric, fontsize=8)
    where = environment or f"environment {report.fingerprint_key}"
    axes.set_title(f"{report.test}: {report.metric}\n{where}", fontsize=8, pad=22)
    legend = [
        Line2D([], [], color="#1f77b4", marker="o", linewidth=1, markersize=4, label="a session"),
        Line2D([], [], color="#c0392b", marker="o", linewidth=0, markersize=4, label="a failed session"),
        Line2D([], [], color="#555555", linestyle="dashed", linewidth=1, label="segment mean"),
    ]
    if any(cp.regression for cp in report.change_points):
        legend.append(Line2D([], [], color="#c0392b", linewidth=1.5, label="change point: regression"))
    if any(not cp.regression for cp in report.change_points):
        legend.append(Line2D([], [], color="#2e8b57", linewidth=1.5, label="change point: improvement"))
    axes.legend(handles=legend, fontsize=6, loc="best", framealpha=0.8)
    finite = [v for v in values if math.isfinite(v)]
    if finite and min(finite) >= 0 and report.metric.startswith(("speedup_", "acceptance_")):
        axes.set_ylim(bottom=0)
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def markdown_section(detection: Detection, *, warn_only: bool = False, title: str = "Performance history") -> str:
    """A Markdown section for a pull-request comment or the GitHub step summary."""
    failing = detection.failing
    if failing and not warn_only:
        headline = (
            f"**{len(failing)} series regressed** at their newest change point (threshold {detection.threshold:.0%})."
        )
    elif failing:
        headline = (
            f"**Warning:** {len(failing)} series regressed at their newest change point "
            f"(threshold {detection.threshold:.0%}; warn-only)."
        )
    else:
        headline = f"No series regressed at its newest change point (threshold {detection.threshold:.0%})."
    lines = [
        f"## {title}",
        "",
        headline,
        "",
        f"Change points by Apache Otava {detection.otava_version or '-'} (E-divisive means).",
        "",
        "| test | metric | sessions | newest change point | change | p-value | verdict |",
        "|---|---|---:|---|---:|---:|---|",
    ]
    for report in sorted(detection.reports, key=lambda r: (not r.failing(detection.threshold), r.test, r.metric)):
        cp = report.newest
        if report.note:
            lines.append(f"| `{report.test}` | {report.metric} | {len(report.points)} | {report.note} | | | |")
            continue
        if cp is None:
            lines.append(f"| `{report.test}` | {report.metric} | {len(report.points)} | none | | | stable |")
            continue
        verdict = (
            "**regression**"
            if report.failing(detection.threshold)
            else "regression (within threshold)"
            if cp.regression
            else "improvement"
        )
        lines.append(
            f"| `{report.test}` | {report.metric} | {len(report.points)} | "
            f"`{_commit(cp.before)}` → `{_commit(cp.after)}` | {cp.change:+.1%} | {cp.pvalue:.2g} | {verdict} |"
        )
    return "\n".join(lines) + "\n"
