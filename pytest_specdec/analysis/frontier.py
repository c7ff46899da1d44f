"""The operator's view of SD: the throughput-interactivity frontier of each side, and SD's worth at a per-user speed.

Operators decide SD on one picture: output tokens per second per user (interactivity) against output tokens per
second per GPU (cost), one curve per configuration, across concurrency.  At low concurrency SD raises each user's
speed; at high concurrency it costs throughput.  A regression in either shows as SD's frontier moving towards, or
under, the reference's, which neither one speedup nor the crossover concurrency says where.

The two axes, and how they differ from the tools an operator may compare with:

- **tok/s per user** (`PER_USER`) is 1000 over the run's median TPOT in ms: the median request's decode speed, as
  AIPerf reports ``output_token_throughput_per_user`` per request (1 / its inter-token latency, TPOT as `vllm bench
  serve` defines it) at p50.  vLLM's ``vllm bench sweep plot_pareto`` divides the run's output throughput by its
  concurrency instead, which also charges each user the time to first token and any queueing.
- **tok/s per GPU** (`PER_GPU`) is the run's output throughput over the GPUs its server uses (tensor x pipeline x
  data parallel, as plot_pareto counts them); a CPU server counts as one.

The frontier is a side's Pareto-optimal operating points: no other point of that side is at least as fast per user
and at least as productive per GPU.  Between two frontier points the throughput at a per-user speed is read off the
straight line joining them (what the plot draws); outside the measured range nothing is read: a target faster than
the fastest point is "not reached", one slower than the slowest is outside the sweep.  Never extrapolated.

SD's worth at a target is the ratio of the two sides' per-GPU throughput there.  Each draw of the sweep (the same
prompts on both sides at every level) gives its own frontiers and its own ratio; the check that SD pays at least a
bound there is decided on those per-draw ratios by the sequential rule, as a speedup is (undecided where the
interval straddles the zone).  The cost per 1M output tokens at the target follows from the per-GPU throughput and
the GPU's hourly price.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..verdict.sequential.evidence import Evidence
from ..verdict.sequential.rule import FAILED, PASSED, UNDECIDED, Decision, Rule, bound_zone, decide
from .theory import cost_per_million_tokens

PER_USER = (
    "tok/s per user: 1000 / the run's median TPOT (ms), the median request's decode speed (AIPerf's "
    "output_token_throughput_per_user at p50); vllm bench sweep plot_pareto divides output throughput by the "
    "concurrency instead, which also counts TTFT and queueing"
)
PER_GPU = "tok/s per GPU: the run's output throughput over the GPUs its server uses (a CPU server counts as one)"


@dataclass(frozen=True)
class OperatingPoint:
    """One run of one side at one concurrency, on the frontier's two axes."""

    concurrency: float
    per_user: float  # tok/s per user (PER_USER)
    per_gpu: float  # output tok/s per GPU (PER_GPU)

    def dominated_by(self, other: OperatingPoint) -> bool:
        return (
            other.per_user >= self.per_user
            and other.per_gpu >= self.per_gpu
            and (other.per_user > self.per_user or other.per_gpu > self.per_gpu)
        )


def operating_point(concurrency: float, output_throughput: float, median_tpot_ms: float, gpus: int = 1):
    """The run's point, or None where a figure is missing (no TPOT: one-token outputs, a failed run)."""
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise ValueError(f"gpus must be a whole number >= 1, got {gpus!r}")
    usable = all(
        isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (output_throughput, median_tpot_ms)
    )
    if not usable:
        return None
    return OperatingPoint(float(concurrency), 1000.0 / median_tpot_ms, output_throughput / gpus)


