"""The checks a test makes on a `SpecDecResult`, and their failure reports.

Each check raises an ordinary ``AssertionError`` whose message is a small
table (metric, required or baseline value, measured value, change, tolerance,
confidence interval when repeats exist) followed by the commands that
reproduce the measurement and the server log, so a red CI job says what
got worse and how to look at it by hand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

TIE_THRESHOLD = 0.05  # nats between the reference's top-2 logprobs below which a divergence is a numerical tie


@dataclass(frozen=True)
class Row:
    metric: str
    required: float | None  # the bound or the baseline value
    measured: float
    tolerance: float | None = None
    ci: tuple[float, float] | None = None
    ok: bool = True
    note: str = ""

    @property
    def change(self) -> float | None:
        if self.required in (None, 0) or math.isnan(self.measured) or math.isnan(self.required):
            return None
        return self.measured / self.required - 1.0


def _fmt(value: float | None, percent: bool = False) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    if percent:
        return f"{value:+.1%}"
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:.3f}"


def render_table(rows: Sequence[Row], required_label: str = "required") -> str:
    header = ["metric", required_label, "measured", "change", "tolerance", "95% CI", ""]
    body = [
        [
            row.metric,
            _fmt(row.required),
            _fmt(row.measured),
            _fmt(row.change, percent=True),
            f"{row.tolerance:.0%}" if row.tolerance is not None else "-",
            f"[{_fmt(row.ci[0])}, {_fmt(row.ci[1])}]" if row.ci else "-",
            ("ok" if row.ok else "FAIL") + (f" ({row.note})" if row.note else ""),
        ]
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [header, *body]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def failure_message(title: str, rows: Sequence[Row], result, *, required_label: str = "required",
                    extra: str = "") -> str:
    parts = [title, render_table(rows, required_label)]
    if extra:
        parts.append(extra)
    parts.append("reproduce by hand:")
    for name in ("reference_server", "speculative_server", "bench"):
        if name in result.reproduce:
            parts.append(f"  {name}: {result.reproduce[name]}")
    if result.server_log:
        parts.append(f"server log: {result.server_log}")
    return "\n".join(parts)


def speedup_ci(result, metric: str) -> tuple[float, float] | None:
    """95% bootstrap interval of the speedup when both sides have repeats."""
    from .stats import ratio_of_medians_ci

    ref = [run.metrics.as_dict()[metric] for run in result.reference_runs]
    sd = [run.metrics.as_dict()[metric] for run in result.speculative_runs]
    if len(ref) < 2 or len(sd) < 2:
        return None
    from .metrics import higher_is_better

    return ratio_of_medians_ci(sd, ref) if higher_is_better(metric) else ratio_of_medians_ci(ref, sd)


def check_speedup(result, minimum: float, metric: str) -> None:
    measured = result.speedup(metric)
    ok = not math.isnan(measured) and measured >= minimum
    if ok:
        return
    row = Row(f"speedup ({metric})", minimum, measured, ci=speedup_ci(result, metric), ok=False)
    raise AssertionError(
        failure_message(
            f"SD speedup below the required minimum for {result.spec.label()}",
            [row],
            result,
            extra=f"reference {metric}: {_fmt(result.reference_metric(metric))}, "
            f"SD {metric}: {_fmt(result.speculative_metric(metric))} (medians over repeats)",
        )
    )


def check_acceptance(result, min_rate: float | None, min_length: float | None,
                     min_per_position: Sequence[float] | None) -> None:
    for name, bound in (("min_rate", min_rate), ("min_length", min_length)):
        if bound is not None and (not isinstance(bound, (int, float)) or bound < 0):
            raise ValueError(f"assert_acceptance({name}=...) must be a non-negative number, got {bound!r}")
    if min_rate is not None and min_rate > 1:
        raise ValueError(f"assert_acceptance(min_rate={min_rate!r}) is a fraction (0.65 for 65%), not a percentage")
    counters = result.counters
    if not counters.present:
        raise AssertionError(
            failure_message(
                f"no speculative-decoding counters for {result.spec.model} on the SD server "
                "(vllm:spec_decode_* missing from /metrics)",
                [],
                result,
            )
        )
    rows = []
    if min_rate is not None:
        rows.append(Row("acceptance_rate", min_rate, result.acceptance_rate, ok=result.acceptance_rate >= min_rate))
    if min_length is not None:
        rows.append(Row("acceptance_length", min_length, result.acceptance_length,
                        ok=result.acceptance_length >= min_length))
    if min_per_position is not None:
        measured = result.per_position_acceptance
        for position, bound in enumerate(min_per_position):
            value = measured[position] if position < len(measured) else math.nan
            rows.append(Row(f"acceptance at position {position}", bound, value, ok=value >= bound))
    if any(not row.ok for row in rows):
        raise AssertionError(
            failure_message(
                f"draft acceptance below the required minimum for {result.spec.label()}",
                rows,
                result,
                extra=f"counters over {len(result.speculative_runs)} run(s): {counters.num_drafts:.0f} drafts, "
                f"{counters.num_draft_tokens:.0f} draft tokens, {counters.num_accepted_tokens:.0f} accepted",
            )
        )


@dataclass(frozen=True)
class Divergence:
    index: int
    position: int
    tie: bool | None  # None: no logprobs to tell
    gap: float | None  # reference's top-1 minus top-2 logprob at the position
    reference_text: str
    speculative_text: str


def classify_divergences(result, tie_threshold: float = TIE_THRESHOLD) -> list[Divergence]:
    reference = {record.index: record for record in result.reference_runs[0].records}
    found = []
    for request in result.outputs.diverged:
        record = reference.get(request.index)
        gap = None
        tops = record.top_logprobs if record is not None else None
        if tops is not None and request.first_divergence < len(tops):
            values = sorted(tops[request.first_divergence].values(), reverse=True)
            if len(values) >= 2:
                gap = values[0] - values[1]
        found.append(
            Divergence(
                request.index,
                request.first_divergence,
                None if gap is None else gap < tie_threshold,
                gap,
                request.reference_text,
                request.speculative_text,
            )
        )
    return found


def check_outputs_equivalent(result, min_match: float, ignore_numerical_ties: bool,
                             tie_threshold: float = TIE_THRESHOLD) -> None:
    if not 0 <= min_match <= 1:
        raise ValueError(f"assert_outputs_equivalent(min_match={min_match!r}) is a fraction between 0 and 1")
    total = len(result.outputs.requests)
    divergences = classify_divergences(result, tie_threshold)
    ties = [d for d in divergences if d.tie]
    identical = total - len(divergences)
    matched = identical + (len(ties) if ignore_numerical_ties else 0)
    rate = matched / total if total else math.nan
    if rate >= min_match:
        return
    lines = [f"{identical} of {total} requests identical, {len(ties)} diverged at a numerical near-tie "
             f"(top-2 logprob gap < {tie_threshold}), {len(divergences) - len(ties)} diverged for real"]
    if any(d.tie is None for d in divergences):
        lines.append("(no reference logprobs: run specdec.run(logprobs=2) to tell near-ties from real divergences)")
    for d in divergences[:5]:
        kind = "near-tie" if d.tie else "unknown" if d.tie is None else "real"
        gap = f", top-2 gap {d.gap:.3f}" if d.gap is not None else ""
        lines.append(f"  request {d.index}: first difference at token {d.position} ({kind}{gap})")
        lines.append(f"    reference: {d.reference_text!r}")
        lines.append(f"    SD:        {d.speculative_text!r}")
    if len(divergences) > 5:
        lines.append(f"  ... and {len(divergences) - 5} more")
    row = Row("output match rate", min_match, rate, ok=False,
              note="near-ties count as matches" if ignore_numerical_ties else "")
    raise AssertionError(
        failure_message(f"SD outputs differ from the reference for {result.spec.label()}", [row], result,
                        extra="\n".join(lines))
    )
