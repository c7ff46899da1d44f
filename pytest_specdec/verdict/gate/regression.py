"""The regression gate: a result against its stored baseline, and the update flow.

On the machine the baseline was recorded on (verdict.machine: hardware identity and an engine-independent
probe) every gated figure is compared, across engine versions, with the reference's own tok/s and ms beside
SD's; on another machine only acceptance-type figures (verdict.comparison).  A check that could compare
nothing ends "not compared", never "passed" (--specdec-strict fails it), and one whose baseline measured
other traffic "stale" (verdict.gate.staleness).  The report says which comparison was made (`comparison`).  In
update mode nothing fails: a missing, corrupt or out-of-tolerance baseline is queued and written at session
end, while one within tolerance is left alone so noise does not churn files."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from ..assertions import Row, failure_message
from .baselines import Baseline, BaselineError, BaselineMissing
from ..comparison import ComparisonPlan, is_ratio, reference_slowdowns
from ..metric_names import EXACT_METRICS, SPEEDUP_PREFIX, canonical_metric
from ..stats import compare_exact, compare_intervals, compare_samples
from .speedups import decide_speedup, on_seeds
from .outcome import ALLOWED_UNAVAILABLE, NOT_COMPARED, PASSED, UNDECIDED, outcome_of, strict_failure
from ..detection import Detection, detection, session_drift
from ..learned_drift import DriftFigure, smallest_failable_drop
from .staleness import STALE, stale_fields, stale_report
from ..tolerances import canonical_keys, resolve_tolerance
from ...engines.server_spec import DEFAULT_ENGINE
from .baseline_session import BaselineSession as BaselineSession  # re-exported: it lived here
from .table import _row, _figure, _unavailable, _unavailable_message, _detects_cell  # noqa: F401 (lived here)

# What assert_no_regression() compares when not told: the ratios SD exists
# for, and the SD run's own throughput and latency.
DEFAULT_METRICS = (
    "speedup_output_throughput",
    "acceptance_rate",
    "acceptance_length",
    "output_throughput",
    "median_tpot_ms",
    "median_ttft_ms",
)

# What a speedup still flagged after measuring again leaves to decide: each side's own tok/s and ms.
OWN_FIGURES = ("output_throughput", "median_tpot_ms", "median_ttft_ms")
# Their band where the test does not gate them itself: a test that gates ratios only chose not to hold absolute
# figures to their defaults, which two unchanged sessions on shared machines can move past; a flagged
# regression of the kinds this catches moves them further (docs/benchmarks.md, "Figures the code once quoted").
OWN_FIGURE_TOLERANCE = 0.25
# Figures known only within an interval: gated on both intervals (stats.compare_intervals).
INTERVAL_METRICS = ("capacity_ratio",)


def earlier_repeats(result) -> list[dict]:
    """Both sides' figures per repeat of each measurement a flagged comparison replaced (empty when none):
    the row and the gate keep them, since a flag that stays may be the regression itself."""
    entries = []
    for reference_runs, speculative_runs in getattr(result, "earlier_runs", None) or ():
        for i, run in enumerate(speculative_runs):
            reference = reference_runs[min(i, len(reference_runs) - 1)]
            entries.append({"reference": reference.metrics.as_dict(), "speculative": run.metrics.as_dict()})
    return entries


def repeat_seeds(result) -> list[int]:
    """The prompt/arrival seed of each SD repeat (see result.repeat_seed)."""
    return result.repeat_seeds()


def _side(metric: str) -> str:
    return "derived" if is_ratio(metric) else "speculative"


class RegressionGate:
    """One test's view of the baselines: `check(result)` is ``assert_no_regression``."""

    def __init__(self, session: BaselineSession, test_id: str, marker_tolerances: Any = None):
        self.session = session
        self.test_id = test_id
        self.marker_tolerances = marker_tolerances
        self.last_report: str = ""
        # What the last check concluded, for reports: None (never checked),
        # "passed", "failed", "not compared", "missing", "unreadable", "unavailable" or "recorded" (update mode).
        self.outcome: str | None = None
        self.detections: dict[str, Detection] = {}  # what the last check can detect, per gated metric
        self.drifts: dict[str, DriftFigure] = {}  # the drift between sessions the last check allowed for, per figure
        # Which comparison the last check made (machine, engine change), for reports: None if none.
        self.comparison: str | None = None
        self.not_compared: dict[str, str] = {}  # gated figures the last check skipped, with the reason
        self.figures: list[dict] = []  # the last check's table, one dict per compared figure, for reports

    def _drift(self, result, metric: str):
        """`decide_speedup`'s drift source for `metric` against a stored baseline (verdict.learned_drift)."""
        fingerprint = self._fingerprint_for(result)
        measured = getattr(result, "start_drift", None)  # --specdec-measure-drift's starts anew, where measured
        return lambda within, floor, timing: self.session.drift.figure(
            self.test_id,
            fingerprint,
            metric,
            session_drift(metric),
            within=within,
            floor=floor,
            measured=measured,
            timing=timing,
        )

    def _side_drift(self, result, side: str, metric: str) -> DriftFigure | None:
        """The drift of one side's own figure (the history's ``speculative_output_throughput``), or None where the
        built-in drift is none: greedy acceptance repeats exactly, and a ratio of two sides is a speedup's."""
        built_in = session_drift(metric)
        if not built_in or side == "derived" or getattr(result, "builds", None) is not None:
            return None
        return self.session.drift.figure(
            self.test_id,
            self._fingerprint_for(result),
            f"{side}_{metric}",
            built_in,
            measured=getattr(result, "start_drift", None),
        )

    def _fingerprint_for(self, result, build=None) -> dict:
        """The session's fingerprint, with the engine that served `result` where it is not vLLM (the session's
        fingerprint names the installed vLLM build), at the version its servers reported; for one side of a
        builds A/B (`build`: measure.build_runs.Build), that build's version and path."""
        engine = getattr(getattr(result, "spec", None), "engine", DEFAULT_ENGINE)
        builds = getattr(result, "builds", None)
        if build is None and builds is not None:
            build = builds.this
        if build is not None:
            return {
                **self.session.fingerprint,
                "engine": engine,
                "engine_version": build.version or result.engine_version,
                "engine_build": build.path or "this environment",
            }
        if engine == DEFAULT_ENGINE:
            return self.session.fingerprint
        return {**self.session.fingerprint, "engine": engine, "engine_version": result.engine_version}

    def _baseline_for(self, result, metrics, tolerances, build=None) -> Baseline:
        return Baseline(
            test_id=self.test_id,
            fingerprint=self._fingerprint_for(result, build),
            config={
                "spec": {
                    "model": result.spec.model,
                    "speculative_config": result.spec.speculative_config,
                    "server_args": list(result.spec.server_args),
                    "tensor_parallel_size": result.spec.tensor_parallel_size,
                    "engine": result.spec.engine,
                },
                "workload": result.workload,
                "pattern": result.pattern,
                "seed": result.seed,
                "repeat_seeds": repeat_seeds(result),
            },
            repeats=result.repeats(),
            tolerances=tolerances,
            recorded_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            plugin_version=str(self.session.fingerprint.get("plugin_version", "")),
        )

    def check(self, result, metrics=None, tolerance=None, allow_unavailable=()) -> None:
        metrics = [canonical_metric(m) for m in (metrics or DEFAULT_METRICS)]
        allowed = {canonical_metric(m) for m in allow_unavailable}
        unknown = sorted(allowed - set(metrics))
        if unknown:
            raise ValueError(f"allow_unavailable names metrics this check does not gate: {', '.join(unknown)}")
        tolerances = {
            m: resolve_tolerance(
                m, call=canonical_keys(tolerance), marker=self.marker_tolerances, ini=self.session.ini_tolerances
            )
            for m in metrics
        }
        self.session.used.add(self.test_id)
        self.figures = []
        # Speedups of a comparison still cold or drifting after it was measured again: not compared, the flag
        # is the reason (measure.fairness), and never recorded as a baseline.
        unfair = getattr(result, "unfair_speedup", lambda: None)()
        builds = getattr(result, "builds", None)
        if builds is not None and not unfair:  # a pair is as fair as its worse side
            unfair = builds.baseline_unfair(getattr(result, "accepted_flags", ()))
        flagged = {m: unfair for m in metrics if unfair and m.startswith(SPEEDUP_PREFIX)}
        # Figures this run could not measure: never a pass, and never recorded as if they were.
        unavailable = {m: why for m in metrics if m not in flagged and (why := _unavailable(result, m))}
        refused = {m: why for m, why in unavailable.items() if m not in allowed}
        if self.session.update:  # a flagged speedup is not recorded as if it were SD's
            refused.update({m: why for m, why in flagged.items() if m not in allowed})
        if refused:
            self.outcome = "unavailable"
            raise AssertionError(_unavailable_message(self.test_id, refused, result, self.session.update))
        path_hint = self.session.base_dir
        try:
            if builds is not None:  # the baseline build, measured beside this one in this session
                baseline = self._baseline_for(builds.baseline_result, metrics, tolerances, builds.baseline)
            else:
                baseline = self.session.load(self.test_id, self._fingerprint_for(result))
        except BaselineError as exc:
            missing = isinstance(exc, BaselineMissing)
            if self.session.update:
                self.session.pending[self.test_id] = self._baseline_for(result, metrics, tolerances)
                self.last_report = (
                    f"new baseline queued for {self.test_id} (written at session end to {path_hint})"
                    if missing
                    else f"unreadable baseline replaced: {exc}"
                )
                self.outcome = "recorded"
                return
            self.outcome = "missing" if missing else "unreadable"
            raise AssertionError(
                str(exc) if missing else f"{exc}\nre-record it with --specdec-update-baselines"
            ) from None

        running_on = getattr(getattr(result, "spec", None), "engine", DEFAULT_ENGINE)
        recorded_on = (baseline.config.get("spec") or {}).get("engine", DEFAULT_ENGINE)  # older baselines: vLLM's
        if recorded_on != running_on:
            # Another engine's figures are another system's: never a silent gate, in either direction.
            if self.session.update:
                self.session.pending[self.test_id] = self._baseline_for(result, metrics, tolerances)
                self.last_report = f"baseline recorded on {recorded_on} replaced by one on {running_on}"
                self.outcome = "recorded"
                return
            self.outcome = "failed"
            raise AssertionError(
                f"{baseline.path}: the baseline of {self.test_id} was recorded on engine {recorded_on!r}, this run "
                f"is on {running_on!r}: a baseline never gates another engine; record one for "
                f"{running_on!r} with --specdec-update-baselines"
            )
        stale = [] if builds else stale_fields(baseline.config, result)
        if stale:  # another traffic's figures: never paired with this run's, never a regression or a pass
            self.last_report, self.outcome = stale_report(self.test_id, str(baseline.path), stale), STALE
            self.comparison = "stale: " + ", ".join(stale)
            self.not_compared = {"baseline": self.last_report}
            if self.session.update:  # recorded again, on this run's traffic: nothing was left uncompared
                self.outcome, self.not_compared = "recorded", {}
                self.session.pending[self.test_id] = self._baseline_for(result, metrics, tolerances)
            elif self.session.strict:
                raise AssertionError(self.last_report + "\n--specdec-strict fails a stale baseline")
            return
        current = result.repeats()
        plan = ComparisonPlan.of(baseline.fingerprint, self._fingerprint_for(result), baseline.repeats, current)
        if plan.machine.same_hardware and plan.machine.probe_moved and self.session.probe_again():
            plan = ComparisonPlan.of(baseline.fingerprint, self._fingerprint_for(result), baseline.repeats, current)
        # Same seeds per repeat on both sides: repeat i ran the same prompts, so compare in pairs (on the draws
        # both measured, where this run took fewer than the baseline).
        baseline = on_seeds(baseline, repeat_seeds(result)) or baseline
        paired = baseline.config.get("repeat_seeds") == repeat_seeds(result)
        rows, verdicts, detects = [], [], []
        skipped: dict[str, str] = {m: UNDECIDED + why for m, why in flagged.items()}
        self.detections = {}
        self.drifts = {}
        gated: list[tuple[str, str]] = []  # (side, figure): whose history segments to show
        # A flag that persists is a finding: a side still cold or drifting after measuring again may be the
        # regression itself, so on the same machine each side's own figures are compared over both
        # measurements, whether the test gates them or not.
        own = [m for m in OWN_FIGURES if m not in metrics] if flagged and plan.machine.same else []
        tolerances.update(
            {
                m: max(
                    OWN_FIGURE_TOLERANCE,
                    resolve_tolerance(
                        m,
                        call=canonical_keys(tolerance),
                        marker=self.marker_tolerances,
                        ini=self.session.ini_tolerances,
                    ),
                )
                for m in own
            }
        )
        earlier = earlier_repeats(result) if flagged else []
        measured = earlier + current if earlier else current
        for metric in [*metrics, *own]:
            if metric in flagged:
                continue
            if why := plan.skip_reason(metric) or sampled_acceptance(result, metric):
                skipped[metric] = why
                continue
            side = _side(metric)
            gated.append((side, metric))
            if plan.compares_reference(metric):
                gated.append(("reference", metric))
            entries = measured if metric not in EXACT_METRICS and not is_ratio(metric) else current
            copies = len(entries) // max(1, len(current))  # each earlier measurement sent the same seeds
            before = baseline.per_repeat(side, metric) * copies if paired else baseline.samples(side, metric)
            if metric in unavailable or not any(v is not None and math.isfinite(v) for v in before):
                why = unavailable.get(metric) or "the baseline has no value for it (recorded unavailable or without it)"
                allowed_here = metric in allowed
                rows.append(
                    Row(
                        metric,
                        None,
                        math.nan,
                        tolerances[metric],
                        ok=allowed_here or metric in own,
                        note=f"unavailable{' (allowed)' if allowed_here else ''}: {why}",
                        direction=metric,
                    )
                )
                detects.append("-")
                if allowed_here or metric in own:  # allowed, or a figure the test did not gate: not compared
                    skipped[metric] = (ALLOWED_UNAVAILABLE if allowed_here else "unavailable: ") + why
                else:
                    verdicts.append(None)
                continue
            now = [entry[side].get(metric, math.nan) for entry in entries]
            if metric in EXACT_METRICS:
                verdict = compare_exact(metric, before, now)
                verdicts.append(verdict)
                rows.append(
                    Row(
                        metric,
                        verdict.baseline,
                        verdict.current,
                        None,
                        ok=not verdict.regression,
                        note="must equal the baseline's",
                        direction=metric,
                    )
                )
                detects.append("any change")
                continue
            if metric in INTERVAL_METRICS:
                verdict, undecided = compare_intervals(metric, baseline.repeats, current, tolerances[metric])
                if undecided:
                    skipped[metric] = UNDECIDED + undecided
                else:
                    verdicts.append(verdict)
                rows.append(_row(metric, metric, verdict, tolerances[metric]))
                detects.append("on the intervals")
                continue
            if not flagged and entries is current and not self.session.update:
                verdict, undecided, cell, drift = decide_speedup(
                    result, baseline, metric, tolerances[metric], builds is not None, self._drift(result, metric)
                )
                if drift is not None:
                    self.drifts[metric] = drift
                if verdict is not None:
                    if undecided:
                        skipped[metric] = UNDECIDED + undecided
                    else:
                        verdicts.append(verdict)
                    rows.append(_row(metric, metric, verdict, tolerances[metric]))
                    detects.append(cell)
                    continue
            sides = [(metric, side, before, now)]
            if plan.compares_reference(metric):
                ref_before = (
                    baseline.per_repeat("reference", metric) * copies
                    if paired
                    else baseline.samples("reference", metric)
                )
                ref_now = [(entry.get("reference") or {}).get(metric, math.nan) for entry in entries]
                if any(v is not None and math.isfinite(v) for v in ref_before):
                    sides.append((f"{metric} (reference)", "reference", ref_before, ref_now))
            for label, side_name, values_before, values_now in sides:
                verdict = compare_samples(
                    metric, values_before, values_now, tolerance=tolerances[metric], paired=paired
                )
                verdict = replace(verdict, metric=label + (" (both measurements)" if entries is not current else ""))
                verdicts.append(verdict)
                drift = self._side_drift(result, side_name, metric)
                if drift is not None:
                    self.drifts[label] = drift
                found = replace(
                    detection(
                        metric,
                        baseline.per_repeat(side_name, metric),
                        len(values_now),
                        tolerances[metric],
                        paired=paired,
                        current_values=values_now[-len(current) :] if paired else None,
                        drift=None if drift is None else drift.value,
                    ),
                    metric=label,
                )
                self.detections[label] = found
                detects.append(_detects_cell(found))
                rows.append(_row(verdict.metric, metric, verdict, tolerances[metric]))
        comparison = plan.describe(skipped)
        if self.drifts:
            comparison += "".join(
                f"\n{figure}: {drift.describe()}; no measured drop under "
                f"{smallest_failable_drop(drift.value):.1%} can fail with it"
                for figure, drift in self.drifts.items()
            )
        if builds is not None:
            comparison = builds.describe(result) + "\n" + comparison
        if baseline.migrated_from:
            comparison += (
                f"\n{baseline.path}: schema version {baseline.migrated_from}, read as version "
                f"{baseline.schema_version}; --specdec-update-baselines rewrites it"
            )
        if history := baseline.config.get("history"):
            segments = history.get("segments", {})  # side -> figure -> words, laid out as the baseline's values
            comparison += f"\nbaseline from the history {history['url']}, each figure its own segment:" + "".join(
                f"\n  {metric}{' (reference)' if side == 'reference' else ''}: {segments[side][metric]}"
                for side, metric in dict.fromkeys(gated)
                if metric in segments.get(side, {})
            )
        self.comparison = comparison
        self.not_compared = dict(skipped)
        self.figures = [_figure(row) for row in rows]
        judged = [v for v in verdicts if v is not None]
        failed = [v for v in verdicts if v is None or v.regression]
        described = [v.describe() for v in judged] + [d.describe() for d in self.detections.values()]
        if slowdown := reference_slowdowns(judged):
            described.insert(0, slowdown)
        self.last_report = comparison + "\n" + "\n".join(described)
        if self.session.update:
            moved = any(abs(v.change) > v.tolerance for v in judged if not math.isnan(v.change))
            # Also re-recorded: a baseline from another machine or without a machine probe, in an older file
            # format, or without a figure.
            rewrite = (
                moved
                or not plan.machine.same
                or plan.machine.recorded_probe is None
                or bool(baseline.migrated_from)
                or any(v is None for v in verdicts)
            )
            if rewrite:
                self.session.pending[self.test_id] = self._baseline_for(result, metrics, tolerances)
            self.outcome = "recorded" if rewrite else "passed"
            return
        if failed:
            self.outcome = "failed"
            raise AssertionError(
                failure_message(
                    f"performance regressed against the baseline{' build' if builds else ''} of {self.test_id}",
                    rows,
                    result,
                    required_label="baseline build (B)" if builds else "baseline",
                    extra=comparison + "\n" + "\n".join(described),
                    extra_columns={"detects": detects},
                )
            )
        compared = [v.metric for v in judged]
        self.outcome = outcome_of(compared, skipped, failed=False)
        if self.outcome == NOT_COMPARED:
            reasons = "\n".join(f"  {metric}: {why}" for metric, why in skipped.items())
            self.last_report = f"not compared: no gated figure could be compared\n{reasons}\n{comparison}"
        if self.outcome != PASSED and self.session.strict:
            raise AssertionError(strict_failure(self.test_id, str(baseline.path), self.outcome, skipped, comparison))


def sampled_acceptance(result, metric: str) -> str:
    """Why an acceptance figure of a forced-acceptance run is not compared with a stored baseline, or "".

    The gate compares acceptance pair by pair, as greedy decoding makes it: the same prompts accept the same
    drafts in every session, so acceptance does not drift.  An engine told to accept at a set mean length draws
    each step's accepted count itself (llama.cpp's as widely as a schedule of that mean can spread), so two
    sessions' values differ by that sampling alone, several percent over a few hundred steps, beyond the
    default tolerance and outside what a pair of repeats shows: compared, an unchanged engine would be failed.
    That the engine honoured the forced length is checked on every run instead (verdict.assertions)."""
    if getattr(result, "forced", None) is None or "acceptance" not in metric:
        return ""
    return (
        "not compared: the engine drew this run's accepted counts itself (forced acceptance), so its acceptance "
        "differs between sessions by that sampling, which the gate, built for greedy acceptance that repeats "
        "exactly, does not model; every run checks that the engine honoured the forced length instead"
    )
