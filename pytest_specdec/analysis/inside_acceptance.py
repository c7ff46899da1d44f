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

from .acceptance import (
    Percentiles,
    RequestSteps,
    acceptance_by_position,
    compare_estimate,
    per_position_rates,
    request_length_distribution,
    steps_from_chunks,
    steps_from_server,
    why_no_prediction,
)
from .predictions import best_k, oracle_label, oracle_speedup, predict_speedups, run_drafted_step_ms
from .cost_ratio import MODEL_FREE
from .step_cost import ONE_K, StepCost, fit_step_cost
from .diagnosis import Cause, diagnose
from .theory import shortfall_margin
from .step_figures import (  # re-exported: these lived here
    _json as _json,
    _k as _k,
    _timing as _timing,
    StepCounts as StepCounts,
    step_counts as step_counts,
    repeat_cost_ratio as repeat_cost_ratio,
    cost_ratio_of as cost_ratio_of,
    fallback_cost_ratio,
    TheoryFigures as TheoryFigures,
    theory_figures as theory_figures,
)

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
    oracle_speedup: float = math.nan  # predictions.oracle_label(k) says which oracle: the study's or at k
    oracle: str = ""  # that label
    step_cost: str | None = None  # how the step cost behind predictions and the oracle was fitted (.step_cost)
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
        lengths = {
            key: _json(getattr(self.request_lengths, key))
            for key in ("p5", "p10", "p25", "p50", "p75", "p95", "mean", "std")
        }
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
            "oracle": self.oracle,
            "step_cost": self.step_cost,
            "prediction_problem": self.prediction_problem,
            "estimate_check": self.estimate_check,
        }


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


def analyse(result, engine, repeat: int | None = None) -> AcceptanceAnalysis:
    """The per-request analyses of `result` (every SD repeat pooled, or repeat `repeat` alone). `engine` is the
    engine that served it (`engines.Engine`): whether its streamed events are steps, and its name."""
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
        return AcceptanceAnalysis(
            None,
            f"no per-step data: {engine.title} reports per-request totals only, and "
            "streams one event per token, drafted or not, so its events are not steps",
        )
    if not steps:
        return AcceptanceAnalysis(
            None,
            "no per-step data: the server reported no per-request SD metrics and "
            "streamed no token ids to estimate them from",
        )
    sources = {s.source for s in steps}
    source = sources.pop() if len(sources) == 1 else "mixed"
    lengths, without = request_length_distribution(steps)
    # The step timings are this repeat's (or the pooled runs'): so is the speedup they scale.
    measured = result.speedup() if repeat is None else result.repeat_speedups()[repeat]
    timing = _timing(reference_runs, speculative_runs, k)
    cost = None
    if timing is None:
        predictions, best, oracle = {}, None, math.nan
        problem = "no completed reference and SD requests to time the steps with"
    else:
        problem = why_no_prediction(steps, timing, measured, own_step=False)
        cost = None if problem else step_cost_of(result, steps, timing)
        if not problem and cost is None:  # the run's drafted step was rejected and c has no fallback
            problem = why_no_prediction(steps, timing, measured)
        predictions = predict_speedups(steps, timing, measured, cost)
        best = best_k(predictions)
        oracle = oracle_speedup(steps, timing, measured, cost)
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
        oracle=oracle_label(k),
        step_cost=cost.label if cost else None,
        prediction_problem=problem,
        estimate_check=_estimate_summary(checks),
    )


def step_cost_of(result, steps: list[RequestSteps], timing) -> StepCost | None:
    """The step cost behind `result`'s predictions: its own drafted step, and those of the runs at other k
    given with `SpecDecResult.fit_step_cost_with` (each as its extra over its own reference step)."""
    own_ms = run_drafted_step_ms(steps, timing)
    method = (result.spec.speculative_config or {}).get("method")
    if not own_ms >= timing.reference_step_ms * (1 - 1e-9):
        return _fallback_step_cost(result, own_ms, timing, drafter_always_runs=method not in MODEL_FREE)
    points = {timing.k: own_ms}
    left_out = []
    for other in getattr(result, "step_cost_runs", ()):
        other_k, other_analysis = _k(other), other.analysis()
        pairs = other.repeat_pairs()
        other_timing = _timing([r for r, _ in pairs], [s for _, s in pairs], other_k) if other_k else None
        if other_timing is None or other_k in points or not other_analysis.requests:
            continue
        extra = run_drafted_step_ms(other_analysis.requests, other_timing) - other_timing.reference_step_ms
        if not extra >= -1e-9 * other_timing.reference_step_ms:  # NaN too: no drafted step to time
            left_out.append(f"the run at k={other_k} left out: its drafted step did not time above its plain step")
            continue
        points[other_k] = timing.reference_step_ms + extra
    concurrency = (getattr(result, "pattern", None) or {}).get("max_concurrency")
    note = (
        f"at concurrency {concurrency}: other requests' prefill landing in decode steps is counted in the "
        "step's cost, not corrected for"
        if isinstance(concurrency, int) and concurrency > 1
        else "at concurrency 1"
        if concurrency == 1
        else ""
    )
    note = "; ".join(filter(None, [note, *left_out]))
    return fit_step_cost(timing.reference_step_ms, points, drafter_always_runs=method not in MODEL_FREE, note=note)


def _fallback_step_cost(result, own_ms: float, timing, *, drafter_always_runs: bool) -> StepCost | None:
    """The step cost when the run's drafted step timed below the plain step it contains: the labelled c the
    theory falls back to when a measured c is rejected for the same reason (step_figures.fallback_cost_ratio),
    per proposed token; None when it has no value.  (Not cost_ratio_of: it reads the repeats' analyses, which
    come here.)"""
    cost = fallback_cost_ratio(result)
    if cost.value is None:
        return None
    return StepCost(
        timing.reference_step_ms,
        0.0,
        cost.value * timing.reference_step_ms,
        ONE_K,
        f"the run's drafted step timed {own_ms:.3g} ms, below its plain step of {timing.reference_step_ms:.3g} ms "
        "(the two servers' speeds differ by more than drafting costs, as when c is rejected): the fallback c "
        f"{cost.value:.3g} ({cost.source}{': ' + cost.note if cost.note else ''}) per proposed token instead",
        drafter_always_runs,
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
    tpots = [
        (r.latency - r.ttft) / (r.output_tokens - 1) * 1000
        for r in (run.records if run else [])
        if r.success and r.output_tokens > 1
    ]
    if len(tpots) < 2:
        return {}
    return {"first_request_tpot_ms": tpots[0], "tpot_ms_others": tpots[1:]}
