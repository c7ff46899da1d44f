"""The regression gate: a result against its stored baseline, and the update flow.

Ratios (speedups, acceptance) compare across environments; absolute numbers
(tok/s, ms) only when the environment fingerprint matches, and the report
says which comparison was made.  In update mode nothing fails: a missing,
corrupt or out-of-tolerance baseline is queued and written at session end,
while one within tolerance is left alone so noise does not churn files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .assertions import Row, failure_message
from .baselines import Baseline, BaselineError, BaselineMissing, load_baseline, write_baseline
from .fingerprint import same_environment
from .result import repeat_seed
from .stats import compare_samples, resolve_tolerance

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
RATIO_METRICS = {"acceptance_rate", "acceptance_length", "match_rate"}


def is_ratio(metric: str) -> bool:
    return metric in RATIO_METRICS or metric.startswith("speedup_")


def repeats_of(result) -> list[dict[str, dict[str, float]]]:
    """One entry per repeat: both runs' metrics and the derived ratios, paired by repeat index."""
    entries = []
    for index, sd_run in enumerate(result.speculative_runs):
        ref_run = result.reference_runs[min(index, len(result.reference_runs) - 1)]
        ref, sd = ref_run.metrics.as_dict(), sd_run.metrics.as_dict()
        derived = {}
        for key in ("output_throughput", "median_tpot_ms", "median_ttft_ms", "median_e2el_ms"):
            higher = not key.endswith("_ms")
            num, den = (sd[key], ref[key]) if higher else (ref[key], sd[key])
            derived[f"speedup_{key}"] = num / den if den else math.nan
        counters = sd_run.counters
        derived["acceptance_rate"] = counters.acceptance_rate if counters else math.nan
        derived["acceptance_length"] = counters.acceptance_length if counters else math.nan
        derived["match_rate"] = result.match_rate
        entries.append({"reference": ref, "speculative": sd, "derived": derived})
    return entries


def repeat_seeds(result) -> list[int]:
    """The prompt/arrival seed of each SD repeat (see result.repeat_seed)."""
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
        # "passed", "failed", "missing", "unreadable" or "recorded" (update mode).
        self.outcome: str | None = None

    def _baseline_for(self, result, metrics, tolerances) -> Baseline:
        return Baseline(
            test_id=self.test_id,
            fingerprint=self.session.fingerprint,
            config={
                "spec": {
                    "model": result.spec.model,
                    "speculative_config": result.spec.speculative_config,
                    "server_args": list(result.spec.server_args),
                    "tensor_parallel_size": result.spec.tensor_parallel_size,
                },
                "workload": result.workload,
                "pattern": result.pattern,
                "seed": result.seed,
                "repeat_seeds": repeat_seeds(result),
            },
            repeats=repeats_of(result),
            tolerances=tolerances,
            recorded_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            plugin_version=str(self.session.fingerprint.get("plugin_version", "")),
        )

    def check(self, result, metrics=None, tolerance=None) -> None:
        metrics = list(metrics or DEFAULT_METRICS)
        tolerances = {
            m: resolve_tolerance(m, call=tolerance, marker=self.marker_tolerances, ini=self.session.ini_tolerances)
            for m in metrics
        }
        self.session.used.add(self.test_id)
        path_hint = self.session.base_dir
        try:
            baseline = load_baseline(self.session.base_dir, self.test_id)
        except BaselineMissing as exc:
            if self.session.update:
                self.session.pending[self.test_id] = self._baseline_for(result, metrics, tolerances)
                self.last_report = f"new baseline queued for {self.test_id} (written at session end to {path_hint})"
                self.outcome = "recorded"
                return
            self.outcome = "missing"
            raise AssertionError(str(exc)) from None
        except BaselineError as exc:
            if self.session.update:
                self.session.pending[self.test_id] = self._baseline_for(result, metrics, tolerances)
                self.last_report = f"unreadable baseline replaced: {exc}"
                self.outcome = "recorded"
                return
            self.outcome = "unreadable"
            raise AssertionError(f"{exc}\nre-record it with --specdec-update-baselines") from None

        same_env = same_environment(baseline.fingerprint, self.session.fingerprint)
        current = repeats_of(result)
        # Same seeds per repeat on both sides: repeat i ran the same prompts, so compare in pairs.
        paired = baseline.config.get("repeat_seeds") == repeat_seeds(result)
        rows, verdicts, skipped = [], [], []
        for metric in metrics:
            if not is_ratio(metric) and not same_env:
                skipped.append(metric)
                continue
            side = _side(metric)
            before = baseline.per_repeat(side, metric) if paired else baseline.samples(side, metric)
            now = [entry[side].get(metric, math.nan) for entry in current]
            verdict = compare_samples(metric, before, now, tolerance=tolerances[metric], paired=paired)
            verdicts.append(verdict)
            ci = None
            if verdict.ci_low is not None:
                # The CI is of the signed change; show it as values of the metric.
                as_value = (lambda c: verdict.baseline * (1 + c)) if verdict.higher_is_better else (
                    lambda c: verdict.baseline / (1 + c))
                ci = tuple(sorted((as_value(verdict.ci_low), as_value(verdict.ci_high))))
            rows.append(Row(metric, verdict.baseline, verdict.current, tolerances[metric], ci, not verdict.regression,
                            note=f"{verdict.change:+.1%} in the better direction" if not math.isnan(verdict.change) else ""))
        comparison = (
            "same environment: ratios and absolute numbers compared"
            if same_env
            else f"different environment from the baseline: ratios only, not compared: {', '.join(skipped) or '-'}"
        )
        regressions = [v for v in verdicts if v.regression]
        self.last_report = comparison + "\n" + "\n".join(v.describe() for v in verdicts)
        if self.session.update:
            moved = any(abs(v.change) > v.tolerance for v in verdicts if not math.isnan(v.change))
            if moved or not same_env:
                self.session.pending[self.test_id] = self._baseline_for(result, metrics, tolerances)
            self.outcome = "recorded" if moved or not same_env else "passed"
            return
        self.outcome = "failed" if regressions else "passed"
        if regressions:
            raise AssertionError(
                failure_message(
                    f"performance regressed against the baseline of {self.test_id}",
                    rows,
                    result,
                    required_label="baseline",
                    extra=comparison + "\n" + "\n".join(v.describe() for v in verdicts),
                )
            )
