"""The throughput-interactivity frontier in the reports: a figure, a report.html section and a summary.md table.

A concurrency sweep's rows each carry the sweep's two frontiers (`frontier`, analysis.frontier.FrontierReport):
tok/s per user against tok/s per GPU, one point per level, both sides on one chart, the Pareto-optimal points
joined, and the per-user speeds the test's checks read with SD's ratio there.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from html import escape as escape_html

from ..formatting import NOTHING, figure
from .figure_kit import Row, Target, _config, _figure, _finish_panel, _save
from .markup import html_table, markdown_table

SIDES = (("reference", "reference (no SD)", "tab:grey", "s"), ("speculative", "SD", "tab:blue", "o"))


def frontiers(rows: Iterable[Row]) -> list[tuple[str, dict]]:
    """(title, frontier) of every sweep among the rows that carries one, once each, in the rows' order."""
    found: dict[tuple[str, str], tuple[str, dict]] = {}
    for row in rows:
        frontier = row.get("frontier")
        if not frontier or not frontier.get("reference", {}).get("points"):
            continue
        key = (str(row.get("test")), json.dumps(frontier, sort_keys=True))
        found.setdefault(key, (f"{_config(row)} / {row.get('workload')}", frontier))
    return list(found.values())


def _on_frontier(points: list[dict]) -> list[dict]:
    return sorted((p for p in points if p["on_frontier"]), key=lambda p: p["per_user"])


def frontier_plot(rows: Iterable[Row], path: Target):
    """Tok/s per GPU against tok/s per user, both sides of each sweep on one panel: every level's point (labelled
    with its concurrency), each draw's points faintly, the frontier joined, and the checked per-user speeds."""
    found = frontiers(rows)
    if not found:
        return None
    fig, axes = _figure(len(found), ncols=min(2, len(found)), panel=(5.4, 4.0))
    for ax, (title, frontier) in zip(axes, found):
        for side, label, colour, marker in SIDES:
            points = frontier[side]["points"]
            for p in points:
                ax.scatter(p["per_user_draws"], p["per_gpu_draws"], color=colour, alpha=0.25, s=12, marker=marker)
                ax.annotate(
                    f"c{p['concurrency']:g}",
                    (p["per_user"], p["per_gpu"]),
                    fontsize=7,
                    xytext=(3, 3),
                    textcoords="offset points",
                    color=colour,
                )
            ax.scatter([p["per_user"] for p in points], [p["per_gpu"] for p in points], color=colour, marker=marker)
            line = _on_frontier(points)
            ax.plot([p["per_user"] for p in line], [p["per_gpu"] for p in line], "-", color=colour, label=label)
        for target in frontier.get("targets") or ():
            ratio = target.get("ratio")
            ax.axvline(
                target["per_user"],
                color="tab:red",
                linestyle=":",
                linewidth=0.9,
                label=f"{target['per_user']:.3g} tok/s per user: " + (f"{ratio:.2f}x" if ratio else "no ratio"),
            )
        _finish_panel(ax, "tok/s per user (1000 / median TPOT)", "output tok/s per GPU", title)
    return _save(fig, path)


def _target_cells(target: dict) -> list[str]:
    ratios = ", ".join(figure(r, ".3f") for r in target.get("draw_ratios") or ())
    costs = [target.get("reference_usd_per_1m_tokens"), target.get("speculative_usd_per_1m_tokens")]
    return [
        figure(target["per_user"], ".4g"),
        figure(target.get("reference_per_gpu"), ".4g"),
        figure(target.get("speculative_per_gpu"), ".4g"),
        figure(target["ratio"], ".3f") + f"x ({ratios})" if target.get("ratio") else NOTHING,
        " / ".join(figure(c, ".3g") for c in costs) if costs[0] is not None else NOTHING,
        target.get("unavailable") or "",
    ]


TARGET_HEADER = [
    "tok/s per user",
    "reference tok/s per GPU",
    "SD tok/s per GPU",
    "ratio (per draw)",
    "USD per 1M tokens, reference / SD",
    "why no ratio",
]
POINT_HEADER = [
    "concurrency",
    "reference tok/s per user",
    "reference tok/s per GPU",
    "SD tok/s per user",
    "SD tok/s per GPU",
]


def _point_cells(frontier: dict) -> list[list[str]]:
    by_level: dict[float, dict[str, dict]] = {}
    for side, *_ in SIDES:
        for p in frontier[side]["points"]:
            by_level.setdefault(p["concurrency"], {})[side] = p

    def cell(p: dict | None, key: str) -> str:
        return NOTHING if p is None else figure(p[key], ".4g") + (" *" if p["on_frontier"] else "")

    return [
        [figure(level, "g")]
        + [cell(sides.get(side), key) for side in ("reference", "speculative") for key in ("per_user", "per_gpu")]
        for level, sides in sorted(by_level.items())
    ]


def frontier_section(rows: list[dict]) -> list[str]:
    """report.html: each sweep's operating points (* on the frontier) and the checked per-user speeds."""
    found = frontiers(rows)
    if not found:
        return []
    out = [
        '<section id="frontier">',
        "<h2>Throughput-interactivity frontier</h2>",
        f"<p>{escape_html(found[0][1]['per_user_definition'])}. {escape_html(found[0][1]['per_gpu_definition'])}. "
        "A point marked * is on its side's frontier (no other point of that side is as fast per user and as "
        "productive per GPU). At a per-user speed the throughput is read between frontier points, never "
        "beyond them; the ratio per draw is what the checks decide on.</p>",
    ]
    for title, frontier in found:
        out.append(f"<h3>{escape_html(title)}</h3>")
        out += html_table(POINT_HEADER, _point_cells(frontier))
        if frontier.get("targets"):
            out += html_table(TARGET_HEADER, [_target_cells(t) for t in frontier["targets"]])
    out.append("</section>")
    return out


def frontier_markdown(rows: list[dict], escape: Callable[[str], str]) -> list[str]:
    """summary.md: the same tables as report.html's section."""
    found = frontiers(rows)
    if not found:
        return []
    out = [
        f"**Throughput-interactivity frontier** ({escape(found[0][1]['per_user_definition'])}; * on the frontier):",
        "",
    ]
    for title, frontier in found:
        out += [f"_{escape(title)}_", ""]
        for header, body in (
            (POINT_HEADER, _point_cells(frontier)),
            (TARGET_HEADER, [_target_cells(t) for t in frontier.get("targets") or ()]),
        ):
            if body:
                out += markdown_table(header, body, escape) + [""]
    return out
