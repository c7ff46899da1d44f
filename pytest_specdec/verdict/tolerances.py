"""Regression tolerances: the defaults, and per call > per test > per project overrides.

A tolerance is the fraction by which a metric may get worse than its baseline
before the gate considers it a regression (see `stats` for the rest of the
rule).  Values are checked when given, so a typo fails at collection or
configuration, not after a long run.
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Real
from typing import Any

from .metric_names import canonical_metric

# Default tolerances, as fractions of the baseline.  10% for throughput and
# TPOT: well clear of their run-to-run noise (docs/benchmarks.md has it), and
# tight enough to catch a lost SD win.  TTFT and E2E include queueing and prefill
# scheduling, which wobble more: 15%.  Tail percentiles (p95/p99) come from the
# few slowest requests of a run and jump around: 25%.  Acceptance depends on
# the outputs, not the clock, and holds to 5%.  Speedups are not the low-noise
# ratio they seem: the reference and SD run on two server instances started
# at different times, and a baseline was recorded on two other instances, so
# each side carries its own instance's drift (verdict.detection.SESSION_DRIFT,
# measured by benchmarks/gate_calibration.py): a speedup moves between
# sessions with nothing changed, and the default sits well beyond that spread.
DEFAULT_TOLERANCES: dict[str, float] = {
    "output_throughput": 0.10,
    "total_token_throughput": 0.10,
    "request_throughput": 0.10,
    "mean_tpot_ms": 0.10,
    "median_tpot_ms": 0.10,
    "mean_itl_ms": 0.10,
    "median_itl_ms": 0.10,
    "mean_ttft_ms": 0.15,
    "median_ttft_ms": 0.15,
    "mean_e2el_ms": 0.15,
    "median_e2el_ms": 0.15,
    "acceptance_rate": 0.05,
    "acceptance_length": 0.05,
    # Per-request figures: the median holds like the aggregate length; the 10th
    # percentile rests on the few worst requests of a run.
    "request_acceptance_length_p50": 0.05,
    "request_acceptance_length_p10": 0.10,
    "oracle_speedup": 0.15,
    # SD against the reference under the test's SLO: ratios of two servers' figures, like speedups.
    "goodput_ratio": 0.15,
    "capacity_ratio": 0.15,
    # A sweep's SD per-GPU throughput over the reference's at a per-user speed (measure.frontier_figures).
    "frontier_ratio": 0.15,
}
# Families matched by prefix, checked in order (speedup first, so a speedup of
# a p99 latency is still held to the ratio tolerance).
# A sweep level's operating point: its output throughput and its median TPOT in other units, held alike.
_PREFIX_TOLERANCES = (("speedup_", 0.15), ("p95_", 0.25), ("p99_", 0.25), ("per_gpu_c", 0.10), ("per_user_c", 0.10))
FALLBACK_TOLERANCE = 0.10


def default_tolerance(metric: str) -> float:
    """The built-in tolerance for `metric` (exact name, then family prefix, then 10%)."""
    if metric in DEFAULT_TOLERANCES:
        return DEFAULT_TOLERANCES[metric]
    for prefix, tolerance in _PREFIX_TOLERANCES:
        if metric.startswith(prefix):
            return tolerance
    return FALLBACK_TOLERANCE


def _validate(value, metric: str, source: str) -> float:
    # bool is a Real; `tolerance=True` is a mistake, not 100%.
    number = isinstance(value, Real) and not isinstance(value, bool)
    if not number or not 0 <= float(value) < 1:
        hint = " (a fraction: 0.10 for 10%)" if number and value >= 1 else ""
        raise ValueError(f"tolerance for {metric!r} from {source} must be a number in [0, 1){hint}, got {value!r}")
    return float(value)


def resolve_tolerance(metric: str, *, call=None, marker=None, ini=None) -> float:
    """Tolerance for `metric`: per call > per test (marker) > per project (ini) > default.

    Each source may be a number (every metric) or a ``{metric: number}`` dict
    (only the metrics it names).  Every value of every given source is checked,
    so a typo such as ``{"p99_ttft_ms": 25}`` fails even while another source
    wins for the metric at hand.
    """
    sources = (
        ("the assert_no_regression(tolerance=...) call", call),
        ("the test's marker", marker),
        ("the project's ini setting", ini),
    )
    chosen = None
    for source, given in sources:
        if given is None:
            continue
        if isinstance(given, Mapping):
            for name, value in given.items():
                _validate(value, str(name), source)
            if chosen is None and metric in given:
                chosen = float(given[metric])
        else:
            value = _validate(given, metric, source)
            if chosen is None:
                chosen = value
    return default_tolerance(metric) if chosen is None else chosen


def parse_tolerance_lines(lines: list[str]):
    """The ``specdec_tolerances`` ini: one fraction for every metric, or ``metric = fraction`` lines."""
    if not lines:
        return {}
    if len(lines) == 1 and "=" not in lines[0]:
        try:
            values = float(lines[0])
        except ValueError:
            raise ValueError(f"expected a fraction or 'metric = fraction' lines, got {lines[0]!r}") from None
    else:
        values = {}
        for line in lines:
            metric, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f"expected 'metric = fraction', got {line!r}")
            try:
                values[canonical_metric(metric.strip())] = float(value)
            except ValueError:
                raise ValueError(f"{metric.strip()}: expected a fraction, got {value.strip()!r}") from None
    for metric in values if isinstance(values, dict) else ["output_throughput"]:
        resolve_tolerance(metric, ini=values)
    return values


def parse_tolerance_marker(args, kwargs) -> Any:
    """``specdec_tolerance(0.1)`` for every metric, or ``specdec_tolerance(median_tpot_ms=0.15, ...)``."""
    if len(args) > 1 or (args and kwargs):
        raise ValueError("takes one tolerance for all metrics, or metric=tolerance keywords, not both")
    value = args[0] if args else canonical_keys(kwargs)
    resolve_tolerance("output_throughput" if args else next(iter(value), "output_throughput"), marker=value)
    for metric in value if isinstance(value, dict) else {}:
        resolve_tolerance(metric, marker=value)
    return value


def canonical_keys(tolerance: Any) -> Any:
    """A tolerance with metric names spelled as this version spells them (old names warn)."""
    if isinstance(tolerance, Mapping):
        return {canonical_metric(str(metric)): value for metric, value in tolerance.items()}
    return tolerance
