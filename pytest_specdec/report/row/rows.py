"""What a specdec session measured, as rows people can look at.

One row per test: the SD configuration, its traffic, the headline ratios, the
theory next to them, and the verdicts.  Rows are plain JSON-able dicts so
they cross pytest-xdist's wire unchanged and a report can be rebuilt from
``results.json`` alone (`tables` renders them, `files` writes them).

Rows are built inside pytest's report hook, so they use only what the result
already carries: its step times (c is measured from them), the estimate made
at measure time, the method.  Nothing here resolves, downloads or converts a
model.
"""

from __future__ import annotations

from .sampling import sampling_cells
from ..builds import builds_cell

from dataclasses import replace
from typing import Any

from ...engines.server_spec import SCHEDULE_KEY
from ...measure.fairness import as_rows as fairness_row
from ...measure.mechanism import mechanism_row
from .decisions import decision_cells, outcome_with_decisions
from ...analysis.predictions import oracle_label
from ...analysis.inside_acceptance import ANALYSIS_FIGURES, theory_figures
from ...analysis.energy_figures import energy_figures
from ...analysis.series_figures import series_figures
from ...verdict.metric_names import SIDES, SPEEDUP_METRICS, speedup_name
from ...verdict.learned_drift import own_variance
from ...measure.result import why_no_value
from ...analysis.theory import as_cost_ratio, cost_per_million_tokens
from ...engines.server_spec import DEFAULT_ENGINE
from .parts import (  # re-exported: these lived here
    SATURATION as SATURATION,
    SLO_CAPACITY as SLO_CAPACITY,
    _number as _number,
    sd_label as sd_label,
    operating_point as operating_point,
    _acceptance_note as _acceptance_note,
    FAILURE_CHARS as FAILURE_CHARS,
    _cut as _cut,
    _groups as _groups,
    _json_safe as _json_safe,
    _capacity_row as _capacity_row,
    _match_basis as _match_basis,
    _numerical_ties as _numerical_ties,
    _range as _range,
)

HEADLINE_METRICS = SPEEDUP_METRICS
# Per side: the headline metrics, and how late the client sent its requests (a client-bound run shows here).
SIDE_METRICS = (*HEADLINE_METRICS, "median_dispatch_lag_ms", "p99_dispatch_lag_ms")
SPEEDUPS = tuple(speedup_name(metric) for metric in SPEEDUP_METRICS)
CSV_COLUMNS = (
    "test",
    "outcome",
    "regression",
    "model",
    "engine",
    "engine_version",
    "config",
    "method",
    "k",
    "workload",
    "access_pattern",
    "max_concurrency",
    "request_rate",
    "num_prompts",
    "repeats",
    *SPEEDUPS,
    "expected_speedup",
    "cost_ratio",
    "cost_ratio_source",
    "acceptance_rate",
    "acceptance_length",
    "match_rate",
    "match_basis",
    "numerical_ties",
    "request_acceptance_length_p10",
    "request_acceptance_length_p50",
    "best_k",
    "oracle_speedup",
    "per_step_source",
    "reference_request_goodput",
    "speculative_request_goodput",
    "reference_output_goodput",
    "speculative_output_goodput",
    "goodput_ratio",
    "capacity_ratio",
    "capacity_ratio_bound",
    "capacity_ratio_bound_direction",
    *(f"{side}_{metric}" for metric in SIDE_METRICS for side in SIDES),
    "reference_usd_per_1m_tokens",
    "speculative_usd_per_1m_tokens",
    "cost_operating_point",
)
COST_FIGURES = ("reference_usd_per_1m_tokens", "speculative_usd_per_1m_tokens")


