"""Metric names, their direction, and the figures derived from a reference and an SD run.

One vocabulary from the result to the report files:

- a run's metrics use `vllm bench serve`'s keys (``output_throughput``,
  ``median_tpot_ms``, ``p99_ttft_ms``, ...);
- a **speedup** compares the SD side with the reference on one metric and is
  named ``speedup_<metric>`` without the unit (``speedup_output_throughput``,
  ``speedup_median_tpot``); it reads the same way for every metric: > 1 means
  SD is better (throughputs SD / reference, latencies reference / SD);
- a **change** compares a value with an earlier or required one and is
  signed so that **positive is better**, whatever the metric's direction:
  ``current / previous - 1`` for higher-is-better metrics and
  ``previous / current - 1`` for latencies.  A change of -0.10 is a 10% loss.

The two sides of a comparison are ``reference`` (no SD) and ``speculative``.
"""

from __future__ import annotations

import math
import warnings

# The metrics whose speedups every result, baseline and report carries.
SPEEDUP_METRICS = ("output_throughput", "median_tpot_ms", "median_ttft_ms", "median_e2el_ms")
SPEEDUP_PREFIX = "speedup_"
# Figures of the SD side that are ratios already (they travel across machines): acceptance,
# output match, the per-request acceptance lengths and what they predict (analysis.inside_acceptance),
# and SD against the reference under an SLO (goodput, capacity).
SD_RATIO_METRICS = (
    "acceptance_rate",
    "acceptance_length",
    "match_rate",
    "request_acceptance_length_p10",
    "request_acceptance_length_p50",
    "best_k",
    "oracle_speedup",
    "goodput_ratio",
    "capacity_ratio",
    "frontier_ratio",
)
# The ratios above that are the machine's as much as SD's: they rest on step times or on loads a
# machine holds, so a baseline gates them only on a machine of its speed (verdict.fingerprint.MachineSpeed).
MACHINE_BOUND_RATIOS = ("best_k", "oracle_speedup", "goodput_ratio", "capacity_ratio", "frontier_ratio")
# Figures a baseline holds exactly: any change is flagged, whatever its direction
# (a different recommended draft length means the configuration should change).
EXACT_METRICS = ("best_k",)
SIDES = ("reference", "speculative")
_LOWER_IS_BETTER = ("duration_s", "failed")


def is_machine_bound(metric: str) -> bool:
    """Speedups and the figures built on step times or held loads: comparable only at one machine speed."""
    return metric.startswith(SPEEDUP_PREFIX) or metric in MACHINE_BOUND_RATIOS


def higher_is_better(metric: str) -> bool:
    """Whether a larger value of `metric` is an improvement.

    Speedups and acceptance are ratios where more is better, whatever the
    metric a speedup was taken of; latencies (``*_ms``) and durations are
    better smaller; throughputs and counts better larger.
    """
    if metric.startswith(SPEEDUP_PREFIX) or metric in SD_RATIO_METRICS:
        return True
    return not (metric.endswith("_ms") or metric in _LOWER_IS_BETTER)


def speedup_name(metric: str) -> str:
    """``median_tpot_ms`` -> ``speedup_median_tpot``: a speedup has no unit."""
    return SPEEDUP_PREFIX + (metric[:-3] if metric.endswith("_ms") else metric)


def speedup_metric(name: str) -> str:
    """The run metric a speedup is of: ``speedup_median_tpot`` -> ``median_tpot_ms``."""
    if not name.startswith(SPEEDUP_PREFIX):
        raise ValueError(f"{name!r} is not a speedup name (speedup_<metric>)")
    metric = name[len(SPEEDUP_PREFIX) :]
    if metric.endswith("_ms"):  # the old spelling, see canonical_metric
        return metric
    return metric if "throughput" in metric or metric in ("completed", "failed") else metric + "_ms"


def canonical_metric(name: str, *, warn: bool = True) -> str:
    """A metric name as this version spells it; ``speedup_median_tpot_ms`` (before 0.2) -> ``speedup_median_tpot``."""
    if name.startswith(SPEEDUP_PREFIX) and name.endswith("_ms"):
        new = name[:-3]
        if warn:
            from ..deprecation import SpecdecDeprecationWarning

            warnings.warn(
                f"metric name {name!r} is deprecated: use {new!r} (a speedup has no unit)",
                SpecdecDeprecationWarning,
                stacklevel=3,
            )
        return new
    return name


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def speedup(metric: str, reference: float, speculative: float) -> float:
    """How many times better SD is on `metric` (> 1 is a win); NaN when either side is missing or zero."""
    if not (_finite(reference) and _finite(speculative)):
        return math.nan
    num, den = (speculative, reference) if higher_is_better(metric) else (reference, speculative)
    return num / den if den and num else math.nan


def relative_change(metric: str, current: float, previous: float) -> float:
    """Change from `previous` to `current`, signed so that positive is better (see the module docstring)."""
    if not (_finite(current) and _finite(previous)):
        return math.nan
    if current == previous:
        return 0.0
    num, den = (current, previous) if higher_is_better(metric) else (previous, current)
    if den == 0:
        return math.copysign(math.inf, num)
    return num / den - 1.0


def derived_metrics(reference: dict[str, float], speculative: dict[str, float]) -> dict[str, float]:
    """``speedup_<metric>`` for every headline metric, from one reference and one SD run's metrics."""
    return {
        speedup_name(metric): speedup(metric, reference.get(metric, math.nan), speculative.get(metric, math.nan))
        for metric in SPEEDUP_METRICS
    }


def geometric_mean(values) -> float:
    """Geometric mean of the finite positive numbers in `values` (a sweep's one-number summary); NaN if none."""
    logs = [math.log(v) for v in values if _finite(v) and v > 0]
    return math.exp(math.fsum(logs) / len(logs)) if logs else math.nan
