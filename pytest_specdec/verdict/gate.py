"""The regression gate: a result against its stored baseline, and the update flow.

Acceptance compares across environments; speedups (and the ratios built on
step times or held loads) only on a machine of the baseline's speed (the
reference's decode step, measured in both sessions: fingerprint.MachineSpeed);
absolute numbers (tok/s, ms) only when, besides, the environment fingerprint
matches.  The report says which comparison was made (`comparison`).  In
update mode nothing fails: a missing, corrupt or out-of-tolerance baseline is
queued and written at session end, while one within tolerance is left alone
so noise does not churn files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .assertions import Row, failure_message
from .baselines import Baseline, BaselineError, BaselineMissing, load_baseline, write_baseline
from .fingerprint import MachineSpeed, same_environment
from ..measure.derived import EXACT_METRICS, SD_RATIO_METRICS, SPEEDUP_PREFIX, canonical_metric, is_machine_bound
from ..measure.result import repeat_seed
from .stats import compare_exact, compare_samples
from .detection import Detection, detection
from .tolerances import canonical_keys, resolve_tolerance

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


def is_ratio(metric: str) -> bool:
    """Speedups and acceptance compare across environments; tok/s and ms only within one."""
    return metric.startswith(SPEEDUP_PREFIX) or metric in SD_RATIO_METRICS


def repeat_seeds(result) -> list[int]:
    """The prompt/arrival seed of each SD repeat (see result.repeat_seed)."""
    if hasattr(result, "repeat_seeds"):
        return result.repeat_seeds()
    return [repeat_seed(result.seed, run.repeat) for run in result.speculative_runs]


def _side(metric: str) -> str:
    return "derived" if is_ratio(metric) else "speculative"


@dataclass
class BaselineSession:
    """Session-wide baseline bookkeeping: what was used, what to write at the end."""

    base_dir: Path
    update: bool
    fingerprint: dict
    ini_tolerances: dict[str, float] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    pending: dict[str, Baseline] = field(default_factory=dict)
    written: list[Path] = field(default_factory=list)
    # Where baselines come from instead of files (--specdec-baseline-from history): (test id, fingerprint) -> Baseline.
    loader: Any = None

    def load(self, test_id: str, fingerprint: dict) -> Baseline:
        if self.loader is not None:
            return self.loader(test_id, fingerprint)
        return load_baseline(self.base_dir, test_id)

    def flush(self) -> list[Path]:
        """Write queued baselines (atomically); called at session end."""
        for test_id, baseline in sorted(self.pending.items()):
            self.written.append(write_baseline(self.base_dir, baseline))
        self.pending.clear()
        return self.written


class RegressionGate:
    """One test's view of the baselines: `check(result)` is ``assert_no_regression``."""

    def __init__(self, session: BaselineSession, test_id: str, marker_tolerances: Any = None):
        self.session = session
        self.test_id = test_id
        self.marker_tolerances = marker_tolerances
        self.last_report: str = ""
        # What the last check concluded, for reports: None (never checked),
        # "passed", "failed", "missing", "unreadable", "unavailable" or "recorded" (update mode).
        self.outcome: str | None = None
        self.detections: dict[str, Detection] = {}  # what the last check can detect, per gated metric
        # Which comparison the last check made (environment, machine speed), for reports: None if none.
        self.comparison: str | None = None

    def _fingerprint_for(self, result) -> dict:
        """The session's fingerprint, with the engine that served `result` where it is not vLLM (the session's
        fingerprint names the installed vLLM build), at the version its servers reported."""
        engine = getattr(getattr(result, "spec", None), "engine", "vllm")
        if engine == "vllm":
            return self.session.fingerprint
        return {**self.session.fingerprint, "engine": engine, "engine_version": result.engine_version}

    def _baseline_for(self, result, metrics, tolerances) -> Baseline:
        return Baseline(
            test_id=self.test_id,
            fingerprint=self._fingerprint_for(result),
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
            m: resolve_tolerance(m, call=canonical_keys(tolerance), marker=self.marker_tolerances,
                                 ini=self.session.ini_tolerances)
            for m in metrics
        }
        self.session.used.add(self.test_id)
        # Figures this run could not measure: never a pass, and never recorded as if they were.
        unavailable = {m: why for m in metrics if (why := _unavailable(result, m))}
        refused = {m: why for m, why in unavailable.items() if m not in allowed}
        if refused:
            self.outcome = "unavailable"
            raise AssertionError(_unavailable_message(self.test_id, refused, result, self.session.update))
        path_hint = self.session.base_dir
        try:
            baseline = self.session.load(self.test_id, self._fingerprint_for(result))
        except BaselineError as exc:
            missing = isinstance(exc, BaselineMissing)
            if self.session.update:
                self.session.pending[self.test_id] = self._baseline_for(result, metrics, tolerances)
                self.last_report = (f"new baseline queued for {self.test_id} (written at session end to {path_hint})"
                                    if missing else f"unreadable baseline replaced: {exc}")
                self.outcome = "recorded"
                return
            self.outcome = "missing" if missing else "unreadable"
            raise AssertionError(str(exc) if missing else f"{exc}\nre-record it with --specdec-update-baselines") from None

        running_on = getattr(getattr(result, "spec", None), "engine", "vllm")
        recorded_on = (baseline.config.get("spec") or {}).get("engine", "vllm")  # older baselines: vLLM's
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
                f"{running_on!r} with --specdec-update-baselines")
        current = result.repeats()
        speed = MachineSpeed.of(baseline.repeats, current)
        same_env = same_environment(baseline.fingerprint, self._fingerprint_for(result)) and speed.same
        # Same seeds per repeat on both sides: repeat i ran the same prompts, so compare in pairs.
        paired = baseline.config.get("repeat_seeds") == repeat_seeds(result)
        rows, verdicts, skipped, detects = [], [], [], []
        self.detections = {}
        for metric in metrics:
            if (not is_ratio(metric) and not same_env) or (is_machine_bound(metric) and not speed.same):
                skipped.append(metric)
                continue
            side = _side(metric)
            before = baseline.per_repeat(side, metric) if paired else baseline.samples(side, metric)
            if metric in unavailable or not any(v is not None and math.isfinite(v) for v in before):
                why = unavailable.get(metric) or "the baseline has no value for it (recorded unavailable or without it)"
                allowed_here = metric in allowed
                rows.append(Row(metric, None, math.nan, tolerances[metric], ok=allowed_here,
                                note=f"unavailable{' (allowed)' if allowed_here else ''}: {why}", direction=metric))
                detects.append("-")
                if not allowed_here:
                    verdicts.append(None)
                continue
            now = [entry[side].get(metric, math.nan) for entry in current]
            if metric in EXACT_METRICS:
                verdict = compare_exact(metric, before, now)
                verdicts.append(verdict)
                rows.append(Row(metric, verdict.baseline, verdict.current, None, ok=not verdict.regression,
                                note="must equal the baseline's", direction=metric))
                detects.append("any change")
                continue
            verdict = compare_samples(metric, before, now, tolerance=tolerances[metric], paired=paired)
            verdicts.append(verdict)
            found = detection(metric, baseline.per_repeat(side, metric), len(now), tolerances[metric], paired=paired,
                              current_values=now if paired else None)
            self.detections[metric] = found
            detects.append(_detects_cell(found))
            ci = None
            if verdict.ci_low is not None:
                # The CI is of the signed change; show it as values of the metric.
                as_value = (lambda c: verdict.baseline * (1 + c)) if verdict.higher_is_better else (
                    lambda c: verdict.baseline / (1 + c))
                ci = tuple(sorted((as_value(verdict.ci_low), as_value(verdict.ci_high))))
            rows.append(Row(metric, verdict.baseline, verdict.current, tolerances[metric], ci, not verdict.regression,
                            direction=metric))
        if not speed.same:
            comparison = (f"another machine's speed: {speed.describe()}. A speedup is the machine's as much as "
                          f"SD's, so only acceptance-type figures are compared; not compared: "
                          f"{', '.join(skipped) or '-'} (record a baseline on this machine with "
                          "--specdec-update-baselines to gate them)")
        elif same_env:
            comparison = "same environment: ratios and absolute numbers compared"
        else:
            comparison = ("different environment from the baseline: ratios only, not compared: "
                          f"{', '.join(skipped) or '-'}")
        if speed.same:
            comparison += f"\nmachine speed: {speed.describe()}"
        if baseline.migrated_from:
            comparison += (f"\n{baseline.path}: schema version {baseline.migrated_from}, read as version "
                           f"{baseline.schema_version}; --specdec-update-baselines rewrites it")
        if history := baseline.config.get("history"):
            comparison += (f"\nbaseline from the history {history['url']}: the {history['sessions']} sessions since "
                           f"its newest change point ({history['since_commit'] or '?'} to "
                           f"{history['newest_commit'] or '?'})")
        self.comparison = comparison
        judged = [v for v in verdicts if v is not None]
        failed = [v for v in verdicts if v is None or v.regression]
        described = [v.describe() for v in judged] + [d.describe() for d in self.detections.values()]
        self.last_report = comparison + "\n" + "\n".join(described)
        if self.session.update:
            moved = any(abs(v.change) > v.tolerance for v in judged if not math.isnan(v.change))
            # Also re-recorded: a baseline from another environment or machine speed, in an older file format, or
            # without a figure.
            rewrite = moved or not same_env or bool(baseline.migrated_from) or any(v is None for v in verdicts)
            if rewrite:
                self.session.pending[self.test_id] = self._baseline_for(result, metrics, tolerances)
            self.outcome = "recorded" if rewrite else "passed"
            return
        self.outcome = "failed" if failed else "passed"
        if failed:
            raise AssertionError(
                failure_message(
                    f"performance regressed against the baseline of {self.test_id}",
                    rows,
                    result,
                    required_label="baseline",
                    extra=comparison + "\n" + "\n".join(described),
                    extra_columns={"detects": detects},
                )
            )


def _unavailable(result, metric: str) -> str | None:
    """Why the result has no value for a gated metric (None when it has one in every repeat)."""
    if is_ratio(metric):
        return result.unavailable(metric)
    missing = [run.repeat + 1 for run in result.speculative_runs
               if not math.isfinite(run.metrics.as_dict().get(metric, math.nan))]
    return f"no value in SD repeat {', '.join(map(str, missing))}" if missing else None


def _unavailable_message(test_id: str, reasons: dict[str, str], result, update: bool) -> str:
    doing = "cannot record a baseline" if update else "cannot compare with the baseline"
    lines = [f"{test_id}: {doing}: figures unavailable"]
    lines += [f"  {metric}: unavailable: {why}" for metric, why in reasons.items()]
    lines.append("(a test that knowingly runs without a figure says so: "
                 f"assert_no_regression(allow_unavailable={sorted(reasons)!r}))")
    return failure_message("\n".join(lines), [], result)


def _detects_cell(found: Detection) -> str:
    if found.spread is None:
        return "> tolerance (spread unknown)"
    if found.smallest_drop is None or found.smallest_drop >= 0.95:
        return "nothing reliably"
    return f">= {found.smallest_drop:.0%} (false alarms {found.false_alarm_rate:.1%})"