def row_for(
    test_id: str,
    spec,
    workload: dict,
    pattern: dict,
    *,
    outcome: str,
    result=None,
    regression: str | None = None,
    cost_ratio=None,
    gpu_usd_per_hour: float | None = None,
    detection: dict | None = None,
    drift: dict | None = None,
    alarm_budget: dict | None = None,
    regression_comparison: str | None = None,
    regression_not_compared=None,
    regression_figures: list | None = None,
    failure: str | None = None,
) -> dict[str, Any]:
    """One report row; `result` is None when the test ended before measuring.

    `cost_ratio` (a number or `theory.CostRatio`) stands in for c where the
    result's step times cannot measure it, before the result's own estimate.
    """
    config = spec.speculative_config or {}
    k = config.get("num_speculative_tokens")
    row: dict[str, Any] = {
        "test": test_id,
        "outcome": outcome,
        "regression": regression or "not checked",
        "regression_comparison": regression_comparison,
        "regression_not_compared": dict(regression_not_compared or {}),
        "regression_figures": list(regression_figures or []),
        "failure": failure,
        "acceptance_note": _acceptance_note(spec),
        "model": spec.model,
        "engine": getattr(spec, "engine", DEFAULT_ENGINE),
        "engine_version": None,
        "target": spec.target,
        "config": sd_label(spec),
        "method": config.get("method"),
        "k": k if isinstance(k, int) else None,
        "speculative_config": dict(config),
        "server_args": list(spec.server_args),
        "workload": workload.get("name"),
        "access_pattern": pattern.get("name"),
        "max_concurrency": pattern.get("max_concurrency"),
        "request_rate": pattern.get("request_rate"),
        "num_prompts": pattern.get("num_prompts"),
        "repeats": 0,
        "cost_ratio": None if cost_ratio is None else _number(as_cost_ratio(cost_ratio).value),
        "cost_ratio_source": None if cost_ratio is None else as_cost_ratio(cost_ratio).source,
        "cost_operating_point": None,
    }
    for key in (
        *SPEEDUPS,
        "expected_speedup",
        "acceptance_rate",
        "acceptance_length",
        "match_rate",
        "reference_usd_per_1m_tokens",
        "speculative_usd_per_1m_tokens",
        *ANALYSIS_FIGURES,
        "per_step_source",
    ):
        row[key] = None
    row.update(
        per_position_acceptance=[],
        match_basis=None,
        numerical_ties=None,
        reference={},
        speculative={},
        reproduce={},
        unavailable={},
        detection={},
        drift={},
        client_bound=None,
        per_request=None,
        diagnosis=[],
        slo={},
        reference_request_goodput=None,
        speculative_request_goodput=None,
        reference_output_goodput=None,
        speculative_output_goodput=None,
        goodput_ratio=None,
        capacity=None,
        capacity_ratio=None,
        theory={},
        oracle_speedup_label=None,
        cost_operating_point_detail=None,
        fairness_flags=[],
        earlier_measurements=[],
        confounds=[],
        sd_costs=[],
        mechanism=None,
        engine_facts={},
        warm_up={},
        speedup_range=None,
        speedup_own_variance=None,
        groups={},
        builds=None,
        energy=None,
        server_series=None,
        sampling={"temperature": 0.0},
        stop="length",
        endpoint="completions",
        output_lengths=None,
        distribution=None,
        constraint=None,
        forced_sweep=None,
        frontier=None,
    )
    row["detection"] = dict(detection or {})
    row["drift"] = dict(drift or {})
    row["alarm_budget"] = alarm_budget  # the session's false-alarm budget (verdict.alarm_budget), for any merge
    if result is None:
        return row
    if hasattr(result, "capacity_ratio"):
        return _capacity_row(row, result, gpu_usd_per_hour)

    row["builds"] = builds_cell(result, regression)  # --specdec-baseline-from build:PATH (report.builds)
    row.update(sampling_cells(result))  # endpoint, temperature, stop rule, output lengths, distribution test
    row["constraint"] = result.constraint_figures()  # validity per side, constrained vs free (measure.validity)
    row["energy"] = energy_figures(result)  # per output token, both sides, where the hardware counts it
    row["server_series"] = series_figures(result)  # KV usage, queue, preemptions per side, and the flags
    row.update(fairness_row(result))  # engine confounds, cold servers, bounds physics sets (measure.fairness)
    row["mechanism"] = mechanism_row(result)  # on request: SD against a reference on its engine path
    row.update(decision_cells(result))  # runs a side, why measuring stopped, content and timing spread
    row["engine_version"] = result.engine_version
    # The sweep this length is one point of (measure.forced_sweep).
    row["forced_sweep"] = result.forced_sweep.as_dict() if result.forced_sweep is not None else None
    # The concurrency sweep's two frontiers this level is one point of (analysis.frontier).
    row["frontier"] = result.frontier.as_dict() if result.frontier is not None else None
    reference = {m: _number(result.reference_metric(m)) for m in SIDE_METRICS}
    speculative = {m: _number(result.speculative_metric(m)) for m in SIDE_METRICS}
    counters = result.counters
    # The theory with c measured from the run's step times (or a labelled fallback): nothing is resolved here.
    figures = theory_figures(result, fallback=cost_ratio)
    theory = figures.theory
    # Figures that could not be measured are null with their reason: never 0, never blank.
    unavailable = {
        name: why
        for name in (*SPEEDUPS, "acceptance_rate", "acceptance_length", "match_rate", *ANALYSIS_FIGURES)
        if (why := result.unavailable(name))
    }
    analysis = result.analysis()
    if theory is None or theory.expected_speedup is None:
        unavailable["expected_speedup"] = (
            theory.problem
            if theory
            else unavailable.get("acceptance_length") or "no draft length k in the speculative config"
        )
    if SCHEDULE_KEY in config:  # vLLM's dynamic speculation: k changes with the batch size
        for name in ("expected_speedup", "best_k", "oracle_speedup"):
            unavailable[name] = (
                "a dynamic k schedule (num_speculative_tokens_per_batch_size): k changes with "
                "the batch, and this figure assumes one k for every step"
            )
    row.update(
        cost_ratio=_number(figures.cost.value),
        cost_ratio_source=figures.cost.source,
        theory=figures.as_dict(),
        oracle_speedup_label=analysis.oracle or oracle_label(config.get("num_speculative_tokens")),
        client_bound=result.client_bound(),
        unavailable=unavailable,
        repeats=len(result.speculative_runs),
        **{speedup_name(metric): _number(result.speedup(metric)) for metric in SPEEDUP_METRICS},
        speedup_range=_range(result.repeat_speedups()),
        speedup_own_variance=_own_variance(result),
        expected_speedup=_number(theory.expected_speedup) if theory else None,
        acceptance_rate=_number(result.acceptance_rate) if counters.present else None,
        acceptance_length=_number(result.acceptance_length) if counters.present else None,
        per_position_acceptance=[_number(v) for v in result.per_position_acceptance] if counters.present else [],
        match_rate=_number(result.match_rate),
        match_basis=_match_basis(result),
        numerical_ties=_numerical_ties(result),
        reference=reference,
        speculative=speculative,
        reproduce=dict(result.reproduce),
        **{name: _number(analysis.figure(name)) for name in ANALYSIS_FIGURES if name != "best_k"},
        best_k=analysis.best_k,
        per_step_source=analysis.source,
        per_request=analysis.as_dict(),
        diagnosis=[{"name": cause.name, "figure": cause.figure} for cause in result.diagnosis()],
        slo=dict(result.slo),
        reference_request_goodput=_number(result.goodput("reference")),
        speculative_request_goodput=_number(result.goodput("speculative")),
        reference_output_goodput=_number(result.goodput("reference", unit="tokens")),
        speculative_output_goodput=_number(result.goodput("speculative", unit="tokens")),
        goodput_ratio=_number(result.goodput_ratio()),
        groups=_groups(result),
    )
    # An unavailable figure is null whatever number was computed for it (a client-bound run's speedups).
    for name in unavailable:
        if name in row and not isinstance(row[name], (dict, list)):
            row[name] = None
    # A side's figure without a value (TPOT of one-token outputs) says why, in the CSV too: never blank.
    for side, metrics in (("reference", reference), ("speculative", speculative)):
        for metric, value in metrics.items():
            if value is None:
                row["unavailable"][f"{side}_{metric}"] = why_no_value(metric)
    if result.slo and (why := result.unavailable("goodput_ratio")):
        row["unavailable"]["goodput_ratio"] = why
    if cost_ratio_why := (figures.cost.note if figures.cost.value is None else None):
        row["unavailable"]["cost_ratio"] = cost_ratio_why
    if gpu_usd_per_hour is not None:
        point, words = operating_point(pattern)
        for side, metrics in (("reference", reference), ("speculative", speculative)):
            tok_s = metrics["output_throughput"]
            if point is None:
                row["unavailable"][f"{side}_usd_per_1m_tokens"] = words
            elif tok_s:
                row[f"{side}_usd_per_1m_tokens"] = cost_per_million_tokens(tok_s, gpu_usd_per_hour)
        row.update(cost_operating_point=point, cost_operating_point_detail=words if point else None)
    return row


