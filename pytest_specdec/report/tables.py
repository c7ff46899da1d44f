"""Result rows as text: the terminal table, the Markdown summary and CSV."""

from __future__ import annotations

from .frontier_report import frontier_markdown
from .drift_report import drift_lines, drift_markdown
from .false_alarms import false_alarm_lines, false_alarm_markdown
from .row.constraints import constrained_markdown
from .energy import energy_markdown
from .series_report import series_markdown
from .row.sampling import sampling_markdown
from .builds import builds_lines, builds_markdown

import csv
import io
from pathlib import Path
from typing import Iterable

from ..formatting import figure
from .row.rows import CSV_COLUMNS
from .row.cells import COMPACT_HEADER, TERMINAL_WIDTH, aligned, compact_cells, fitted
from .markup import markdown_table
from .row.cells import (  # re-exported: these lived here
    UNAVAILABLE as UNAVAILABLE,
    _cell as _cell,
    _speedup_text as _speedup_text,
    _best_k_text as _best_k_text,
    _equivalence_text as _equivalence_text,
    TABLE_HEADER as TABLE_HEADER,
    _SOURCE_SHORT as _SOURCE_SHORT,
    _cost_ratio_text as _cost_ratio_text,
    below_theory as below_theory,
    table_cells as table_cells,
)
from .sections import (  # re-exported: these lived here
    sweep_crossover as sweep_crossover,
    capacity_lines as capacity_lines,
    _ratio_cell as _ratio_cell,
    _capacity_text as _capacity_text,
    slo_section as slo_section,
    _slo_text as _slo_text,
    theory_section as theory_section,
    per_request_section as per_request_section,
    _oracle_gap as _oracle_gap,
    fairness_lines as fairness_lines,
    did_not_pay as did_not_pay,
    draft_length_advice as draft_length_advice,
    diagnosis_section as diagnosis_section,
    _detect_text as _detect_text,
)


def terminal_table(rows: list[dict], width: int | None = None, full: bool = False) -> list[str]:
    """Aligned text lines, one row per test, as the terminal summary prints them: the compact columns cut to
    `width` (the terminal's; TERMINAL_WIDTH when None), or with `full` every column of the report's table."""
    if full:
        return aligned([TABLE_HEADER] + [table_cells(r) for r in rows])
    cells = [list(COMPACT_HEADER)] + [list(compact_cells(r)) for r in rows]
    return aligned(fitted(cells, width or TERMINAL_WIDTH))


def undecided_lines(rows: list[dict]) -> list[str]:
    """One line per check left undecided, partly compared or not compared, with what would decide it."""
    lines = []
    for row in rows:
        name = row["test"].rsplit("::", 1)[-1]
        for check, decision in (row.get("decisions") or {}).items():
            if decision.get("outcome") == "undecided":
                lines.append(f"{name}: {check} undecided ({decision.get('stopped')}): {decision.get('why')}")
        gate_decided = any("against the baseline" in check for check in (row.get("decisions") or {}))
        if row.get("regression") == "undecided" and not gate_decided:  # else named by its decision above
            why = "; ".join(
                f"{metric}: {reason}" for metric, reason in (row.get("regression_not_compared") or {}).items()
            )
            lines.append(f"{name}: baseline check undecided: {why or row.get('regression_comparison')}")
    return lines


def session_counts(rows: list[dict]) -> dict[str, int]:
    """For the session's last line: the checks left undecided (none: left out).  Baselines compared in part
    have their own section; the count is for what is not a pass."""
    undecided = len(undecided_lines(rows))
    return {"undecided": undecided} if undecided else {}


def summary_sections(
    rows: list[dict],
    report_message: str | None,
    written_baselines,
    stale_baselines,
    updating: bool,
    server_history,
    width: int | None = None,
    full: bool = False,
) -> list[tuple[str | None, list[str]]]:
    """The session's terminal summary: (section title or None, lines), in order."""
    sections: list[tuple[str | None, list[str]]] = []
    if rows:
        sections.append(("specdec results", terminal_table(rows, width, full)))
    if capacities := capacity_lines(rows):
        sections.append(("specdec SLO capacity", capacities))
    from .group_figures import group_lines

    if grouped := group_lines(rows):
        sections.append(("specdec per category and turn", grouped))
    if unfair := fairness_lines(rows):
        sections.append(("specdec fairness: not SD alone", unfair))
    if builds := builds_lines(rows):
        sections.append(("specdec builds: this build (A) against the baseline build (B)", builds))
    skipped = [r for r in rows if r.get("regression_not_compared")]
    if skipped:  # a pass that compared less than the test gates says so where everyone looks
        sections.append(
            (
                "specdec baselines: partly or not compared",
                [
                    f"{r['test']} [{r['regression']}]: "
                    + " / ".join((r["regression_comparison"] or "").splitlines()[:2])
                    for r in skipped
                ],
            )
        )
    if drifts := drift_lines(rows):
        sections.append(("specdec drift between sessions (stored baselines)", drifts))
    if report_message:
        sections.append((None, [f"report: {report_message}"]))
    if written_baselines or stale_baselines:
        verb = (
            "deleted stale baseline"
            if updating
            else "stale baseline (no test uses it; --specdec-update-baselines deletes it)"
        )
        sections.append(
            (
                "specdec baselines",
                [f"written: {path}" for path in written_baselines] + [f"{verb}: {path}" for path in stale_baselines],
            )
        )
    if server_history:
        sections.append(("specdec servers", [record.describe() for record in server_history]))
    if alarms := false_alarm_lines(rows):
        sections.append(("specdec false alarms", alarms))
    if undecided := undecided_lines(rows):  # last, where a reader of a green log looks: not passed
        sections.append((f"specdec undecided: {len(undecided)} checks not passed", undecided))
    return sections