def pareto_frontier(points: Sequence[OperatingPoint | None]) -> tuple[OperatingPoint, ...]:
    """The points no other point dominates, slowest per user first (so most per GPU first)."""
    kept = [p for p in points if p is not None]
    frontier = [p for p in kept if not any(p.dominated_by(q) for q in kept)]
    unique = {(p.per_user, p.per_gpu): p for p in frontier}  # two runs at one point are one point
    return tuple(sorted(unique.values(), key=lambda p: (p.per_user, -p.per_gpu)))


@dataclass(frozen=True)
class AtTarget:
    """The per-GPU throughput a frontier reaches at a per-user speed, or why it has none there."""

    per_user: float
    per_gpu: float | None
    why: str = ""  # empty where reached
    between: tuple[float, ...] = ()  # the concurrencies of the frontier points it was read between
    beyond: bool = False  # not reached: faster per user than any operating point (not merely outside the sweep)

    @property
    def reached(self) -> bool:
        return self.per_gpu is not None


def throughput_at(frontier: Sequence[OperatingPoint], per_user: float) -> AtTarget:
    """The frontier's per-GPU throughput at `per_user` tok/s per user, on the line between the two frontier points
    around it; outside the measured range, none, with the reason (never extrapolated)."""
    if not (isinstance(per_user, (int, float)) and math.isfinite(per_user) and per_user > 0):
        raise ValueError(f"a per-user speed must be a number > 0 tok/s, got {per_user!r}")
    points = sorted(frontier, key=lambda p: p.per_user)
    if not points:
        return AtTarget(per_user, None, "not measured: no operating point of this side was measured")
    fastest, slowest = points[-1], points[0]
    if per_user > fastest.per_user:
        return AtTarget(
            per_user,
            None,
            f"not reached: the fastest operating point measured gives {fastest.per_user:.3g} tok/s per user "
            f"(concurrency {fastest.concurrency:g})",
            beyond=True,
        )
    if per_user < slowest.per_user:
        return AtTarget(
            per_user,
            None,
            f"outside the sweep: its slowest operating point gives {slowest.per_user:.3g} tok/s per user "
            f"(concurrency {slowest.concurrency:g}); a higher concurrency measured would price a slower target",
        )
    for low, high in zip(points, points[1:]):
        if low.per_user <= per_user <= high.per_user:
            share = (per_user - low.per_user) / (high.per_user - low.per_user)
            return AtTarget(
                per_user,
                low.per_gpu + share * (high.per_gpu - low.per_gpu),
                between=(low.concurrency, high.concurrency),
            )
    return AtTarget(per_user, fastest.per_gpu, between=(fastest.concurrency,))  # a frontier of one point


@dataclass(frozen=True)
class Frontier:
    """One side's operating points per draw of the sweep (the same prompts on both sides, draw by draw)."""

    label: str
    draws: tuple[tuple[OperatingPoint | None, ...], ...]  # draws x concurrency levels

    def levels(self) -> tuple[tuple[OperatingPoint, tuple[OperatingPoint, ...]], ...]:
        """Per level measured in some draw: the median of each axis over its draws, and the draws' own points."""
        merged = []
        for level in range(max((len(d) for d in self.draws), default=0)):
            found = tuple(d[level] for d in self.draws if level < len(d) and d[level] is not None)
            if found:
                median = OperatingPoint(
                    found[0].concurrency,
                    statistics.median(p.per_user for p in found),
                    statistics.median(p.per_gpu for p in found),
                )
                merged.append((median, found))
        return tuple(merged)

    def points(self) -> tuple[OperatingPoint, ...]:
        """Each level's point over the draws: the median of each axis (what the table and plot show)."""
        return tuple(median for median, _ in self.levels())

    def frontier(self) -> tuple[OperatingPoint, ...]:
        return pareto_frontier(self.points())

    def at(self, per_user: float) -> AtTarget:
        return throughput_at(self.frontier(), per_user)

    def per_draw_at(self, per_user: float) -> tuple[AtTarget, ...]:
        return tuple(throughput_at(pareto_frontier(draw), per_user) for draw in self.draws)


