"""What `specdec.run()` returns: both runs' metrics, SD counters, speedups, outputs.

Every repeat is kept; summary figures over repeats use the median, which a
single noisy repeat cannot drag far.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from .metrics import RunMetrics, SpecDecodeCounters, higher_is_better
from .spec import ServerSpec

CONTEXT_TOKENS = 5  # tokens of context shown on each side of a divergence
DERIVED_SPEEDUPS = ("output_throughput", "median_tpot_ms", "median_ttft_ms", "median_e2el_ms")


@dataclass
class Run:
    """One measured repeat of one configuration on one workload and pattern."""

    spec: ServerSpec
    repeat: int
    metrics: RunMetrics
    records: list  # client.RequestRecord, one per request, in request order
    counters: SpecDecodeCounters | None  # SD counter deltas for this run; None for the reference
    server_command: list[str]
    started_at: float  # wall clock


# Repeat r > 0 of a run sends prompts (and arrivals) seeded repeat_seed(seed, r):
# methods that remember earlier requests (suffix decoding's global tree,
# prefix caching) would otherwise see each repeat's exact prompts and outputs
# again and speed up run after run.  The reference's repeat r uses the same
# seed, and so does a baseline's, which lets the gate compare repeats in pairs.
REPEAT_SEED_STRIDE = 7919


def repeat_seed(seed: int, repeat: int) -> int:
    return seed + repeat * REPEAT_SEED_STRIDE


@dataclass(frozen=True)
class RequestComparison:
    index: int
    identical: bool
    first_divergence: int | None  # token position of the first difference, None if identical
    reference_tokens: int
    speculative_tokens: int
    reference_context: list[int] = field(default_factory=list)  # token ids around the divergence
    speculative_context: list[int] = field(default_factory=list)
    reference_text: str = ""  # decoded continuation from the divergence, when a tokenizer was given
    speculative_text: str = ""


@dataclass(frozen=True)
class OutputComparison:
    requests: list[RequestComparison]

    @property
    def match_rate(self) -> float:
        """Fraction of requests whose SD output token ids equal the reference's."""
        if not self.requests:
            return math.nan
        return sum(r.identical for r in self.requests) / len(self.requests)

    @property
    def diverged(self) -> list[RequestComparison]:
        return [r for r in self.requests if not r.identical]


def compare_outputs(reference_records, speculative_records, decode=None) -> OutputComparison:
    """Compare generated token ids request by request (the same prompts, in order)."""
    if len(reference_records) != len(speculative_records):
        raise ValueError(
            f"runs differ in request count: reference {len(reference_records)}, SD {len(speculative_records)}"
        )
    compared = []
    for ref, sd in zip(reference_records, speculative_records):
        a, b = list(ref.token_ids), list(sd.token_ids)
        if a == b:
            compared.append(RequestComparison(ref.index, True, None, len(a), len(b)))
            continue
        position = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        lo = max(0, position - CONTEXT_TOKENS)
        hi = position + CONTEXT_TOKENS
        compared.append(
            RequestComparison(
                ref.index,
                False,
                position,
                len(a),
                len(b),
                a[lo:hi],
                b[lo:hi],
                decode(a[lo:hi]) if decode else "",
                decode(b[lo:hi]) if decode else "",
            )
        )
    return OutputComparison(compared)


def _median_metric(runs: list[Run], metric: str) -> float:
    values = [run.metrics.as_dict()[metric] for run in runs]
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan


