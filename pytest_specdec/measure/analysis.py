"""The per-request analyses of one result: inside the acceptance numbers.

Aggregate counters say how much of the draft was accepted on average; the
published studies look inside (per request, per output position, per draft
length).  This module turns a result's SD records into those figures with the
functions of `acceptance`: the per-step arrays the server reported
(``--per-request-spec-decode-metrics detailed``) or, where a server gave none,
an estimate from the tokens of each streamed chunk, labelled ``estimated``.

`analyse(result)` pools every SD repeat; `analyse(result, repeat=i)` takes
repeat i alone (what baselines store per repeat).  `theory_figures(result)`
puts Leviathan's model beside them with the run's own draft/target cost ratio
c (measured from each repeat's step times) and its steps that drafted
nothing.  Nothing here raises on measured input: a figure that cannot be
computed is NaN (or None) with a reason.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from .acceptance import (ORACLE_LABEL, Percentiles, RequestSteps, StepTiming, acceptance_by_position, best_k,
                         compare_estimate, drafted_step_ms, oracle_speedup, per_position_rates, predict_speedups,
                         request_length_distribution, steps_from_chunks, steps_from_server, why_no_prediction)
from ..engines import engine_named
from .diagnosis import Cause, diagnose
from .theory import (MEASURED, CostRatio, Theory, as_cost_ratio, cost_ratio_for, measured_cost_ratio,
                     shortfall_margin, theory_for)
from ..engines.server_spec import DEFAULT_ENGINE

# The per-request figures a result carries, and the names baselines and reports use for them.
REQUEST_LENGTH_FIGURES = ("request_acceptance_length_p10", "request_acceptance_length_p50")
ANALYSIS_FIGURES = (*REQUEST_LENGTH_FIGURES, "best_k", "oracle_speedup")


@dataclass(frozen=True)
class AcceptanceAnalysis:
    """What the per-step data of one result (or one repeat) say."""

    source: str | None  # "server", "estimate", "mixed"; None when no request had per-step data
    problem: str | None  # why there is nothing to analyse (then every figure is NaN)
    requests: tuple[RequestSteps, ...] = ()
    request_lengths: Percentiles = field(default_factory=lambda: Percentiles.of([]))
    requests_without_steps: int = 0  # requests that never drafted (left out of the distribution)
    by_position: dict[str, list[float]] = field(default_factory=dict)
    per_position: list[float] = field(default_factory=list)  # from the per-step data
    predictions: dict[int, float] = field(default_factory=dict)  # k' -> predicted throughput speedup
    best_k: int | None = None
    oracle_speedup: float = math.nan  # the oracle at k (acceptance.ORACLE_LABEL), a lower bound on the study's
    prediction_problem: str | None = None
    estimate_check: dict[str, Any] | None = None  # the chunk estimate against the server's arrays

    @property
    def estimated(self) -> bool:
        """Figures rest (at least partly) on the chunk estimate, not the server's arrays."""
        return self.source in ("estimate", "mixed")

    def figure(self, name: str) -> float:
        """One of ANALYSIS_FIGURES (NaN when unavailable)."""
        if name == "request_acceptance_length_p10":
            return self.request_lengths.p10
        if name == "request_acceptance_length_p50":
            return self.request_lengths.p50
        if name == "best_k":
            return float(self.best_k) if self.best_k is not None else math.nan
        if name == "oracle_speedup":
            return self.oracle_speedup
        raise KeyError(name)

    def unavailable(self, name: str) -> str | None:
        if self.problem:
            return self.problem
        if name in ("best_k", "oracle_speedup") and self.prediction_problem:
            return self.prediction_problem
        if name in REQUEST_LENGTH_FIGURES and not self.request_lengths.count:
            return "no SD request drafted a token"
        return None

    def as_dict(self) -> dict[str, Any]:
        """JSON-able (NaN as None), for report rows."""
        lengths = {key: _json(getattr(self.request_lengths, key))
                   for key in ("p5", "p10", "p25", "p50", "p75", "p95", "mean", "std")}
        return {
            "source": self.source,
            "estimated": self.estimated,
            "problem": self.problem,
            "requests": len(self.requests),
            "requests_without_steps": self.requests_without_steps,
            "request_acceptance_length": {**lengths, "count": self.request_lengths.count},
            "per_request_lengths": [_json(r.acceptance_length) for r in self.requests],
            "tokens_per_step": [r.tokens_per_step for r in self.requests[:64]],
            "by_position": {label: [_json(v) for v in values] for label, values in self.by_position.items()},
            "per_position": [_json(v) for v in self.per_position],
            "predictions": {str(k): _json(v) for k, v in self.predictions.items()},
            "best_k": self.best_k,
            "oracle_speedup": _json(self.oracle_speedup),
            "oracle": ORACLE_LABEL,
            "prediction_problem": self.prediction_problem,
            "estimate_check": self.estimate_check,
        }


def _json(value):
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def _k(result) -> int | None:
    k = (result.spec.speculative_config or {}).get("num_speculative_tokens")
    return k if isinstance(k, int) and not isinstance(k, bool) and k >= 1 else None


