"""The gate's failure table: one row per compared figure, its detection cell, and unavailable figures in words."""

from __future__ import annotations

import math

from ..assertions import Row, failure_message
from ..comparison import is_ratio
from ..detection import Detection


def _row(label: str, metric: str, verdict, tolerance: float) -> Row:
    ci = None
    if verdict.ci_low is not None:
        # The CI is of the signed change; show it as values of the metric.
        as_value = (
            (lambda c: verdict.baseline * (1 + c))
            if verdict.higher_is_better
            else (lambda c: verdict.baseline / (1 + c))
        )
        ci = tuple(sorted((as_value(verdict.ci_low), as_value(verdict.ci_high))))
    # The verdict's own change (the median of per-repeat ratios when paired), so the table and the line
    # below it state one number for the figure.
    return Row(
        label,
        verdict.baseline,
        verdict.current,
        tolerance,
        ci,
        not verdict.regression,
        direction=metric,
        stated_change=None if math.isnan(verdict.change) else verdict.change,
    )


def _figure(row: Row) -> dict:
    """One compared figure as report rows carry it: plain numbers, null where there is none."""

    def number(value):
        return float(value) if value is not None and math.isfinite(value) else None

    return {
        "figure": row.metric,
        "baseline": number(row.required),
        "measured": number(row.measured),
        "change": number(row.change),
        "tolerance": row.tolerance,
        "ci": [number(v) for v in row.ci] if row.ci else None,
        "ok": row.ok,
        "note": row.note or None,
    }


def _unavailable(result, metric: str) -> str | None:
    """Why the result has no value for a gated metric (None when it has one in every repeat)."""
    if is_ratio(metric) or not hasattr(result, "speculative_runs"):  # a sweep's frontier says for each figure
        return result.unavailable(metric)
    missing = [
        run.repeat + 1
        for run in result.speculative_runs
        if not math.isfinite(run.metrics.as_dict().get(metric, math.nan))
    ]
    return f"no value in SD repeat {', '.join(map(str, missing))}" if missing else None


def _unavailable_message(test_id: str, reasons: dict[str, str], result, update: bool) -> str:
    doing = "cannot record a baseline" if update else "cannot compare with the baseline"
    lines = [f"{test_id}: {doing}: figures unavailable"]
    lines += [f"  {metric}: unavailable: {why}" for metric, why in reasons.items()]
    lines.append(
        "(a test that knowingly runs without a figure says so: "
        f"assert_no_regression(allow_unavailable={sorted(reasons)!r}))"
    )
    return failure_message("\n".join(lines), [], result)


def _detects_cell(found: Detection) -> str:
    if found.spread is None:
        return "> tolerance (spread unknown)"
    if found.smallest_drop is None or found.smallest_drop >= 0.95:
        return "nothing reliably"
    return f">= {found.smallest_drop:.0%} (false alarms {found.false_alarm_rate:.1%})"
