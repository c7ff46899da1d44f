"""A result's checks: each an ordinary AssertionError with a table (verdict.assertions), or the gate's.

A mixin of `result.SpecDecResult`, kept apart so that the result's figures
and the checks on them each stay one readable module.
"""

from __future__ import annotations

from typing import Sequence, TypeVar

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


Checked = TypeVar("Checked", bound="ResultChecks")


class ResultChecks:
    """`assert_*` of a result; each returns the result, so checks chain."""

    def assert_speedup(
        self: Checked, min: float | None = None, metric: str = "output_throughput", *, max: float | None = None
    ) -> Checked:
        """SD must be at least `min` times better on `metric` (latencies inverted), or at most `max` (a check that
        SD does not pay).  Decided by the sequential rule (verdict.sequential): under --specdec-repeats auto an
        undecided check sends the draws again on SD's server, up to --specdec-max-repeats; undecided at the cap
        is its own outcome, which --specdec-strict fails."""
        check_speedup(self, min, metric, maximum=max)
        return self

    def assert_acceptance(
        self: Checked,
        min_rate: float | None = None,
        min_length: float | None = None,
        min_per_position: list[float] | None = None,
        *,
        min_request_p10_length: float | None = None,
        min_request_p50_length: float | None = None,
    ) -> Checked:
        """Acceptance rate and length (fractions, not percent), per-position rates, and the
        per-request acceptance length's 10th percentile and median (tokens per drafted step)."""
        per_request = min_request_p10_length is not None or min_request_p50_length is not None
        if not per_request or min_rate is not None or min_length is not None or min_per_position is not None:
            check_acceptance(self, min_rate, min_length, min_per_position)
        if per_request:
            check_request_lengths(self, min_request_p10_length, min_request_p50_length)
        return self

    def assert_best_k(self: Checked, expected: int | Sequence[int]) -> Checked:
        """The draft length predicted best from this run (see `predictions.predict_speedups`) is
        `expected`, or one of them."""
        check_best_k(self, expected)
        return self

    def assert_outputs_equivalent(
        self: Checked, min_match: float = 1.0, ignore_numerical_ties: bool = True, tie_threshold: float | None = None
    ) -> Checked:
        """At least `min_match` of requests produce the reference's token ids.

        With reference logprobs (``specdec.run(logprobs=2)``), a divergence
        where the reference's top two candidates were within `tie_threshold`
        nats is a numerical near-tie, counted as a match unless
        ``ignore_numerical_ties=False``.
        """
        check_outputs_equivalent(
            self, min_match, ignore_numerical_ties, TIE_THRESHOLD if tie_threshold is None else tie_threshold
        )
        return self

    def assert_same_distribution(
        self: Checked,
        *,
        alpha: float = 0.01,
        effect: float = 0.3,
        power: float = 0.9,
        prompts: int = 4,
        tokens: int = 4,
        samples: int | None = None,
        max_categories: int = 8,
        min_match: float = 1.0,
    ) -> Checked:
        """SD's sampled tokens come from the reference's distribution (verdict.distribution).

        Draws `samples` continuations of `tokens` tokens for each of the test's first `prompts` prompts on
        each side (None: as many as detecting an effect size `effect`, Cohen's w, with `power` needs at
        family-wise level `alpha`), and tests every prompt and position by chi-square, Bonferroni-combined.
        Greedy workloads (temperature 0) defer to `assert_outputs_equivalent(min_match)`.
        """
        workload = self.workload if isinstance(self.workload, dict) else {}
        temperature = (workload.get("sampling") or {}).get("temperature", 0.0)
        if not temperature:
            return self.assert_outputs_equivalent(min_match)
        if self.sampler is None:
            raise RuntimeError(
                "assert_same_distribution draws its samples from the test's servers: use the specdec fixture's "
                "result, or set result.sampler (measure.distribution_samples.drawer_for)"
            )
        plan = DrawPlan.planned(prompts, tokens, samples, alpha, effect, power, max_categories)
        self.distribution = self.sampler(plan)
        check_same_distribution(self.distribution)
        return self

    def assert_no_regression(
        self: Checked,
        metrics: list[str] | None = None,
        tolerance: float | dict[str, float] | None = None,
        allow_unavailable: Sequence[str] = (),
    ) -> Checked:
        """Compare with this test's stored baseline (recorded with --specdec-update-baselines).

        A gated figure this run could not measure fails the check ("unavailable:
        <why>") unless it is named in `allow_unavailable`.
        """
        if self.gate is None:
            raise RuntimeError(
                "assert_no_regression needs a baseline gate: use the specdec fixture, "
                "or set result.gate to a pytest_specdec.verdict.gate.RegressionGate"
            )
        self.gate.check(self, metrics=metrics, tolerance=tolerance, allow_unavailable=allow_unavailable)
        return self
