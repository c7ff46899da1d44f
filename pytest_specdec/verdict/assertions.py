"""The checks a test makes on a `SpecDecResult`, and their failure reports.

Each check raises an ordinary ``AssertionError`` whose message is a small
table (metric, required or baseline value, measured value, change, tolerance,
confidence interval when repeats exist) followed by the commands that
reproduce the measurement and the server log, so a red CI job says what
got worse and how to look at it by hand.

A figure that could not be measured fails its check with
``unavailable: <why>``: never a pass, never read as zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..formatting import NOTHING, figure
from .metric_names import relative_change
from ..engines import engine_named
from ..engines.forced_acceptance import ForcedAcceptance, honoured_range

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
    direction: str = "output_throughput"  # a metric name with the row's direction (see measure.derived)
    # The change a comparison stated itself (the gate's median of per-repeat ratios), shown instead of
    # measured/required so the table and the verdict's own line give one number per figure.
    stated_change: float | None = None

    @property
    def change(self) -> float | None:
        """Measured against required, signed so that positive is better (None when either is missing)."""
        if self.stated_change is not None:
            return self.stated_change
        if self.required is None:
            return None
        value = relative_change(self.direction, self.measured, self.required)
        return None if math.isnan(value) else value


def _table_number(value: float | None, percent: bool = False) -> str:
    if percent:
        return figure(value, "+.1%")
    return figure(value, ".1f" if value is not None and abs(value) >= 100 else ".3f")


def render_table(rows: Sequence[Row], required_label: str = "required", extra_columns: dict | None = None) -> str:
    """The failure table; `extra_columns` maps a header to one cell per row (e.g. what the gate detects)."""
    extra_columns = extra_columns or {}
    header = ["metric", required_label, "measured", "change", "tolerance", "95% CI", *extra_columns, ""]
    body = [
        [
            row.metric,
            _table_number(row.required),
            _table_number(row.measured),
            _table_number(row.change, percent=True),
            f"{row.tolerance:.0%}" if row.tolerance is not None else NOTHING,
            f"[{_table_number(row.ci[0])}, {_table_number(row.ci[1])}]" if row.ci else NOTHING,
            *(cells[i] for cells in extra_columns.values()),
            ("ok" if row.ok else "FAIL") + (f" ({row.note})" if row.note else ""),
        ]
        for i, row in enumerate(rows)
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [header, *body]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def failure_message(
    title: str,
    rows: Sequence[Row],
    result,
    *,
    required_label: str = "required",
    extra: str = "",
    extra_columns: dict | None = None,
) -> str:
    parts = [title, render_table(rows, required_label, extra_columns)]
    if extra:
        parts.append(extra)
    commands = [
        f"  {name}: {result.reproduce[name]}"
        for name in ("reference_server", "speculative_server", "bench")
        if name in result.reproduce
    ]
    if commands:
        parts += ["reproduce by hand:", *commands]
    if result.server_log:
        parts.append(f"server log: {result.server_log}")
    return "\n".join(parts)


def unavailable_message(result, what: str, reasons: dict[str, str]) -> str:
    """The failure of a check whose figures could not be measured."""
    lines = [f"{what} for {result.spec.label()}: unavailable, so the check cannot pass"]
    lines += [f"  {metric}: unavailable: {reason}" for metric, reason in reasons.items()]
    return failure_message("\n".join(lines), [], result)


def speedup_ci(result, metric: str) -> tuple[float, float] | None:
    """95% bootstrap interval of the speedup (the median of per-repeat speedups), with 2+ repeats."""
    from .stats import median_ci

    return median_ci(result.repeat_speedups(metric))


def check_speedup(result, minimum: float | None, metric: str, maximum: float | None = None) -> None:
    """SD's speedup on `metric` is at least `minimum` (or at most `maximum`), decided by the sequential rule
    (verdict.sequential) on the result's draws, sending them again while it is undecided and runs are left."""
    from .metric_names import speedup_name
    from .sequential.rule import FAILED, PASSED, bound_zone

    if (minimum is None) == (maximum is None):
        raise ValueError(f"assert_speedup takes min= or max=, one of them, got min={minimum!r}, max={maximum!r}")
    bound = minimum if minimum is not None else maximum
    if (
        isinstance(bound, bool)
        or not isinstance(bound, (int, float))
        or bound < 0
        or (maximum is not None and not bound)
    ):
        raise ValueError(
            f"assert_speedup bound must be a positive number (min=0: only that it was measured), got {bound!r}"
        )
    why = result.unavailable(speedup_name(metric))
    if why:
        raise AssertionError(unavailable_message(result, f"SD speedup on {metric}", {speedup_name(metric): why}))
    if not bound:  # min=0: any measured speedup is at least 0
        return
    higher = minimum is not None
    bad, good = bound_zone(bound, higher)
    sign = 1 if higher else -1
    name = f"speedup ({metric}) {'>=' if higher else '<='} {bound:g}"
    decision = result.decide(name, lambda: result.speedup_evidence(metric, sign=sign), bad, good, sign=sign)
    if decision.outcome == PASSED:
        return
    low, high = decision.ratio_interval
    low, high = (low, high) if 0 < low and math.isfinite(high) else (None, None)
    measured = decision.ratio
    per_repeat = ", ".join(f"{value:.3f}" for value in result.repeat_speedups(metric))
    words = (
        f"decision: {decision.outcome}, {measured:.3f}x over {decision.draws} draws, {decision.stopped}; "
        f"interval {decision.interval}"
        + (f" {low:.3f}-{high:.3f}x" if low is not None else "")
        + f"; spread: {result.spread_note(metric)}"
    )
    if decision.outcome != FAILED:
        result.decisions[name] = decision
        if getattr(result, "strict", False):
            raise AssertionError(
                f"{name} for {result.spec.label()}: undecided, and --specdec-strict fails an undecided check\n"
                f"{words}\n{decision.why}"
            )
        return
    row = Row(f"speedup ({metric})", bound, measured, ci=(low, high) if low is not None else None, ok=False)
    raise AssertionError(
        failure_message(
            f"SD speedup {'below the required minimum' if higher else 'above the allowed maximum'} for "
            f"{result.spec.label()}",
            [row],
            result,
            extra=f"{words}\nreference {metric}: {_table_number(result.reference_metric(metric))}, "
            f"SD {metric}: {_table_number(result.speculative_metric(metric))} (medians over draws); "
            f"speedup per draw: {per_repeat}\n{why_sd_did_not_pay(result)}",
        )
    )


