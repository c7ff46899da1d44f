"""The gate's speedups decided by the sequential rule (verdict.sequential), paired by prompt draw.

A speedup against a baseline is compared draw by draw on the same seeds, so the spread between prompt draws
(one four-prompt draw of code edits paid 1.25x, another 2.18x) cancels, and what is left is timing: SD's sends
of each draw, the reference's spread across draws, and the baseline's own (taken as this run's: the gate
compares speedups only on the machine the baseline was recorded on).  Against a stored baseline the drift
between two sessions counts too (verdict.detection.SESSION_DRIFT), which no run in this session shrinks;
against a baseline build measured in this session (--specdec-baseline-from build:PATH) it cancels, and
both builds' references are read apart from SD's pairs (verdict.sequential.evidence).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

from ..detection import SESSION_DRIFT
from ..metric_names import SPEEDUP_PREFIX, speedup_metric
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


def decide_speedup(result, baseline, metric: str, tolerance: float, in_session: bool):
    """(verdict or None, why undecided or None, detects cell) of speedup `metric` against `baseline`'s
    per-draw speedups; None for the verdict when the rule does not apply (no paired draws, or a result that
    cannot decide), and the gate compares as before."""
    if not metric.startswith(SPEEDUP_PREFIX) or not hasattr(result, "decide"):
        return None, None, None
    if list(baseline.config.get("repeat_seeds") or []) != result.repeat_seeds():
        return None, None, None
    run_metric = speedup_metric(metric)

    def per_draw() -> list:
        """The baseline's speedup per draw; a baseline build's grows with the draws measured while undecided."""
        if in_session:
            return result.builds.baseline_result.repeat_speedups(run_metric)
        return [(r.get("derived") or {}).get(metric) for r in baseline.repeats]

    if not any(v is not None and math.isfinite(v) and v > 0 for v in per_draw()):
        return None, None, None

    def references() -> list | None:
        """A baseline build's reference per draw: measured in this session, so read apart from SD's pairs."""
        if not in_session:
            return None
        return [ref.metrics.as_dict().get(run_metric) for ref, _ in result.builds.baseline_result.repeat_pairs()]

    known_var = 0.0 if in_session else 2 * SESSION_DRIFT["speedup"] ** 2
    bad, good = tolerance_zone(tolerance)
    decision = result.decide(
        f"{metric} against the baseline{' build' if in_session else ''}",
        lambda: result.speedup_evidence(
            run_metric, baseline=per_draw(), known_var=known_var, baseline_reference=references()
        ),
        bad,
        good,
    )
    before = per_draw()
    low, high = decision.ratio_interval
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
        decided_by=decision.describe(),
    )
    cell = f"{decision.outcome}, {decision.runs} runs"
    return verdict, (decision.why if decision.outcome == UNDECIDED else None), cell
