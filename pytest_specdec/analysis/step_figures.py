"""A result's step counts, its cost ratio c per repeat and overall, and the theory figures built on them."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from .acceptance import StepTiming, drafted_step_ms
from .theory import (
    MEASURED,
    CostRatio,
    Theory,
    as_cost_ratio,
    cost_ratio_for,
    measured_cost_ratio,
    shortfall_margin,
    theory_for,
)


def _json(value):
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def _k(result) -> int | None:
    k = (result.spec.speculative_config or {}).get("num_speculative_tokens")
    return k if isinstance(k, int) and not isinstance(k, bool) and k >= 1 else None


def _timing(reference_runs, speculative_runs, k: int) -> StepTiming | None:
    ref = [r for run in reference_runs for r in run.records if r.success]
    sd = [r for run in speculative_runs for r in run.records if r.success]
    ref_tokens = sum(max(r.output_tokens - 1, 0) for r in ref)
    if not ref or not sd or not ref_tokens:
        return None
    return StepTiming(
        reference_step_ms=1000 * sum(r.latency - r.ttft for r in ref) / ref_tokens,
        sd_decode_ms=1000 * sum(r.latency - r.ttft for r in sd),
        sd_prefill_ms=1000 * sum(r.ttft for r in sd),
        k=k,
    )


@dataclass(frozen=True)
class StepCounts:
    """Drafted (``D``) and undrafted (``U``) steps of an SD run, and what they were counted from."""

    drafted: float
    undrafted: float
    source: str  # "server" (per-request arrays) or "counters" (Prometheus, with the records' output tokens)
    note: str | None = None


def step_counts(result, repeat: int) -> StepCounts | str:
    """Repeat `repeat`'s drafted and undrafted steps, or why they cannot be counted.

    From the server's per-step arrays when every completed SD request has
    them; else from the counters: the records' decode tokens (output tokens
    less the prefill's first one per request) less the drafted steps' tokens
    (drafts + accepted) are the undrafted steps.  The chunk estimate cannot
    tell an undrafted step from a rejected one, so it is not used.
    """
    k = _k(result) or 0
    _, run = result.repeat_pairs()[repeat]
    done = [r for r in run.records if r.success]
    analysis = result.analysis(repeat)
    if analysis.source == "server" and len(analysis.requests) == len(done):
        return StepCounts(
            float(sum(len(r.accepted) for r in analysis.requests)),
            float(sum(r.undrafted_steps for r in analysis.requests)),
            "server",
        )
    counters = run.counters
    if counters is None or not counters.present:
        return (
            counters.problem if counters is not None else "the SD run recorded no counters"
        ) + ", and not every request carries the server's per-step arrays"
    if not (math.isfinite(counters.num_drafts) and math.isfinite(counters.num_accepted_tokens)):
        return "the SD counters are not finite numbers"
    if not counters.num_drafts:
        return "the SD server drafted nothing during the run"
    if len(done) < len(run.records):
        return f"{len(run.records) - len(done)} requests failed: the counters count their steps, the records do not"
    decode = sum(max(r.output_tokens - 1, 0) for r in done)
    drafted_tokens = counters.num_drafts + counters.num_accepted_tokens
    undrafted = decode - drafted_tokens
    # A request's last step may accept past max_tokens: at most k tokens per request the client never sees.
    if undrafted < -len(done) * k:
        return (
            f"the counters' drafted steps emitted {drafted_tokens:g} tokens, more than the {decode} decode tokens "
            f"the {len(done)} requests received beyond the k={k} each a last step can overrun: the counters "
            "count other traffic too?"
        )
    note = f"{-undrafted:g} tokens accepted past max_tokens, counted as no undrafted step" if undrafted < 0 else None
    return StepCounts(float(counters.num_drafts), float(max(undrafted, 0)), "counters", note)


def repeat_cost_ratio(result, repeat: int) -> tuple[float | None, str | None]:
    """(c measured from repeat `repeat`'s step times, None) or (None, why it cannot be measured)."""
    k = _k(result)
    counts = step_counts(result, repeat) if k is not None else "no draft length k"
    if isinstance(counts, str):
        return None, counts
    reference, speculative = result.repeat_pairs()[repeat]
    timing = _timing([reference], [speculative], k)
    if timing is None:
        return None, "no completed reference and SD requests to time the steps with"
    if not (math.isfinite(timing.reference_step_ms) and timing.reference_step_ms > 0):
        # A server that streams its whole answer at once has no decode step to divide by.
        return None, f"the reference's decode step timed {timing.reference_step_ms:.3g} ms: nothing to divide by"
    t_k = drafted_step_ms(timing, counts.drafted, counts.undrafted)
    if not math.isfinite(t_k):
        return None, (
            f"the {counts.undrafted:g} undrafted steps at {timing.reference_step_ms:.3g} ms take the whole "
            f"SD decode time ({timing.sd_decode_ms:.3g} ms)"
            if counts.drafted
            else "no step drafted"
        )
    return measured_cost_ratio(timing.reference_step_ms, t_k, k), None


def fallback_cost_ratio(result, fallback=None) -> CostRatio:
    """The labelled c that stands in when c cannot be measured or is rejected: `fallback` when given, else the
    estimate made at measure time (`result.cost_ratio`), else the method's default (no model is resolved)."""
    held = fallback if fallback is not None else getattr(result, "cost_ratio", None)
    return cost_ratio_for(result.spec) if held is None else as_cost_ratio(held)


def cost_ratio_of(result, fallback=None) -> CostRatio:
    """c for `result`: the median over repeats of c measured from each repeat's step times.

    Where no repeat could be measured, or the median is negative (a drafted
    step timed faster than the plain decode step it contains: the two servers'
    speeds differ by more than drafting costs), the labelled fallback stands
    in, with a note saying why: `fallback` when given, else the estimate made
    at measure time (`result.cost_ratio`), else the method's default (no
    model is resolved here).
    """
    estimate = fallback_cost_ratio(result, fallback)
    measured = [repeat_cost_ratio(result, i) for i in range(len(result.speculative_runs))]
    values = [c for c, _ in measured if c is not None]
    if not values:
        return estimate.with_note(f"c not measured: {measured[0][1] if measured else 'no SD run'}")
    c = statistics.median(values)
    if c < 0:
        return estimate.with_note(
            f"measured c {c:.3g} rejected: the drafted step timed faster than a reference "
            "decode step, which it contains (the two servers' speeds differ by more than "
            "drafting costs)"
        )
    skipped = [f"repeat {i + 1}: {why}" for i, (value, why) in enumerate(measured) if value is None]
    note = f"median of {len(values)} repeat{'s' if len(values) > 1 else ''}" + (
        f" ({'; '.join(skipped)})" if skipped else ""
    )
    return CostRatio(c, MEASURED, note, tuple(value for value, _ in measured))


@dataclass(frozen=True)
class TheoryFigures:
    """Leviathan's model beside one result: the theory, its c, its steps, the noise margin to compare with."""

    theory: Theory | None
    cost: CostRatio
    drafted_steps: float | None
    undrafted_steps: float | None
    undrafted_source: str | None  # "server", "counters" (comma-joined when repeats differ); None: unknown
    undrafted_note: str | None
    margin: float  # theory.shortfall_margin of the repeats' decode (median TPOT) speedups
    margin_from: str

    def as_dict(self) -> dict[str, Any]:
        theory = self.theory
        return {
            "cost_ratio_note": self.cost.note,
            "cost_ratio_repeats": [_json(v) for v in self.cost.repeats],
            "drafted_steps": _json(self.drafted_steps),
            "undrafted_steps": _json(self.undrafted_steps),
            "undrafted_source": self.undrafted_source,
            "undrafted_note": self.undrafted_note,
            "undrafted_per_drafted": _json(theory.undrafted_per_drafted) if theory else None,
            "break_even_length": _json(theory.break_even) if theory and theory.break_even else None,
            "decode_speedup": _json(theory.measured_speedup) if theory and theory.measured_speedup else None,
            "note": theory.note if theory else None,
            "shortfall_margin": _json(self.margin),
            "shortfall_margin_from": self.margin_from,
        }


def theory_figures(result, fallback=None) -> TheoryFigures:
    """The theory of `result` with its measured c (see `cost_ratio_of`) and undrafted steps, pooled over repeats."""
    counts = [step_counts(result, i) for i in range(len(result.speculative_runs))] if _k(result) else []
    found = [c for c in counts if isinstance(c, StepCounts)]
    drafted = sum(c.drafted for c in found) if found else None
    undrafted = sum(c.undrafted for c in found) if found else None
    why = [c for c in counts if isinstance(c, str)][:1] + [c.note for c in found if c.note][:1]
    cost = cost_ratio_of(result, fallback)
    counters = result.counters
    theory = theory_for(
        result.acceptance_length if counters.present else None,
        _k(result),
        cost,
        result.speedup("median_tpot_ms"),
        undrafted_per_drafted=undrafted / drafted if drafted else None,
    )
    margin, margin_from = shortfall_margin(result.repeat_speedups("median_tpot_ms"))
    return TheoryFigures(
        theory,
        cost,
        drafted,
        undrafted,
        ", ".join(sorted({c.source for c in found})) or None,
        "; ".join(why) or None,
        margin,
        margin_from,
    )