def markdown_summary(rows: list[dict], plots: Iterable[Path] = (), title: str = "pytest-specdec results") -> str:
    """The summary.md document (also what goes to a CI step summary)."""
    from ..verdict.metric_names import geometric_mean
    from .group_figures import group_sections
    from .plots import sweeps

    escape = lambda text: str(text).replace("|", "\\|")  # noqa: E731 - a table cell must not split
    out = [f"## {title}", ""]
    if not rows:
        return "\n".join(out + ["No specdec test ran.", ""])
    out += markdown_table(TABLE_HEADER, (table_cells(r) for r in rows), escape)
    out += [
        "",
        "speedup: output-token throughput SD / reference; expected: Leviathan et al.'s speedup of decoding, "
        "(L + u) / (1 + k c + u), from the measured acceptance length L (tokens per drafted step), k, the steps "
        "that drafted nothing per drafted step u, and the draft/target cost ratio c (measured from this run's "
        "step times, else an estimate: the c column says which); compare it with TPOT, not with the "
        "throughput, which includes prefill; TPOT/TTFT: speedups of the median (reference / SD, > 1 is "
        "faster).",
        "",
    ]
    out += builds_markdown(rows, escape)
    if unfair := fairness_lines(rows):
        out += [
            "**Not a fair comparison** (marked ! beside the speedup: engine confounds, cold or drifting servers, speedups physics does not "
            "allow: the speedup measures more than SD; each with its fix):",
            "",
        ]
        out += [f"- {escape(line)}" for line in unfair] + [""]
    out += theory_section(rows, escape)
    out += energy_markdown(rows, escape)
    out += constrained_markdown(rows, escape)
    out += series_markdown(rows, escape)
    out += sampling_markdown(rows, escape)
    missing = [
        (r, name, why) for r in rows for name, why in (r.get("unavailable") or {}).items() if name != "expected_speedup"
    ]
    if missing:
        out += ["**Unavailable** (not measured, so no check on them can pass):", ""]
        out += [f"- {escape(r['test'])}: {name}: {escape(why)}" for r, name, why in missing] + [""]
    guarded = [(r, name, found) for r in rows for name, found in (r.get("detection") or {}).items()]
    if guarded:
        out += [
            "**What the baseline gates can detect** (noise per side from the paired repeats' ratios, "
            "server restarts included, or else from the baseline's repeats, without them):",
            "",
            "| test | metric | flags drops of | false alarms | repeats | noise | from |",
            "|---|---|---|---|---|---|---|",
        ]
        out += [
            f"| {escape(r['test'])} | {name} | {_detect_text(found)} | {figure(found['false_alarm_rate'], '.1%')} | "
            f"{found['repeats']} | {figure(found['spread'], '.1%')} | "
            f"{found.get('noise_from', 'baseline repeats') if found['spread'] is not None else '–'} |"
            for r, name, found in guarded
        ] + [""]
    skipped = [r for r in rows if r.get("regression_not_compared")]
    if skipped:
        out += [
            "**Not compared against the baseline** (another machine or a machine probe that moved than the one "
            "it was recorded on, a speedup still flagged after measuring again, or a figure allowed to be "
            "unavailable; `partly compared` in the baseline column when some figures were, `not compared` when "
            "none was; --specdec-strict fails both):",
            "",
        ]
        out += [
            f"- {escape(r['test'])}: {escape(', '.join(r['regression_not_compared']))} "
            f"({escape(((r['regression_comparison'] or '').splitlines() or [''])[0])})"
            for r in skipped
        ] + [""]
    out += per_request_section(rows, escape)
    out += group_sections(rows, escape)
    out += diagnosis_section(rows, escape)
    out += slo_section(rows, escape)
    out += frontier_markdown(rows, escape)
    out += drift_markdown(rows, escape)
    out += false_alarm_markdown(rows, escape)
    priced = [r for r in rows if r["speculative_usd_per_1m_tokens"] is not None]
    if priced:
        out += [
            "**Cost** (priced only at the server's own maximum: a closed loop at saturation, or each side's "
            "SLO capacity; at an offered load below saturation both sides' tok/s is that load, and the cost is "
            "unavailable):",
            "",
            "| test | operating point | USD per 1M output tokens, reference | with SD |",
            "|---|---|---|---|",
        ]
        out += [
            f"| {escape(r['test'])} | {r.get('cost_operating_point') or '–'}: "
            f"{escape(r.get('cost_operating_point_detail') or '')} | {figure(r['reference_usd_per_1m_tokens'], '.3f')}"
            f" | {figure(r['speculative_usd_per_1m_tokens'], '.3f')} |"
            for r in priced
        ] + [""]
    for (config, workload), group in sweeps(rows).items():
        levels = ", ".join(f"{r['max_concurrency']}: {_speedup_text(r)}" for r in group)
        out.append(
            f"- sweep {escape(config)} on {workload}: geometric-mean speedup "
            f"{geometric_mean([r['speedup_output_throughput'] for r in group]):.2f}x over concurrency ({levels}); "
            f"{sweep_crossover(group).describe()}"
        )
    out += [f"![{p.stem}]({p.name})" for p in plots]
    return "\n".join(out).rstrip() + "\n"


def csv_text(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        flat = dict(row)
        for side in ("reference", "speculative"):
            for metric, value in row.get(side, {}).items():
                flat[f"{side}_{metric}"] = value
        missing = row.get("unavailable") or {}
        writer.writerow(
            {k: (UNAVAILABLE if k in missing else "") if flat.get(k) is None else flat.get(k) for k in CSV_COLUMNS}
        )
    return buffer.getvalue()