@dataclass(frozen=True)
class WorthAtTarget:
    """SD's per-GPU throughput over the reference's at one per-user speed, with the per-draw ratios behind it."""

    per_user: float
    reference: AtTarget
    speculative: AtTarget
    draw_pairs: tuple[tuple[AtTarget, AtTarget], ...]  # (reference, SD) per draw
    usd_per_gpu_hour: float | None = None
    why: str = ""  # where no ratio: which side does not reach the target

    @property
    def ratio(self) -> float | None:
        if self.reference.reached and self.speculative.reached:
            return self.speculative.per_gpu / self.reference.per_gpu
        return None

    def usd_per_million(self) -> dict[str, float | None]:
        """Cost per 1M output tokens at the target, each side, at the price given (None: no price, or not reached)."""
        price = self.usd_per_gpu_hour
        return {
            side: cost_per_million_tokens(at.per_gpu, price) if price is not None and at.reached else None
            for side, at in (("reference", self.reference), ("speculative", self.speculative))
        }

    def saving(self) -> float | None:
        """The share of the reference's cost per 1M output tokens SD saves at the target (negative: SD costs)."""
        ratio = self.ratio
        return None if ratio is None else 1.0 - 1.0 / ratio

    def evidence(self) -> Evidence | None:
        """Per draw, SD's and the reference's log per-GPU throughput at the target; None unless every draw reached it
        on both sides."""
        if not self.draw_pairs or not all(r.reached and s.reached for r, s in self.draw_pairs):
            return None
        return Evidence(
            sends=tuple((math.log(s.per_gpu),) for _, s in self.draw_pairs),
            reference=tuple(math.log(r.per_gpu) for r, _ in self.draw_pairs),
        )

    def decide_at_least(self, bound: float) -> Decision:
        """The check that SD's per-GPU throughput at the target is at least `bound` times the reference's, on the
        draws measured (the sequential rule's error rates, no more runs: a sweep is measured once)."""
        draws = len(self.draw_pairs)
        bad, good = bound_zone(bound)
        evidence = self.evidence()
        if evidence is None:
            return self._unreached(bound, draws)
        return decide(evidence, bad, good, Rule(min_runs=max(draws, 1), max_runs=max(draws, 1)))

    def _unreached(self, bound: float, draws: int) -> Decision:
        """A target a frontier has no value at.  SD's being faster than any point SD reached fails (SD does not
        serve that speed); the reference's alone, with SD reaching it, passes (SD is the only way there).  A target
        outside a sweep's range (slower than its slowest point) was not measured, and draws that disagree decide
        nothing: undecided, with the reason."""
        sd_beyond = [s.beyond for _, s in self.draw_pairs]
        ref_beyond = [r.beyond for r, _ in self.draw_pairs]
        if sd_beyond and all(sd_beyond):
            outcome, why = FAILED, f"SD's frontier: {self.speculative.why or 'not reached'}"
        elif ref_beyond and all(ref_beyond) and all(s.reached for _, s in self.draw_pairs):
            outcome, why = PASSED, f"the reference's frontier: {self.reference.why}; only SD reaches it"
        else:
            reached = sum(s.reached and r.reached for r, s in self.draw_pairs)
            outcome = UNDECIDED
            why = f"both frontiers have a value at {self.per_user:g} tok/s per user in {reached} of {draws} draws"
            why += f" ({self.why})" if self.why else ""
        estimate = -math.inf if outcome == FAILED else math.inf if outcome == PASSED else math.nan
        return Decision(
            outcome,
            estimate=estimate,
            low=estimate if outcome != UNDECIDED else -math.inf,
            high=estimate if outcome != UNDECIDED else math.inf,
            runs=draws,
            draws=draws,
            stopped="decided by reach" if outcome != UNDECIDED else f"undecided after {draws} runs a side",
            content_spread=None,
            timing_spread=None,
            interval="no ratio: a frontier does not reach the target",
            why=why,
        )

    def as_dict(self) -> dict[str, Any]:
        costs = self.usd_per_million()
        return {
            "per_user": self.per_user,
            "reference_per_gpu": self.reference.per_gpu,
            "speculative_per_gpu": self.speculative.per_gpu,
            "ratio": self.ratio,
            "draw_ratios": [s.per_gpu / r.per_gpu if r.reached and s.reached else None for r, s in self.draw_pairs],
            "reference_usd_per_1m_tokens": costs["reference"],
            "speculative_usd_per_1m_tokens": costs["speculative"],
            "saving": self.saving(),
            "unavailable": self.why or None,
        }


