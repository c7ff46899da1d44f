"""Sending a result's draws again while its checks are undecided (--specdec-repeats auto).

The run side of the sequential checks (measure.decided holds the deciding): `arm` gives a result its rule and
a `more_runs` that sends every draw once more on SD's server, the one `run()` left up, so a check that needs
more runs gets them without a server start.  The reference is not sent again: its speed does not depend on
the prompts, so its spread across the draws is its timing spread (verdict.sequential).  Sends again are kept
apart from the draws' first sends (`result.timing_runs`): acceptance and outputs are never counted twice on
the same draw.  Under --specdec-baseline-from build:PATH more runs are new draws on both builds instead
(measure.build_runs): the baseline build's runs are as noisy as this build's, and only new pairs narrow both.
"""

from __future__ import annotations

from ..verdict.sequential import Rule


def arm(measurements, result, workload, pattern, prompts, *, seed: int = 0, logprobs=None):
    """Set `result`'s rule, strictness and (under auto repeats) its way to more runs; returns the result."""
    draws = len(result.speculative_runs)
    if not measurements.sequential:  # --specdec-repeats N: exactly N runs, decided on them or undecided
        result.rule = Rule(min_runs=draws, max_runs=draws)
        result.strict = measurements.strict
        return result
    result.rule = Rule(min_runs=draws, max_runs=max(draws, measurements.max_repeats))
    result.strict = measurements.strict

    def more_runs() -> bool:
        """One more send of every draw on SD's server; False when that would pass the cap."""
        if result.runs_per_side() + draws > result.rule.max_runs:
            return False
        spec = result.spec
        for run in list(result.speculative_runs):
            (again,) = measurements.measure(
                spec,
                workload,
                pattern,
                prompts,
                seed=seed,
                logprobs=logprobs,
                what="SD sent again (timing)",
                only_repeat=run.repeat,
            )
            result.timing_runs.append(again)
            measurements.sends_again[spec.key] += 1
        return True

    def more_build_draws() -> bool:
        """Builds A/B: one more batch of draws on both builds (the rule looks after each batch)."""
        if result.runs_per_side() + draws > result.rule.max_runs:
            return False
        measurements.more_build_draws(result, workload, pattern, prompts, draws, seed=seed, logprobs=logprobs)
        return True

    result.more_runs = more_runs if getattr(result, "builds", None) is None else more_build_draws
    return result
