"""The gate's speedups decided by the sequential rule (verdict.sequential), paired by prompt draw.

A speedup against a baseline is compared draw by draw on the same seeds, so the spread between prompt draws
(one four-prompt draw of code edits paid 1.25x, another 2.18x) cancels, and what is left is timing: SD's sends
of each draw, the reference's spread across draws, and the baseline's own (taken as this run's: the gate
compares speedups only on the machine the baseline was recorded on).  Against a stored baseline the drift
between two sessions counts too, which no run in this session shrinks: the machine's own, learned from the
results history where it has sessions enough (verdict.learned_drift), else the built-in figure, labelled;
against a baseline build measured in this session (--specdec-baseline-from build:PATH) it cancels, and
both builds' references are paired apart from SD's pairs (verdict.sequential.evidence).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

from ..detection import SESSION_DRIFT
from ..learned_drift import DriftFigure, built_in_drift, session_value_var
from ..metric_names import SPEEDUP_PREFIX, speedup_metric
from ..sequential.evidence import read
from ..sequential.rule import FAILED, FALSE_FAIL, UNDECIDED, tolerance_zone
from ..stats import Verdict


def on_seeds(baseline, seeds: list[int]):
    """`baseline` with only the repeats that sent `seeds`, in that order (a run of 2 draws against a baseline of
    3 compares the 2 it shares, in pairs); None when a seed is not among the baseline's."""
    recorded = list(baseline.config.get("repeat_seeds") or [])
    if recorded == seeds or len(recorded) != len(baseline.repeats) or not all(s in recorded for s in seeds):
        return None
    repeats = [baseline.repeats[recorded.index(s)] for s in seeds]
    return replace(baseline, repeats=repeats, config={**baseline.config, "repeat_seeds": list(seeds)})


def decide_speedup(result, baseline, metric: str, tolerance: float, in_session: bool, drift=None):
    """(verdict or None, why undecided or None, detects cell, drift figure or None) of speedup `metric` against
    `baseline`'s per-draw speedups; None for the verdict when the rule does not apply (no paired draws, or a
    result that cannot decide), and the gate compares as before.

    `drift(within, floor, timing)` gives the drift between this session and a stored baseline's (a `DriftFigure`):
    `within` is the log variance a session's value carries from its own runs, read from this session's timing
    spread, which a history's session values hold beside their drift; `floor` the machine's move this session's
    own reference measured, if it did; `timing` one pair's log sd, SD's run against the reference's (`Reading.timing`:
    what a server started anew carries beside its start, measure.start_drift, is one side's half of it).  It is
    asked at every look, as the timing spread firms up."""
    if not metric.startswith(SPEEDUP_PREFIX) or not hasattr(result, "decide"):
        return None, None, None, None
    if list(baseline.config.get("repeat_seeds") or []) != result.repeat_seeds():
        return None, None, None, None
    run_metric = speedup_metric(metric)

    def per_draw() -> list:
        """The baseline's speedup per draw; a baseline build's grows with the draws measured while undecided."""
        if in_session:
            return result.builds.baseline_result.repeat_speedups(run_metric)
        return [(r.get("derived") or {}).get(metric) for r in baseline.repeats]

    if not any(v is not None and math.isfinite(v) and v > 0 for v in per_draw()):
        return None, None, None, None

    def references() -> list | None:
        """A baseline build's reference per draw: measured in this session, so read apart from SD's pairs."""
        if not in_session:
            return None
        return [ref.metrics.as_dict().get(run_metric) for ref, _ in result.builds.baseline_result.repeat_pairs()]

    used: list[DriftFigure] = []
    if drift is None:
        drift = lambda within, floor, timing: built_in_drift(SESSION_DRIFT["speedup"])  # noqa: E731

    def evidence():
        plain = result.speedup_evidence(run_metric, baseline=per_draw(), baseline_reference=references())
        if in_session:  # a baseline build measured beside this one: no drift between them
            return plain
        reading = read(plain)
        draws = len([s for s in plain.sends if s])
        within = session_value_var(reading.timing, draws) if reading.timing is not None else 0.0
        floor = abs(math.expm1(reading.move_measured)) if reading.move_measured is not None else 0.0
        figure = drift(within, floor, reading.timing if reading.timing is not None else 0.0)
        used.append(figure)
        return replace(plain, known_var=2 * figure.value**2)

    bad, good = tolerance_zone(tolerance)
    decision = result.decide(f"{metric} against the baseline{' build' if in_session else ''}", evidence, bad, good)
    before = per_draw()
    low, high = decision.ratio_interval
    figure = used[-1] if used else None
    verdict = Verdict(
        metric=metric,
        higher_is_better=True,
        baseline=statistics.median(v for v in before if v is not None and math.isfinite(v)),
        current=result.speedup(run_metric),
        change=decision.ratio - 1,
        tolerance=tolerance,
        ci_low=low - 1 if math.isfinite(low) else None,
        ci_high=high - 1 if math.isfinite(high) else None,
        confidence=1 - FALSE_FAIL,
        regression=decision.outcome == FAILED,
        method="sequential, paired by draw",
        decided_by=decision.describe() + (f"; {figure.describe()}" if figure is not None else ""),
    )
    cell = f"{decision.outcome}, {decision.runs} runs"
    return verdict, (decision.why if decision.outcome == UNDECIDED else None), cell, figure
