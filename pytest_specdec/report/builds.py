"""The builds table: each test's figures on this build and on the baseline build, measured in one session.

A row of the report carries ``builds`` under ``--specdec-baseline-from
build:PATH``: both builds (engine, version, path), the order their sides ran
in, the engine facts that differ besides SD, and per figure both builds'
medians with the paired change (signed so that negative is worse, the gate's
convention) and its 95% interval from the repeats' ratios.  The terminal,
summary.md and report.html show the same table.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from ..verdict.stats import compare_samples
from .row.cells import aligned
from ..formatting import NOTHING
from .markup import markdown_table

# (metric, column title, format): what a team reads on an upgrade PR.
BUILD_FIGURES = (
    ("speedup_output_throughput", "speedup", "{:.2f}x"),
    ("acceptance_rate", "acceptance", "{:.0%}"),
    ("acceptance_length", "length", "{:.2f}"),
    ("drafted_per_step", "drafted/step", "{:.2f}"),
    ("median_tpot_ms", "TPOT ms", "{:.1f}"),
    ("median_ttft_ms", "TTFT ms", "{:.0f}"),
)
BUILDS_HEADER = ["test", "figure", "this build (A)", "baseline build (B)", "change", "95% CI", "verdict"]


def _per_repeat(result, entries: list[dict], metric: str) -> list[float]:
    """The figure in each repeat (`entries`: the result's repeats()): SD's own tok/s and ms, the derived
    ratios, drafted tokens per step."""
    if metric == "drafted_per_step":
        values = []
        for run in result.speculative_runs:
            counters = run.counters
            steps = counters.num_drafts if counters is not None and counters.present else math.nan
            values.append(counters.num_draft_tokens / steps if steps and math.isfinite(steps) else math.nan)
        return values
    side = "speculative" if metric.endswith("_ms") else "derived"
    return [float(entry[side].get(metric, math.nan)) for entry in entries]


def _median(values: list[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return _number(statistics.median(finite)) if finite else None


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def builds_cell(result, verdict: str | None) -> dict[str, Any] | None:
    """The row's ``builds`` entry (None without a builds A/B)."""
    builds = getattr(result, "builds", None)
    if builds is None:
        return None
    baseline = builds.baseline_result
    this_entries, base_entries = result.repeats(), baseline.repeats()
    figures = {}
    for metric, _, _ in BUILD_FIGURES:
        now, before = _per_repeat(result, this_entries, metric), _per_repeat(baseline, base_entries, metric)
        entry = {"this": _median(now), "baseline": _median(before), "change": None, "ci": None}
        if entry["this"] is not None and entry["baseline"] is not None:
            verdict_of = compare_samples(metric, before, now, tolerance=0.0, paired=len(now) == len(before))
            entry["change"] = _number(verdict_of.change)
            if verdict_of.ci_low is not None and verdict_of.ci_high is not None:
                entry["ci"] = [_number(verdict_of.ci_low), _number(verdict_of.ci_high)]
        figures[metric] = entry
    this, base = _served(builds.this, result), _served(builds.baseline, baseline)
    return {
        "this": this,
        "baseline": base,
        "order": " ".join("A" if side == "this" else "B" for side in builds.order),
        "fact_changes": [
            {"server": side, "fact": fact, "baseline": before, "this": now}
            for side, fact, before, now in builds.fact_changes(result)
        ],
        "flagged": {side: list(why) for side, why in builds.flagged.items()},
        "figures": figures,
        "verdict": verdict or "not checked",
    }


def _served(build, result) -> dict:
    found = build.as_dict()
    if not found["version"] and getattr(result, "engine_version", None):
        found["version"] = result.engine_version
        found["describe"] = found["describe"].replace("(version unknown)", result.engine_version)
    return found


def _cell(value, form: str) -> str:
    return NOTHING if value is None else form.format(value)


def builds_rows(rows: list[dict]) -> list[list[str]]:
    """Table cells: one line per (test, figure) of every row that measured two builds."""
    out = []
    for row in rows:
        builds = row.get("builds")
        if not builds:
            continue
        for index, (metric, title, form) in enumerate(BUILD_FIGURES):
            figure = builds["figures"].get(metric) or {}
            ci = figure.get("ci")
            out.append(
                [
                    row["test"] if index == 0 else "",
                    title,
                    _cell(figure.get("this"), form),
                    _cell(figure.get("baseline"), form),
                    _cell(figure.get("change"), "{:+.1%}"),
                    f"[{ci[0]:+.1%}, {ci[1]:+.1%}]" if ci and None not in ci else NOTHING,
                    builds["verdict"] if index == 0 else "",
                ]
            )
    return out


def builds_notes(rows: list[dict]) -> list[str]:
    """Which builds were compared, and what differs between them besides SD, once per pair of builds."""
    notes: list[str] = []
    for row in rows:
        builds = row.get("builds")
        if not builds:
            continue
        line = f"A = {builds['this']['describe']}; B = {builds['baseline']['describe']}; sides ran {builds['order']}"
        if line not in notes:
            notes.append(line)
        for change in builds["fact_changes"]:
            notes.append(
                f"{row['test']}: the builds differ besides SD ({change['server']} server): {change['fact']} "
                f"{change['baseline']} (B) -> {change['this']} (A)"
            )
        for side, why in builds.get("flagged", {}).items():
            notes.append(f"{row['test']}: {side} build's speedup not compared: {'; '.join(why)}")
    return notes


def builds_lines(rows: list[dict]) -> list[str]:
    """The terminal section: aligned table, then the notes."""
    cells = builds_rows(rows)
    if not cells:
        return []
    return aligned([BUILDS_HEADER] + cells) + builds_notes(rows)


def builds_markdown(rows: list[dict], escape) -> list[str]:
    """The summary.md section (empty without a builds A/B)."""
    cells = builds_rows(rows)
    if not cells:
        return []
    out = [
        "**Builds, measured side by side** (change: this build against the baseline build, negative is worse; "
        "95% CI of the paired repeats' ratios):",
        "",
    ]
    out += markdown_table(BUILDS_HEADER, cells, escape)
    return out + [""] + [f"- {escape(note)}" for note in builds_notes(rows)] + [""]


def builds_section(rows: list[dict]) -> list[str]:
    """report.html's section (empty without a builds A/B)."""
    from html import escape

    cells = builds_rows(rows)
    if not cells:
        return []
    out = [
        '<section id="builds">',
        "<h2>Builds, measured side by side</h2>",
        '<p class="legend">change: this build (A) against the baseline build (B), negative is worse; 95% CI of '
        "the paired repeats' ratios.</p>",
        '<table id="builds-table"><thead><tr>'
        + "".join(f"<th>{escape(h)}</th>" for h in BUILDS_HEADER)
        + "</tr></thead>",
        "<tbody>",
    ]
    out += ["<tr>" + "".join(f"<td>{escape(c)}</td>" for c in line) + "</tr>" for line in cells]
    out += ["</tbody></table>", "<ul>"] + [f"<li>{escape(note)}</li>" for note in builds_notes(rows)]
    return out + ["</ul>", "</section>"]
