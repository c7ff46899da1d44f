"""A result's timing checks decided by the sequential rule (verdict.sequential), on its live servers.

A part of `result.SpecDecResult` (`result.decided`).  Under ``--specdec-repeats auto`` a check that is
undecided on the draws `run()` measured asks for one more send of every draw on SD's server (`more_runs`, set
by the specdec fixture while the servers are up) and looks again, up to the cap.  Sends of a draw after its
first are timing only: they live in `timing_runs`, apart from the runs acceptance and outputs are counted on,
so a figure that does not depend on timing is never measured twice on the same draw.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from ..verdict.metric_names import higher_is_better
from ..verdict.sequential.evidence import UNMEASURED_MOVE, Evidence, sends_timing
from ..verdict.sequential.rule import UNDECIDED, Decision, Rule, decide_until

if TYPE_CHECKING:  # the result holds this part; the part reads the result's fields
    from .result import SpecDecResult

# Draws whose speedups differ by more than this (and by more than twice one run's timing spread) are said not
# to stand for the workload: a few prompts of a varied workload can draft very differently from the next few
# (docs/benchmarks.md, "Figures the code once quoted", has the spread seen on the CPU build).
REPRESENTS = 0.10


def _signed_log(metric: str, value: float) -> float:
    """log of a figure, negated where lower is better, so that a difference of two is a log speedup."""
    if value is None or not math.isfinite(value) or value <= 0:
        return math.nan
    return math.log(value) if higher_is_better(metric) else -math.log(value)


class DecidedFigures:
    """Evidence per draw, the decision loop, and what the row says about runs and spread."""

    def __init__(self, result: SpecDecResult):
        self.result = result

    def runs_per_side(self) -> int:
        """SD runs this result took: each draw's first send, every send again and every new draw."""
        return len(self.result.speculative_runs) + len(self.result.timing_runs) + len(self.result.new_draw_runs)

    def speedup_evidence(
        self, metric: str = "output_throughput", baseline=None, known_var: float = 0.0, sign=1, baseline_reference=None
    ):
        """Evidence of SD's log speedup on `metric`, per draw: SD's sends, the reference's value; `baseline`:
        a baseline's speedup per draw on the same seeds (None where it has none); `baseline_reference`: a
        baseline build's reference `metric` per draw, measured in this session (read apart from SD's pairs);
        `sign` -1 for a check that the speedup is at most a bound."""

        def sends_of(draw: int, first) -> tuple[float, ...]:
            runs = [first] + [run for run in self.result.timing_runs if run.repeat == draw]
            return tuple(sign * _signed_log(metric, run.metrics.as_dict().get(metric, math.nan)) for run in runs)

        def usable(values, i) -> bool:  # a per-draw figure given: a positive value on draw i
            return values is None or (values[i] is not None and math.isfinite(values[i]) and values[i] > 0)

        pairs = self.result.repeat_pairs()
        if baseline is None and baseline_reference is None:  # against the reference: new draws count too
            pairs = [*pairs, *self.result.new_draw_runs]
        keep = [
            i
            for i, (ref, _) in enumerate(pairs)
            if math.isfinite(_signed_log(metric, ref.metrics.as_dict().get(metric, math.nan)))
            and usable(baseline, i)
            and usable(baseline_reference, i)
        ]
        sends = tuple(tuple(v for v in sends_of(pairs[i][1].repeat, pairs[i][1]) if math.isfinite(v)) for i in keep)
        reference = tuple(sign * _signed_log(metric, pairs[i][0].metrics.as_dict().get(metric, math.nan)) for i in keep)
        based = tuple(sign * math.log(baseline[i]) for i in keep) if baseline is not None else None
        base_ref = (
            tuple(sign * _signed_log(metric, baseline_reference[i]) for i in keep)
            if baseline_reference is not None
            else None
        )
        again = None
        if baseline is None and self.result.reference_again_runs:  # the reference's draws sent again after SD's
            by_repeat = {run.repeat: run for run in self.result.reference_again_runs}
            values = [
                sign * _signed_log(metric, by_repeat[pairs[i][0].repeat].metrics.as_dict().get(metric, math.nan))
                if pairs[i][0].repeat in by_repeat
                else math.nan
                for i in keep
            ]
            again = tuple(values) if all(math.isfinite(v) for v in values) else None
        return Evidence(
            sends=sends,
            reference=reference,
            baseline=based,
            known_var=known_var,
            baseline_reference=base_ref,
            reference_again=again,
            unmeasured_move=UNMEASURED_MOVE if baseline is None else 0.0,
            remembers=bool(getattr(self.result.spec, "remembers_requests", False)),
        )

    def sequential_rule(self) -> Rule:
        return (
            self.result.rule
            if self.result.rule is not None
            else Rule(min_runs=len(self.result.speculative_runs), max_runs=len(self.result.speculative_runs))
        )

    def decide(self, name: str, evidence: Callable[[], Evidence], bad: float, good: float, sign: int = 1) -> Decision:
        """Decide check `name` with the result's rule, sending the draws again while it is undecided and the
        servers can (`more_runs`); the decision is kept for the row and the reports (`sign` -1: the evidence
        was negated, for a check that a figure is at most a bound)."""
        rule = self.sequential_rule()
        if self.result.rates is not None:  # the session's false-alarm budget: this check's share
            rule = replace(rule, **self.result.rates(name))
        decision = replace(
            decide_until(
                evidence, self.result.more_runs, bad, good, rule, self.result.again_reference, self.result.new_draws
            ),
            sign=sign,
        )
        self.result.decisions[name] = decision
        return decision

    def undecided(self) -> dict[str, Decision]:
        """The checks this result left undecided: not a pass; --specdec-strict fails them."""
        return {name: d for name, d in self.result.decisions.items() if d.outcome == UNDECIDED}

    def runs_note(self) -> str:
        """The row's runs cell: runs a side, and why measuring stopped."""
        runs = self.runs_per_side()
        if not self.result.decisions:
            return f"{runs} (no timing check)"
        if self.undecided():
            return f"{runs} (undecided)"
        # Each decision says where it stopped; a builds A/B's extra draws grow speculative_runs itself, so the
        # count of draws cannot tell the minimum from more.
        if all(d.stopped == "decided at the minimum" for d in self.result.decisions.values()):
            return f"{runs} (decided at the minimum)"
        return f"{runs} (decided)"

    def spread_note(self, metric: str = "output_throughput") -> str:
        """Content spread (between draws) and timing spread (the same draw sent again) of SD's speedup, how far
        first sends lie from their sends again, and whether the draws can stand for the workload."""
        evidence = self.speedup_evidence(metric)
        firsts = [s[0] - r for s, r in zip(evidence.sends, evidence.reference) if s]
        parts, content, timing = [], None, None
        if len(firsts) >= 2:
            mean = sum(firsts) / len(firsts)
            content = math.sqrt(sum((v - mean) ** 2 for v in firsts) / (len(firsts) - 1))
            parts.append(f"between draws {math.expm1(content):.1%}")
        squares, df, offset = sends_timing([s for s in evidence.sends if s], firsts=not evidence.remembers)
        if df:  # one run's timing spread of SD's figure, as the rule reads it from the sends again
            timing = math.sqrt(squares / df)
            parts.append(f"same draw sent again {math.expm1(timing):.1%}")
        if offset is not None:  # a server that remembers (prefix cache, suffix decoding) serves it faster again
            parts.append(f"first sends {math.expm1(offset):+.1%} against their sends again (the figure is the first's)")
        if content is not None and content > max(2 * (timing or 0.0), REPRESENTS):
            prompts = (getattr(self.result, "pattern", None) or {}).get("num_prompts")
            per_draw = f" of {prompts} prompts" if prompts else ""
            parts.append(
                f"the draws differ by more than timing explains: the checks judge these {len(firsts)} draws"
                f"{per_draw}, and more prompts per draw, not more repeats, would stand for the whole workload"
            )
        return ", ".join(parts) or "unavailable: one run a side"