def request_steps(record, k: int, estimate: bool = True) -> tuple[RequestSteps | None, RequestSteps | None]:
    """(the server's per-step data, the chunk estimate) for one SD record; either may be None (the
    estimate always when `estimate` is False: an engine whose streamed events are not steps)."""
    server = None
    reported = getattr(record, "spec_decoding", None)  # records from other clients may lack both fields
    chunks = getattr(record, "chunk_tokens", None)
    if reported:
        try:
            server = steps_from_server(reported, record.output_tokens)
        except ValueError:
            server = None  # malformed arrays: fall back to the estimate rather than trust them
    return server, steps_from_chunks(chunks, k) if chunks and estimate else None


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


def analyse(result, repeat: int | None = None) -> AcceptanceAnalysis:
    """The per-request analyses of `result` (every SD repeat pooled, or repeat `repeat` alone)."""
    k = _k(result)
    if k is None:
        return AcceptanceAnalysis(None, "no draft length k (num_speculative_tokens) in the speculative config")
    pairs = result.repeat_pairs()
    if repeat is not None:
        pairs = [pairs[repeat]]
    reference_runs = [ref for ref, _ in pairs]
    speculative_runs = [sd for _, sd in pairs]
    steps: list[RequestSteps] = []
    checks = []
    engine = engine_named(getattr(result.spec, "engine", DEFAULT_ENGINE))
    for run in speculative_runs:
        for record in run.records:
            if not record.success:
                continue
            server, estimate = request_steps(record, k, estimate=engine.events_are_steps)
            if server is not None and estimate is not None:
                checks.append(compare_estimate(server, estimate))
            if server is not None or estimate is not None:
                steps.append(server or estimate)
    if not steps and not engine.events_are_steps:
        return AcceptanceAnalysis(None, f"no per-step data: {engine.title} reports per-request totals only, and "
                                        "streams one event per token, drafted or not, so its events are not steps")
    if not steps:
        return AcceptanceAnalysis(None, "no per-step data: the server reported no per-request SD metrics and "
                                        "streamed no token ids to estimate them from")
    sources = {s.source for s in steps}
    source = sources.pop() if len(sources) == 1 else "mixed"
    lengths, without = request_length_distribution(steps)
    # The step timings are this repeat's (or the pooled runs'): so is the speedup they scale.
    measured = result.speedup() if repeat is None else result.repeat_speedups()[repeat]
    timing = _timing(reference_runs, speculative_runs, k)
    if timing is None:
        predictions, best, oracle = {}, None, math.nan
        problem = "no completed reference and SD requests to time the steps with"
    else:
        problem = why_no_prediction(steps, timing, measured)
        predictions = predict_speedups(steps, timing, measured)
        best = best_k(predictions)
        oracle = oracle_speedup(steps, timing, measured)
    return AcceptanceAnalysis(
        source=source,
        problem=None,
        requests=tuple(steps),
        request_lengths=lengths,
        requests_without_steps=without,
        by_position=acceptance_by_position(steps),
        per_position=per_position_rates(steps, k),
        predictions=predictions,
        best_k=best,
        oracle_speedup=oracle,
        prediction_problem=problem,
        estimate_check=_estimate_summary(checks),
    )


def _estimate_summary(checks: list[dict]) -> dict[str, Any] | None:
    """How close the chunk estimate came to the server's own arrays, over the requests that had both."""
    if not checks:
        return None

    def median(key):
        values = [c[key] for c in checks if isinstance(c[key], (int, float)) and math.isfinite(c[key])]
        return statistics.median(values) if values else None

    return {
        "requests": len(checks),
        "server_acceptance_length_p50": median("server_acceptance_length"),
        "estimate_acceptance_length_p50": median("estimate_acceptance_length"),
        "acceptance_length_difference_p50": median("acceptance_length_difference"),
        "step_agreement_p50": median("step_agreement"),
    }


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
        return StepCounts(float(sum(len(r.accepted) for r in analysis.requests)),
                          float(sum(r.undrafted_steps for r in analysis.requests)), "server")
    counters = run.counters
    if counters is None or not counters.present:
        return (counters.problem if counters is not None else "the SD run recorded no counters") + \
            ", and not every request carries the server's per-step arrays"
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
        return (f"the counters' drafted steps emitted {drafted_tokens:g} tokens, more than the {decode} decode tokens "
                f"the {len(done)} requests received beyond the k={k} each a last step can overrun: the counters "
                "count other traffic too?")
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
        return None, (f"the {counts.undrafted:g} undrafted steps at {timing.reference_step_ms:.3g} ms take the whole "
                      f"SD decode time ({timing.sd_decode_ms:.3g} ms)" if counts.drafted else "no step drafted")
    return measured_cost_ratio(timing.reference_step_ms, t_k, k), None