def why_sd_did_not_pay(result) -> str:
    """The causes the measured figures point at, each with its number (the result's diagnosis)."""
    return result.why_sd_did_not_pay()


def check_request_lengths(result, min_p10: float | None, min_p50: float | None) -> None:
    """Per-request acceptance length (tokens per drafted step, 1 + accepted / steps): its p10 and p50."""
    bounds = {"request_acceptance_length_p10": min_p10, "request_acceptance_length_p50": min_p50}
    for name, bound in bounds.items():
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float)) or bound < 1):
            raise ValueError(
                f"assert_acceptance(min_{name.split('_')[-1]}...) is a length in tokens per step (>= 1), got {bound!r}"
            )
    asked = {name: bound for name, bound in bounds.items() if bound is not None}
    reasons = {name: why for name in asked if (why := result.unavailable(name))}
    if reasons:
        raise AssertionError(unavailable_message(result, "per-request acceptance", reasons))
    analysis = result.analysis()
    rows = [
        Row(
            name,
            bound,
            analysis.figure(name),
            ok=analysis.figure(name) >= bound,
            note="estimated from streamed chunks" if analysis.estimated else "",
        )
        for name, bound in asked.items()
    ]
    if any(not row.ok for row in rows):
        lengths = analysis.request_lengths
        raise AssertionError(
            failure_message(
                f"per-request acceptance below the required minimum for {result.spec.label()}",
                rows,
                result,
                extra=f"per-request acceptance length over {lengths.count} requests ({analysis.source} per-step data): "
                f"p5 {lengths.p5:.2f}, p25 {lengths.p25:.2f}, p50 {lengths.p50:.2f}, p75 {lengths.p75:.2f}, "
                f"p95 {lengths.p95:.2f}",
            )
        )


