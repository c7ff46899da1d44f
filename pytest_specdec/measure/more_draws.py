"""Sending a result's draws again while its checks are undecided (--specdec-repeats auto).

The run side of the sequential checks (measure.timing_decisions holds the deciding): `arm` gives a result its rule and
a `more_runs` that sends every draw once more on SD's server, the one `run()` left up, so a check that needs
more runs gets them without a server start.  The reference is not sent again: its speed does not depend on
the prompts, so its spread across the draws is its timing spread (verdict.sequential).  Sends again are kept
apart from the draws' first sends (`result.timing_runs`): acceptance and outputs are never counted twice on
the same draw.  Under --specdec-baseline-from build:PATH more runs are new draws on both builds instead
(measure.build_runs): the baseline build's runs are as noisy as this build's, and only new pairs narrow both.

A check against the reference that only the machine's possible move since the reference's runs leaves
undecided sends the reference's draws again after SD's (`again_reference`, once a result: one start of the
reference's server where one server runs at a time), in either repeats mode: the two sends of each draw
bracket SD's in time and measure the move (verdict.sequential.evidence).
"""

from __future__ import annotations

from ..verdict.sequential.rule import Rule


def arm(measurements, result, workload, pattern, prompts, *, seed: int = 0, logprobs=None):
    """Set `result`'s rule, strictness and (under auto repeats) its way to more runs; returns the result."""
    draws = len(result.speculative_runs)

    def send_again(spec, run, what: str):
        """Draw `run.repeat` sent once more on `spec`'s server, the draw's own prompts."""
        (again,) = measurements.measure(
            spec, workload, pattern, prompts, seed=seed, logprobs=logprobs, what=what, only_repeat=run.repeat
        )
        return again

    def again_reference() -> bool:
        """The reference's draws sent again, after SD's; False once they were (one bracket a result)."""
        if result.reference_again_runs:
            return False
        measurements.on_event(
            f"{result.spec.label()}: sending the reference's draws again after SD's: has the machine moved since "
            "the reference's runs?"
        )
        for run in list(result.reference_runs):
            what = "reference sent again after SD (the machine's move)"
            result.reference_again_runs.append(send_again(result.spec.reference(), run, what))
        measurements.references_again[result.spec.key] += 1
        return True

    result.again_reference = again_reference
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
            result.timing_runs.append(send_again(spec, run, "SD sent again (timing)"))
            measurements.sends_again[spec.key] += 1
        return True

    def more_build_draws() -> bool:
        """Builds A/B: one more batch of draws on both builds (the rule looks after each batch)."""
        if result.runs_per_side() + draws > result.rule.max_runs:
            return False
        measurements.builds.more_build_draws(result, workload, pattern, prompts, draws, seed=seed, logprobs=logprobs)
        return True

    result.more_runs = more_runs if getattr(result, "builds", None) is None else more_build_draws
    return result
