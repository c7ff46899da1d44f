"""A result's checks: each an ordinary AssertionError with a table (verdict.assertions), or the gate's.

A part of `result.SpecDecResult` (`result.checks`): the result is the record of what was measured and
its figures, the checks on them are this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..verdict.distribution import check_same_distribution
from .distribution_samples import DrawPlan
from ..verdict.assertions import (
    TIE_THRESHOLD,
    check_acceptance,
    check_best_k,
    check_outputs_equivalent,
    check_request_lengths,
    check_speedup,
)

if TYPE_CHECKING:  # the result holds this part; the part reads the result's fields
    from .result import SpecDecResult


class ResultChecks:
    """`assert_*` of a result; each returns the result, so checks chain."""

    def __init__(self, result: SpecDecResult):
        self.result = result

    def assert_speedup(
        self, min: float | None = None, metric: str = "output_throughput", *, max: float | None = None
    ) -> SpecDecResult:
        """SD must be at least `min` times better on `metric` (latencies inverted), or at most `max` (a check that
        SD does not pay).  Decided by the sequential rule (verdict.sequential): under --specdec-repeats auto an
        undecided check sends the draws again on SD's server, up to --specdec-max-repeats; undecided at the cap
        is its own outcome, which --specdec-strict fails."""
        check_speedup(self.result, min, metric, maximum=max)
        return self.result

    def assert_acceptance(
        self,
        min_rate: float | None = None,
        min_length: float | None = None,
        min_per_position: list[float] | None = None,
        *,
        min_request_p10_length: float | None = None,
        min_request_p50_length: float | None = None,
    ) -> SpecDecResult:
        """Acceptance rate and length (fractions, not percent), per-position rates, and the
        per-request acceptance length's 10th percentile and median (tokens per drafted step)."""
        per_request = min_request_p10_length is not None or min_request_p50_length is not None
        if not per_request or min_rate is not None or min_length is not None or min_per_position is not None:
            check_acceptance(self.result, min_rate, min_length, min_per_position)
        if per_request:
            check_request_lengths(self.result, min_request_p10_length, min_request_p50_length)
        return self.result

    def assert_best_k(self, expected: int | Sequence[int]) -> SpecDecResult:
        """The draft length predicted best from this run (see `predictions.predict_speedups`) is
        `expected`, or one of them."""
        check_best_k(self.result, expected)
        return self.result

    def assert_outputs_equivalent(
        self, min_match: float = 1.0, ignore_numerical_ties: bool = True, tie_threshold: float | None = None
    ) -> SpecDecResult:
        """At least `min_match` of requests produce the reference's token ids.

        With reference logprobs (``specdec.run(logprobs=2)``), a divergence
        where the reference's top two candidates were within `tie_threshold`
        nats is a numerical near-tie, counted as a match unless
        ``ignore_numerical_ties=False``.
        """
        check_outputs_equivalent(
            self.result, min_match, ignore_numerical_ties, TIE_THRESHOLD if tie_threshold is None else tie_threshold
        )
        return self.result

    def assert_same_distribution(
        self,
        *,
        alpha: float = 0.01,
        effect: float = 0.3,
        power: float = 0.9,
        prompts: int = 4,
        tokens: int = 4,
        samples: int | None = None,
        max_categories: int = 8,
        min_match: float = 1.0,
    ) -> SpecDecResult:
        """SD's sampled tokens come from the reference's distribution (verdict.distribution).

        Draws `samples` continuations of `tokens` tokens for each of the test's first `prompts` prompts on
        each side (None: as many as detecting an effect size `effect`, Cohen's w, with `power` needs at
        family-wise level `alpha`), and tests every prompt and position by chi-square, Bonferroni-combined.
        Greedy workloads (temperature 0) defer to `assert_outputs_equivalent(min_match)`.
        """
        workload = self.result.workload if isinstance(self.result.workload, dict) else {}
        temperature = (workload.get("sampling") or {}).get("temperature", 0.0)
        if not temperature:
            return self.result.assert_outputs_equivalent(min_match)
        if self.result.sampler is None:
            raise RuntimeError(
                "assert_same_distribution draws its samples from the test's servers: use the specdec fixture's "
                "result, or set result.sampler (measure.distribution_samples.drawer_for)"
            )
        plan = DrawPlan.planned(prompts, tokens, samples, alpha, effect, power, max_categories)
        self.result.distribution = self.result.sampler(plan)
        check_same_distribution(self.result.distribution)
        return self.result

    def assert_no_regression(
        self,
        metrics: list[str] | None = None,
        tolerance: float | dict[str, float] | None = None,
        allow_unavailable: Sequence[str] = (),
    ) -> SpecDecResult:
        """Compare with this test's stored baseline (recorded with --specdec-update-baselines).

        A gated figure this run could not measure fails the check ("unavailable:
        <why>") unless it is named in `allow_unavailable`.
        """
        if self.result.gate is None:
            raise RuntimeError(
                "assert_no_regression needs a baseline gate: use the specdec fixture, "
                "or set result.gate to a pytest_specdec.verdict.gate.RegressionGate"
            )
        self.result.gate.check(self.result, metrics=metrics, tolerance=tolerance, allow_unavailable=allow_unavailable)
        return self.result