@dataclass
class SpecDecResult:
    """The reference and SD runs of one test, with the figures derived from them."""

    spec: ServerSpec
    workload: dict[str, Any]
    pattern: dict[str, Any]
    reference_runs: list[Run]
    speculative_runs: list[Run]
    outputs: OutputComparison
    reproduce: dict[str, str]  # "reference_server", "speculative_server", "bench" -> shell commands
    seed: int = 0
    server_log: str = ""
    # Set by the plugin (or a script) to compare with stored baselines.
    gate: Any = field(default=None, repr=False, compare=False)

    @property
    def counters(self) -> SpecDecodeCounters:
        """SD counter deltas summed over every SD repeat."""
        total = SpecDecodeCounters(present=False)
        for run in self.speculative_runs:
            if run.counters is not None:
                total = total + run.counters
        return total

    @property
    def acceptance_rate(self) -> float:
        return self.counters.acceptance_rate

    @property
    def acceptance_length(self) -> float:
        return self.counters.acceptance_length

    @property
    def per_position_acceptance(self) -> list[float]:
        return self.counters.per_position_rate

    def reference_metric(self, metric: str) -> float:
        return _median_metric(self.reference_runs, metric)

    def speculative_metric(self, metric: str) -> float:
        return _median_metric(self.speculative_runs, metric)

    def speedup(self, metric: str = "output_throughput") -> float:
        """How many times better SD is on `metric` (> 1 is a win), medians over repeats.

        Higher-is-better metrics divide SD by reference; latencies (``*_ms``)
        divide reference by SD, so a speedup always reads the same way.
        """
        ref, sd = self.reference_metric(metric), self.speculative_metric(metric)
        if higher_is_better(metric):
            return sd / ref if ref else math.nan
        return ref / sd if sd else math.nan

    @property
    def match_rate(self) -> float:
        return self.outputs.match_rate

    # --- checks: ordinary AssertionErrors with a table, see assertions.py ---

    def assert_speedup(self, min: float, metric: str = "output_throughput") -> "SpecDecResult":
        """SD must be at least `min` times better on `metric` (latencies inverted)."""
        from .assertions import check_speedup

        check_speedup(self, min, metric)
        return self

    def assert_acceptance(self, min_rate: float | None = None, min_length: float | None = None,
                          min_per_position: list[float] | None = None) -> "SpecDecResult":
        """Acceptance rate and length (fractions, not percent), and per-position rates."""
        from .assertions import check_acceptance

        check_acceptance(self, min_rate, min_length, min_per_position)
        return self

    def assert_outputs_equivalent(self, min_match: float = 1.0, ignore_numerical_ties: bool = True,
                                  tie_threshold: float | None = None) -> "SpecDecResult":
        """At least `min_match` of requests produce the reference's token ids.

        With reference logprobs (``specdec.run(logprobs=2)``), a divergence
        where the reference's top two candidates were within `tie_threshold`
        nats is a numerical near-tie, counted as a match unless
        ``ignore_numerical_ties=False``.
        """
        from .assertions import TIE_THRESHOLD, check_outputs_equivalent

        check_outputs_equivalent(self, min_match, ignore_numerical_ties,
                                 TIE_THRESHOLD if tie_threshold is None else tie_threshold)
        return self

    def assert_no_regression(self, metrics: list[str] | None = None,
                             tolerance: float | dict[str, float] | None = None) -> "SpecDecResult":
        """Compare with this test's stored baseline (recorded with --specdec-update-baselines)."""
        if self.gate is None:
            raise RuntimeError("assert_no_regression needs a baseline gate: use the specdec fixture, "
                               "or set result.gate to a pytest_specdec.gate.RegressionGate")
        self.gate.check(self, metrics=metrics, tolerance=tolerance)
        return self

    def derived(self) -> dict[str, float]:
        """The ratios that compare across environments: speedups and acceptance."""
        values = {f"speedup_{metric}": self.speedup(metric) for metric in DERIVED_SPEEDUPS}
        values["acceptance_rate"] = self.acceptance_rate
        values["acceptance_length"] = self.acceptance_length
        values["match_rate"] = self.match_rate
        return values

    def summary(self) -> dict[str, Any]:
        """Key figures, JSON-able (used for reports and JUnit properties)."""
        return {
            "spec": self.spec.label(),
            "workload": self.workload,
            "pattern": self.pattern,
            "repeats": len(self.speculative_runs),
            "speedup_output_throughput": self.speedup("output_throughput"),
            "speedup_median_tpot": self.speedup("median_tpot_ms"),
            "speedup_median_ttft": self.speedup("median_ttft_ms"),
            "acceptance_rate": self.acceptance_rate,
            "acceptance_length": self.acceptance_length,
            "per_position_acceptance": self.per_position_acceptance,
            "match_rate": self.match_rate,
            "reference": {k: self.reference_metric(k) for k in self.reference_runs[0].metrics.as_dict()},
            "speculative": {k: self.speculative_metric(k) for k in self.speculative_runs[0].metrics.as_dict()},
            "reproduce": self.reproduce,
        }

    def __repr__(self) -> str:
        return (
            f"<SpecDecResult {self.spec.label()} speedup={self.speedup():.3f} "
            f"acceptance_rate={self.acceptance_rate:.3f} match_rate={self.match_rate:.2f}>"
        )