def check_best_k(result, expected) -> None:
    allowed = {expected} if isinstance(expected, int) else set(expected)
    if not allowed or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in allowed):
        raise ValueError(f"assert_best_k(expected=...) takes a draft length or a set of them, got {expected!r}")
    why = result.unavailable("best_k")
    if why:
        raise AssertionError(unavailable_message(result, "the best draft length", {"best_k": why}))
    analysis = result.analysis()
    if analysis.best_k in allowed:
        return
    predictions = ", ".join(f"k={k}: {v:.2f}x" for k, v in sorted(analysis.predictions.items()))
    wanted = " or ".join(map(str, sorted(allowed)))
    raise AssertionError(
        failure_message(
            f"the best draft length predicted for {result.spec.label()} is k={analysis.best_k}, not {wanted}",
            [],
            result,
            extra=f"predicted throughput speedups ({analysis.source} per-step data): {predictions}; "
            f"{analysis.oracle}: {analysis.oracle_speedup:.2f}x; step cost: {analysis.step_cost}",
        )
    )


def check_acceptance(
    result, min_rate: float | None, min_length: float | None, min_per_position: Sequence[float] | None
) -> None:
    for name, bound in (("min_rate", min_rate), ("min_length", min_length)):
        if bound is not None and (not isinstance(bound, (int, float)) or bound < 0):
            raise ValueError(f"assert_acceptance({name}=...) must be a non-negative number, got {bound!r}")
    if min_rate is not None and min_rate > 1:
        raise ValueError(f"assert_acceptance(min_rate={min_rate!r}) is a fraction (0.65 for 65%), not a percentage")
    why = result.unavailable("acceptance_rate")
    if why:
        raise AssertionError(unavailable_message(result, "draft acceptance", {"acceptance_rate": why}))
    counters = result.counters
    rows = []
    if min_rate is not None:
        rows.append(Row("acceptance_rate", min_rate, result.acceptance_rate, ok=result.acceptance_rate >= min_rate))
    if min_length is not None:
        rows.append(
            Row("acceptance_length", min_length, result.acceptance_length, ok=result.acceptance_length >= min_length)
        )
    if min_per_position is not None:
        measured = result.per_position_acceptance
        for position, bound in enumerate(min_per_position):
            value = measured[position] if position < len(measured) else math.nan
            rows.append(
                Row(
                    f"acceptance at position {position}",
                    bound,
                    value,
                    ok=value >= bound,
                    note="" if position < len(measured) else "unavailable: no counter for this position",
                )
            )
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
    repeat: int
    index: int
    position: int
    tie: bool | None  # None: no logprobs to tell (or outputs compared as text)
    gap: float | None  # reference's top-1 minus top-2 logprob at the position
    reference_text: str
    speculative_text: str


def classify_divergences(result, tie_threshold: float = TIE_THRESHOLD) -> list[Divergence]:
    """Every diverged request of every repeat, told apart as a numerical near-tie or a real divergence."""
    found = []
    for repeat, comparison in enumerate(result.outputs_per_repeat or [result.outputs]):
        run = result.reference_runs[min(repeat, len(result.reference_runs) - 1)]
        reference = {record.index: record for record in run.records}
        for request in comparison.diverged:
            record = reference.get(request.index)
            gap = None
            tops = record.top_logprobs if record is not None and comparison.basis == "token ids" else None
            if tops is not None and request.first_divergence < len(tops):
                values = sorted(tops[request.first_divergence].values(), reverse=True)
                if len(values) >= 2:
                    gap = values[0] - values[1]
            found.append(
                Divergence(
                    repeat,
                    request.index,
                    request.first_divergence,
                    None if gap is None else gap < tie_threshold,
                    gap,
                    request.reference_text,
                    request.speculative_text,
                )
            )
    return found