def cost_ratio_of(result, fallback=None) -> CostRatio:
    """c for `result`: the median over repeats of c measured from each repeat's step times.

    Where no repeat could be measured, or the median is negative (a drafted
    step timed faster than the plain decode step it contains: the two servers'
    speeds differ by more than drafting costs), the labelled fallback stands
    in, with a note saying why: `fallback` when given, else the estimate made
    at measure time (`result.cost_ratio`), else the method's default (no
    model is resolved here).
    """
    held = fallback if fallback is not None else result.cost_ratio
    estimate = cost_ratio_for(result.spec) if held is None else as_cost_ratio(held)
    measured = [repeat_cost_ratio(result, i) for i in range(len(result.speculative_runs))]
    values = [c for c, _ in measured if c is not None]
    if not values:
        return estimate.with_note(f"c not measured: {measured[0][1] if measured else 'no SD run'}")
    c = statistics.median(values)
    if c < 0:
        return estimate.with_note(f"measured c {c:.3g} rejected: the drafted step timed faster than a reference "
                                  "decode step, which it contains (the two servers' speeds differ by more than "
                                  "drafting costs)")
    skipped = [f"repeat {i + 1}: {why}" for i, (value, why) in enumerate(measured) if value is None]
    note = f"median of {len(values)} repeat{'s' if len(values) > 1 else ''}" + (f" ({'; '.join(skipped)})" if skipped
                                                                                else "")
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
        return {"cost_ratio_note": self.cost.note, "cost_ratio_repeats": [_json(v) for v in self.cost.repeats],
                "drafted_steps": _json(self.drafted_steps), "undrafted_steps": _json(self.undrafted_steps),
                "undrafted_source": self.undrafted_source, "undrafted_note": self.undrafted_note,
                "undrafted_per_drafted": _json(theory.undrafted_per_drafted) if theory else None,
                "break_even_length": _json(theory.break_even) if theory and theory.break_even else None,
                "decode_speedup": _json(theory.measured_speedup) if theory and theory.measured_speedup else None,
                "note": theory.note if theory else None,
                "shortfall_margin": _json(self.margin), "shortfall_margin_from": self.margin_from}


def theory_figures(result, fallback=None) -> TheoryFigures:
    """The theory of `result` with its measured c (see `cost_ratio_of`) and undrafted steps, pooled over repeats."""
    counts = [step_counts(result, i) for i in range(len(result.speculative_runs))] if _k(result) else []
    found = [c for c in counts if isinstance(c, StepCounts)]
    drafted = sum(c.drafted for c in found) if found else None
    undrafted = sum(c.undrafted for c in found) if found else None
    why = [c for c in counts if isinstance(c, str)][:1] + [c.note for c in found if c.note][:1]
    cost = cost_ratio_of(result, fallback)
    counters = result.counters
    theory = theory_for(result.acceptance_length if counters.present else None, _k(result), cost,
                        result.speedup("median_tpot_ms"),
                        undrafted_per_drafted=undrafted / drafted if drafted else None)
    margin, margin_from = shortfall_margin(result.repeat_speedups("median_tpot_ms"))
    return TheoryFigures(theory, cost, drafted, undrafted, ", ".join(sorted({c.source for c in found})) or None,
                         "; ".join(why) or None, margin, margin_from)


def diagnosis(result, sweep: list[tuple[float, float]] | None = None) -> list[Cause]:
    """Why SD did not pay for `result`, each cause with its figure (see `diagnosis`)."""
    analysis = result.analysis()
    counters = result.counters
    figures_of_theory = theory_figures(result)
    theory, cost = figures_of_theory.theory, figures_of_theory.cost
    figures: dict[str, Any] = {
        "speedup": result.speedup(),
        "decode_speedup": result.speedup("median_tpot_ms"),
        "expected_speedup": theory.expected_speedup if theory else None,
        "cost_ratio": cost.value,
        "cost_ratio_source": cost.source,
        "undrafted_per_drafted": theory.undrafted_per_drafted if theory else None,
        "shortfall_margin": figures_of_theory.margin,
        "acceptance_rate": result.acceptance_rate if counters.present else None,
        "acceptance_length": result.acceptance_length if counters.present else None,
        "k": _k(result),
        "per_position_acceptance": result.per_position_acceptance if counters.present else analysis.per_position,
        "best_k": analysis.best_k,
        "predicted_best_speedup": analysis.predictions.get(analysis.best_k) if analysis.best_k else None,
        "client_bound": result.client_bound(),
        "sweep": sweep,
        "sweep_margin": shortfall_margin(result.repeat_speedups())[0],
        # Per-step figures from the chunk estimate are labelled so (per-position rates from counters are exact).
        "estimated": analysis.estimated,
        "rates_estimated": analysis.estimated and not counters.present,
    }
    figures.update(_warm_up_figures(result))
    return diagnose(figures)


def _warm_up_figures(result) -> dict[str, Any]:
    """The first SD request's TPOT, and the others' (a warm-up measured as load stands out of them)."""
    run = result.speculative_runs[0] if result.speculative_runs else None
    tpots = [(r.latency - r.ttft) / (r.output_tokens - 1) * 1000 for r in (run.records if run else [])
             if r.success and r.output_tokens > 1]
    if len(tpots) < 2:
        return {}
    return {"first_request_tpot_ms": tpots[0], "tpot_ms_others": tpots[1:]}
