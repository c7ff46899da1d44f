"""Per-category and per-turn figures in the summary and as a plot (rows' ``groups``, from measure.groups)."""

from __future__ import annotations

import io
from typing import Any, Callable
from ..formatting import NOTHING, figure

TITLES = {"category": "Per category", "turn": "Per turn"}


def group_sections(rows: list[dict], escape: Callable[[Any], str]) -> list[str]:
    """summary.md's per-category and per-turn tables, each with whether the groups' acceptance differs."""
    out: list[str] = []
    for grouping, title in TITLES.items():
        grouped = [(r, r["groups"][grouping]) for r in rows if (r.get("groups") or {}).get(grouping)]
        if not grouped:
            continue
        out += [
            f"**{title}** (acceptance from the server's per-request SD figures; TPOT speedup: the reference's "
            "median TPOT over the group's requests / SD's; tok/s per user: 1000 / each side's median TPOT; "
            "requests over every repeat):",
            "",
            f"| test | {grouping} | requests | accepted | per request | length | TPOT speedup | tok/s per user ref / SD "
            "| TTFT ms ref / SD |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row, found in grouped:
            for g in found["figures"]:
                low, high = g["request_rate_range"]
                spread = NOTHING if low is None else f"{low:.0%}-{high:.0%}"
                out.append(
                    f"| {escape(row['test'])} | {escape(g['name'])} | {g['requests']} | "
                    f"{figure(g['acceptance_rate'], '.0%')} | {spread} | {figure(g['acceptance_length'], '.2f')} | "
                    f"{figure(g['speedup_median_tpot'], '.2f', 'x')} | "
                    f"{figure(g.get('reference_tok_s_per_user'), '.1f')} / {figure(g.get('speculative_tok_s_per_user'), '.1f')}"
                    f" | {figure(g['reference_median_ttft_ms'], '.0f')}"
                    f" / {figure(g['speculative_median_ttft_ms'], '.0f')} |"
                )
        out += [""] + [f"- {escape(row['test'])}: {escape(found['difference'])}" for row, found in grouped] + [""]
    return out


def group_lines(rows: list[dict]) -> list[str]:
    """The terminal summary's lines: per test, each group's acceptance and TPOT speedup, and whether they differ."""
    lines = []
    for row in rows:
        for grouping, found in (row.get("groups") or {}).items():
            cells = ", ".join(
                f"{g['name']} {figure(g['acceptance_rate'], '.0%')} / {figure(g['acceptance_length'], '.2f')}"
                f" / {figure(g['speedup_median_tpot'], '.2f', 'x')}"
                for g in found["figures"]
            )
            lines += [
                f"{row['test']} by {grouping} (accepted / length / TPOT speedup): {cells}",
                f"  {found['difference']}",
            ]
    return lines


def group_plot(rows: list[dict], grouping: str) -> bytes | None:
    """Acceptance length and TPOT speedup per group, one bar group per row that has them (PNG), or None."""
    grouped = [(r, r["groups"][grouping]["figures"]) for r in rows if (r.get("groups") or {}).get(grouping)]
    if not grouped:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 3.2 * len(grouped)), dpi=110)
    FigureCanvasAgg(figure)
    for n, (row, groups) in enumerate(grouped):
        left = figure.add_subplot(len(grouped), 2, 2 * n + 1)
        right = figure.add_subplot(len(grouped), 2, 2 * n + 2)
        names = [g["name"] for g in groups]
        xs = range(len(names))
        left.bar(xs, [g["acceptance_length"] or 0 for g in groups], color="#1f77b4")
        right.bar(xs, [g["speedup_median_tpot"] or 0 for g in groups], color="#2e8b57")
        right.axhline(1.0, color="#c0392b", linestyle=":", linewidth=1)
        for axes, label in ((left, "acceptance length"), (right, "TPOT speedup")):
            axes.set_xticks(list(xs))
            axes.set_xticklabels(names, rotation=30, ha="right", fontsize=7)
            axes.set_ylabel(label, fontsize=8)
            axes.grid(axis="y", alpha=0.3)
        left.set_title(f"{row['config'][:60]} / {row.get('workload')}", fontsize=8, loc="left")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def category_plot(rows: list[dict], target) -> bytes | None:
    """The report's per-category figure (written into `target`, a file object), or None without categories."""
    return _write(group_plot(rows, "category"), target)


def turn_plot(rows: list[dict], target) -> bytes | None:
    return _write(group_plot(rows, "turn"), target)


def _write(png: bytes | None, target) -> bytes | None:
    if png is not None:
        target.write(png)
    return png