def _own_variance(result) -> float | None:
    """The log variance this session's throughput speedup carries from its own runs (verdict.learned_drift
    .own_variance), which a results history stores beside the value; None where it cannot be read."""
    if not hasattr(result, "speedup_evidence"):
        return None
    return _number(own_variance(result.speedup_evidence("output_throughput")))


def _spec_ran(planned, result):
    """The plan's spec with the speculative config its result ran: a forced-acceptance sweep runs each length
    of the plan's config (a capacity result, or a test that ended before measuring, ran the plan's)."""
    ran = getattr(getattr(result, "spec", None), "speculative_config", None)
    if ran is None or ran == planned.speculative_config:
        return planned
    return replace(planned, speculative_config=ran)


def rows_for_test(
    test_id: str,
    plan,
    test,
    outcome: str,
    *,
    resolve=None,
    gpu_usd_per_hour: float | None = None,
    failure: str | None = None,
) -> list[dict[str, Any]]:
    """One row per result a test measured (one without figures if it failed before measuring).

    `plan` is the test's collection plan (spec, workload, pattern) and `test`
    its `SpecDecTest` (None when the test ended before the fixture was made).
    `resolve` is accepted for callers and not used: this runs inside pytest's
    report hook, where resolving a model may convert it or raise (the cost
    ratio was estimated at measure time, and is measured from the result).
    `failure` is the message the test failed with, kept (cut to its first
    FAILURE_CHARS characters) so a report page can say why.
    """
    workload = plan.workload.describe() if plan.workload else {}
    pattern = plan.pattern.describe() if plan.pattern else {}
    gate = test.gate if test is not None else None
    regression = gate.outcome if gate is not None else None
    detection = {metric: found.as_dict() for metric, found in getattr(gate, "detections", {}).items()}
    drift = {figure: used.as_dict() for figure, used in getattr(gate, "drifts", {}).items()}
    comparison = getattr(gate, "comparison", None)
    results = test.results if test is not None else []
    if not results and outcome == "passed":
        return []  # a test that used servers without measuring SD has nothing to report
    # A result's pattern says what ran (a sweep's level); the plan's fills in what it leaves out.
    return [
        row_for(
            test_id,
            _spec_ran(plan.spec, result),
            result.workload if result else workload,
            {**pattern, **result.pattern} if result else pattern,
            outcome=outcome_with_decisions(outcome, result),
            result=result,
            regression=regression,
            gpu_usd_per_hour=gpu_usd_per_hour,
            detection=detection,
            drift=drift,
            alarm_budget=getattr(test, "alarm_budget", None),
            regression_comparison=comparison,
            regression_not_compared=getattr(gate, "not_compared", None) if regression else None,
            regression_figures=getattr(gate, "figures", None) if regression else None,
            failure=_cut(failure) if outcome in ("failed", "error") else None,
        )
        for result in results or [None]
    ]