def worth_at(
    reference: Frontier, speculative: Frontier, per_user: float, usd_per_gpu_hour: float | None = None
) -> WorthAtTarget:
    """SD's worth at `per_user` tok/s per user: both sides' throughput there, the ratio, per draw and overall."""
    if len(reference.draws) != len(speculative.draws):
        raise ValueError(
            f"the two sides must have the same draws: reference {len(reference.draws)}, SD {len(speculative.draws)}"
        )
    ref, sd = reference.at(per_user), speculative.at(per_user)
    missing = [f"{name}: {at.why}" for name, at in (("reference", ref), ("SD", sd)) if not at.reached]
    return WorthAtTarget(
        per_user,
        ref,
        sd,
        tuple(zip(reference.per_draw_at(per_user), speculative.per_draw_at(per_user))),
        usd_per_gpu_hour,
        "; ".join(missing),
    )


def frontier_at_or_above(
    reference: Frontier, speculative: Frontier, low: float, high: float
) -> tuple[str, list[tuple[WorthAtTarget, Decision]]]:
    """The check that SD's frontier is at or above the reference's from `low` to `high` tok/s per user: decided at
    the range's ends and at every frontier point of either side inside it (both lines are straight between those,
    so the ratio's lowest point is one of them).  Passed when every point passed, failed when any failed; each
    point's worth comes with its decision."""
    if not 0 < low <= high:
        raise ValueError(f"a per-user range needs 0 < low <= high, got {low!r} and {high!r}")
    inside = {p.per_user for side in (reference, speculative) for p in side.frontier() if low <= p.per_user <= high}
    speeds = sorted({low, high} | inside)
    worths = [worth_at(reference, speculative, speed) for speed in speeds]
    decided = [(worth, worth.decide_at_least(1.0)) for worth in worths]
    outcomes = {decision.outcome for _, decision in decided}
    outcome = FAILED if FAILED in outcomes else UNDECIDED if UNDECIDED in outcomes else PASSED
    return outcome, decided


@dataclass
class FrontierReport:
    """A concurrency sweep's two frontiers and the targets its checks read, for the report rows (each level of the
    sweep carries it, as each length of a forced sweep carries its curve)."""

    reference: Frontier
    speculative: Frontier
    targets: list[WorthAtTarget] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        def side(frontier: Frontier) -> dict[str, Any]:
            on = {(p.per_user, p.per_gpu) for p in frontier.frontier()}
            return {
                "points": [
                    {
                        "concurrency": p.concurrency,
                        "per_user": p.per_user,
                        "per_gpu": p.per_gpu,
                        "on_frontier": (p.per_user, p.per_gpu) in on,
                        "per_user_draws": [d.per_user for d in draws],
                        "per_gpu_draws": [d.per_gpu for d in draws],
                    }
                    for p, draws in frontier.levels()
                ]
            }

        targets = {}
        for worth in self.targets:  # a target checked twice (two bounds) is one row of figures
            targets[worth.per_user] = worth.as_dict()
        return {
            "per_user_definition": PER_USER,
            "per_gpu_definition": PER_GPU,
            "draws": len(self.reference.draws),
            "reference": side(self.reference),
            "speculative": side(self.speculative),
            "targets": [targets[speed] for speed in sorted(targets)],
        }
