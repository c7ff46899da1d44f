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

A check against the reference that SD's first sends leave undecided however often they are sent again gets
new draws instead, under auto repeats, up to the cap (`new_draws`): new prompts on both sides, each one more
first send for the estimate to rest on.  Where the reference's draws were sent again after SD's, each new
draw's are too, so every draw stays bracketed.  Like sends again, new draws are timing evidence, kept apart
(`result.new_draw_runs`): the result's draws, which acceptance, outputs and a stored baseline's pairs are
counted on, stay the ones `run()` measured.
"""

from __future__ import annotations

from ..verdict.sequential.rule import Rule


def arm(measurements, result, workload, pattern, prompts, *, seed: int = 0, logprobs=None):
    """Set `result`'s rule, strictness and (under auto repeats) its way to more runs; returns the result."""
    draws = len(result.speculative_runs)

    def send(spec, repeat: int, what: str):
        """Draw `repeat` sent on `spec`'s server, the draw's own prompts (a draw measured before: sent again)."""
        (run,) = measurements.measure(
            spec, workload, pattern, prompts, seed=seed, logprobs=logprobs, what=what, only_repeat=repeat
        )
        return run

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
            result.reference_again_runs.append(send(result.spec.reference(), run.repeat, what))
        measurements.references_again[result.spec.key] += 1
        return True

    result.again_reference = again_reference
    if not measurements.sequential:  # --specdec-repeats N: exactly N runs, decided on them or undecided
        result.rule = Rule(min_runs=draws, max_runs=draws)
        result.strict = measurements.strict
        result.new_draws = None
        return result
    result.rule = Rule(min_runs=draws, max_runs=max(draws, measurements.max_repeats))
    result.strict = measurements.strict

    def more_runs() -> bool:
        """One more send of every draw on SD's server; False when that would pass the cap."""
        if result.runs_per_side() + draws > result.rule.max_runs:
            return False
        spec = result.spec
        for run in list(result.speculative_runs):
            result.timing_runs.append(send(spec, run.repeat, "SD sent again (timing)"))
            measurements.sends_again[spec.key] += 1
        return True

    def more_build_draws() -> bool:
        """Builds A/B: one more batch of draws on both builds (the rule looks after each batch)."""
        if result.runs_per_side() + draws > result.rule.max_runs:
            return False
        measurements.builds.more_build_draws(result, workload, pattern, prompts, draws, seed=seed, logprobs=logprobs)
        return True

    def new_draws() -> bool:
        """`draws` new draws of the workload on both sides; False when that would pass the cap."""
        if result.runs_per_side() + draws > result.rule.max_runs:
            return False
        spec, reference = result.spec, result.spec.reference()
        start = len(result.speculative_runs) + len(result.new_draw_runs)
        repeats = range(start, start + draws)
        bracket = bool(result.reference_again_runs)
        measurements.on_event(
            f"{spec.label()}: measuring {draws} new draws on both sides: SD's first sends leave the check "
            "undecided however often they are sent again"
        )
        if bracket:  # the reference before and after SD on every new draw, as on the first ones
            references = [send(reference, r, "reference, a new draw") for r in repeats]
            speculative = [send(spec, r, "SD, a new draw") for r in repeats]
            what = "reference sent again after SD (the machine's move)"
            result.reference_again_runs.extend(send(reference, r, what) for r in repeats)
        else:  # SD's server is the one up: its new draws first, one server switch fewer
            speculative = [send(spec, r, "SD, a new draw") for r in repeats]
            references = [send(reference, r, "reference, a new draw") for r in repeats]
        result.new_draw_runs.extend(zip(references, speculative))
        measurements.new_draws[spec.key] += 1
        return True

    builds = getattr(result, "builds", None) is not None
    result.more_runs = more_build_draws if builds else more_runs
    result.new_draws = None if builds else new_draws  # a builds A/B's more runs are new draws already
    return result