def _served(result) -> int:
    """The requests SD's runs served (each one's last step may be cut short by its fixed length)."""
    return sum(1 for run in result.speculative_runs for record in run.records if record.success)


def forced_range(result, forced: ForcedAcceptance) -> tuple[float, float]:
    """The mean acceptance lengths that count as the SD server honouring `forced` over what it served
    (engines.forced_acceptance.honoured_range, with the engine's own way of resolving a length)."""
    known = engine_named(result.spec.engine).forced_schedule_known
    return honoured_range(forced, result.counters.num_drafts, _served(result), known)


def check_forced_acceptance(result, forced: ForcedAcceptance) -> None:
    """The SD server accepted drafts at the mean length the test forced (engines.forced_acceptance), within
    `forced_range`: an engine or build that ignores the setting fails the test by name, never passes with
    its natural acceptance measured as if forced."""
    why = result.unavailable("acceptance_length")
    if why:
        raise AssertionError(unavailable_message(result, "forced acceptance", {"acceptance_length": why}))
    measured = result.acceptance_length
    low, high = forced_range(result, forced)
    if low <= measured <= high:
        return
    raise AssertionError(
        f"{result.spec.label()}: the server did not honour the forced acceptance: mean acceptance length "
        f"{measured:.2f} over {result.counters.num_drafts:.0f} drafting steps of {_served(result)} requests, forced "
        f"{forced.length:.2f} (allowed {low:.2f}-{high:.2f}); its {result.spec.engine} build may ignore or lack "
        "the setting, and the speedup measured is not the one at forced acceptance"
    )


def check_outputs_equivalent(
    result, min_match: float, ignore_numerical_ties: bool, tie_threshold: float = TIE_THRESHOLD
) -> None:
    if not 0 <= min_match <= 1:
        raise ValueError(f"assert_outputs_equivalent(min_match={min_match!r}) is a fraction between 0 and 1")
    why = result.unavailable("match_rate")
    if why:
        raise AssertionError(unavailable_message(result, "output equivalence", {"match_rate": why}))
    comparisons = result.outputs_per_repeat or [result.outputs]
    total = sum(len(c.requests) for c in comparisons)
    divergences = classify_divergences(result, tie_threshold)
    ties = [d for d in divergences if d.tie]
    identical = total - len(divergences)
    matched = identical + (len(ties) if ignore_numerical_ties else 0)
    rate = matched / total if total else math.nan
    if rate >= min_match:
        return
    by_text = any(c.basis == "text" for c in comparisons)
    unit = "character" if by_text else "token"
    lines = [
        f"{identical} of {total} requests identical over {len(comparisons)} repeat(s), {len(ties)} diverged "
        f"at a numerical near-tie (top-2 logprob gap < {tie_threshold}), {len(divergences) - len(ties)} "
        "diverged for real"
    ]
    if by_text:
        lines.append("(compared as text: a server sent no token ids, so near-ties cannot be told apart)")
    elif any(d.tie is None for d in divergences):
        lines.append("(no reference logprobs: run specdec.run(logprobs=2) to tell near-ties from real divergences)")
    for d in divergences[:5]:
        kind = "near-tie" if d.tie else "unknown" if d.tie is None else "real"
        gap = f", top-2 gap {d.gap:.3f}" if d.gap is not None else ""
        lines.append(
            f"  repeat {d.repeat + 1}, request {d.index}: first difference at {unit} {d.position} ({kind}{gap})"
        )
        lines.append(f"    reference: {d.reference_text!r}")
        lines.append(f"    SD:        {d.speculative_text!r}")
    if len(divergences) > 5:
        lines.append(f"  ... and {len(divergences) - 5} more")
    row = Row(
        "output match rate",
        min_match,
        rate,
        ok=False,
        note="near-ties count as matches" if ignore_numerical_ties and not by_text else "",
    )
    raise AssertionError(
        failure_message(
            f"SD outputs differ from the reference for {result.spec.label()}", [row], result, extra="\n".join(lines)
        )
    )
