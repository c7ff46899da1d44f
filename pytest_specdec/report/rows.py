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

import math
from typing import Any

from ..engines import engine_named
from ..engines.server_spec import SCHEDULE_KEY
from ..measure.fairness import as_rows as fairness_row
from ..measure.acceptance import ORACLE_LABEL
from ..measure.analysis import ANALYSIS_FIGURES, theory_figures
from ..verdict.metric_names import SIDES, SPEEDUP_METRICS, speedup_name
from ..measure.result import why_no_value
from ..measure.theory import as_cost_ratio, cost_per_million_tokens
from ..engines.server_spec import DEFAULT_ENGINE

HEADLINE_METRICS = SPEEDUP_METRICS
# Per side: the headline metrics, and how late the client sent its requests (a client-bound run shows here).
SIDE_METRICS = (*HEADLINE_METRICS, "median_dispatch_lag_ms", "p99_dispatch_lag_ms")
SPEEDUPS = tuple(speedup_name(metric) for metric in SPEEDUP_METRICS)
CSV_COLUMNS = (
    "test", "outcome", "regression", "model", "engine", "engine_version", "config", "method", "k", "workload",
    "access_pattern", "max_concurrency", "request_rate", "num_prompts", "repeats", *SPEEDUPS, "expected_speedup", "cost_ratio",
    "cost_ratio_source",
    "acceptance_rate", "acceptance_length", "match_rate", "match_basis", "numerical_ties",
    "request_acceptance_length_p10", "request_acceptance_length_p50", "best_k", "oracle_speedup", "per_step_source",
    "reference_request_goodput", "speculative_request_goodput", "reference_output_goodput",
    "speculative_output_goodput", "goodput_ratio", "capacity_ratio", "capacity_ratio_bound",
    "capacity_ratio_bound_direction",
    *(f"{side}_{metric}" for metric in SIDE_METRICS for side in SIDES),
    "reference_usd_per_1m_tokens", "speculative_usd_per_1m_tokens", "cost_operating_point",
)
COST_FIGURES = ("reference_usd_per_1m_tokens", "speculative_usd_per_1m_tokens")
# Where a cost per token is priced (`cost_operating_point`): the server's own maximum, never an offered load.
SATURATION, SLO_CAPACITY = "saturation", "slo_capacity"


def _number(value: Any) -> float | None:
    """JSON has no NaN or infinity: a figure that could not be computed is null."""
    if value is None or isinstance(value, bool):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def sd_label(spec) -> str:
    """The SD part of a spec's label, e.g. ``ngram k=4 prompt_lookup_max=4``, and the engine when it is not
    vLLM (``... on llamacpp``): one config on two engines is two rows, two heatmap panels."""
    label = spec.label()
    inner = label[label.index("[") + 1: label.rindex("]")] if "[" in label else label
    engine = getattr(spec, "engine", DEFAULT_ENGINE)
    return (inner + (f" {' '.join(spec.server_args)}" if spec.server_args else "")
            + (f" on {engine}" if engine != DEFAULT_ENGINE else ""))


def operating_point(pattern: dict) -> tuple[str | None, str]:
    """(SATURATION, what that is) for a closed loop; (None, why no cost) at an offered load.

    With ``request_rate`` inf the client keeps ``max_concurrency`` requests
    in flight (or sends every prompt at once): tok/s is what the server
    delivers at that concurrency.  At a finite rate below saturation both
    sides' tok/s is the offered load, and a cost per token would price the
    load, not the server.
    """
    rate = pattern.get("request_rate")
    if rate == "inf" or (isinstance(rate, (int, float)) and not isinstance(rate, bool) and math.isinf(rate)):
        concurrency = pattern.get("max_concurrency")
        loop = (f"{concurrency} request{'s' if concurrency != 1 else ''} in flight" if concurrency
                else f"all {pattern.get('num_prompts')} prompts at once")
        return SATURATION, f"closed loop, {loop} (request rate inf): the throughput the server delivers"
    offered = f"{rate:g} req/s" if isinstance(rate, (int, float)) else repr(rate)
    return None, (f"open loop at {offered} offered: below saturation both sides' tok/s is the offered load, so a "
                  "cost per token prices the load, not the server; price a closed loop (request_rate=inf) or an "
                  "SLO capacity search")


def row_for(test_id: str, spec, workload: dict, pattern: dict, *, outcome: str, result=None,
            regression: str | None = None, cost_ratio=None,
            gpu_usd_per_hour: float | None = None, detection: dict | None = None,
            regression_comparison: str | None = None, regression_not_compared=None,
            regression_figures: list | None = None, failure: str | None = None) -> dict[str, Any]:
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
    for key in (*SPEEDUPS, "expected_speedup", "acceptance_rate", "acceptance_length", "match_rate",
                "reference_usd_per_1m_tokens", "speculative_usd_per_1m_tokens", *ANALYSIS_FIGURES, "per_step_source"):
        row[key] = None
    row.update(per_position_acceptance=[], match_basis=None, numerical_ties=None, reference={}, speculative={}, reproduce={},
               unavailable={}, detection={}, client_bound=None, per_request=None, diagnosis=[], slo={},
               reference_request_goodput=None, speculative_request_goodput=None, reference_output_goodput=None,
               speculative_output_goodput=None, goodput_ratio=None, capacity=None,
               capacity_ratio=None, theory={}, oracle_speedup_label=None,
               cost_operating_point_detail=None, fairness_flags=[], confounds=[], engine_facts={}, warm_up={},
               speedup_range=None, groups={})
    row["detection"] = dict(detection or {})
    if result is None:
        return row
    if hasattr(result, "capacity_ratio"):
        return _capacity_row(row, result, gpu_usd_per_hour)

    row.update(fairness_row(result))  # engine confounds, cold servers, bounds physics sets (measure.fairness)
    row["engine_version"] = result.engine_version
    reference = {m: _number(result.reference_metric(m)) for m in SIDE_METRICS}
    speculative = {m: _number(result.speculative_metric(m)) for m in SIDE_METRICS}
    counters = result.counters
    # The theory with c measured from the run's step times (or a labelled fallback): nothing is resolved here.
    figures = theory_figures(result, fallback=cost_ratio)
    theory = figures.theory
    # Figures that could not be measured are null with their reason: never 0, never blank.
    unavailable = {name: why for name in (*SPEEDUPS, "acceptance_rate", "acceptance_length", "match_rate",
                                          *ANALYSIS_FIGURES) if (why := result.unavailable(name))}
    analysis = result.analysis()
    if theory is None or theory.expected_speedup is None:
        unavailable["expected_speedup"] = (theory.problem if theory else unavailable.get("acceptance_length")
                                           or "no draft length k in the speculative config")
    if SCHEDULE_KEY in config:  # vLLM's dynamic speculation: k changes with the batch size
        for name in ("expected_speedup", "best_k", "oracle_speedup"):
            unavailable[name] = ("a dynamic k schedule (num_speculative_tokens_per_batch_size): k changes with "
                                 "the batch, and this figure assumes one k for every step")
    row.update(
        cost_ratio=_number(figures.cost.value),
        cost_ratio_source=figures.cost.source,
        theory=figures.as_dict(),
        oracle_speedup_label=ORACLE_LABEL,
        client_bound=result.client_bound(),
        unavailable=unavailable,
        repeats=len(result.speculative_runs),
        **{speedup_name(metric): _number(result.speedup(metric)) for metric in SPEEDUP_METRICS},
        speedup_range=_range(result.repeat_speedups()),
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


def _acceptance_note(spec) -> str | None:
    """Why this row's acceptance is not comparable with vLLM's, as its engine says (None: it is)."""
    return engine_named(getattr(spec, "engine", DEFAULT_ENGINE)).acceptance_note(spec) if spec.speculative_config else None


# A failure message is kept whole up to here: the gate's table and comparison fit; a traceback's tail does not.
FAILURE_CHARS = 6000


def _cut(text: str | None) -> str | None:
    if not text:
        return None
    return text if len(text) <= FAILURE_CHARS else text[:FAILURE_CHARS] + f"\n[... {len(text) - FAILURE_CHARS} more characters]"


def _groups(result) -> dict[str, Any]:
    """Per category and per turn (measure.groups), where the requests carry one, with whether they differ."""
    from ..measure.groups import difference

    out = {}
    for grouping in ("category", "turn"):
        if groups := result.by(grouping):
            out[grouping] = {"figures": [g.as_dict() for g in groups], "difference": difference(groups)}
    return out


def _json_safe(value):
    """Nested figures with NaN and infinity as null (JSON has neither)."""
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _capacity_row(row: dict[str, Any], result, gpu_usd_per_hour: float | None) -> dict[str, Any]:
    """A capacity search's row: each side's capacity under the SLO, the ratio, every probe."""
    ratio = result.capacity_ratio()
    bound = result.capacity_ratio_bound() if hasattr(result, "capacity_ratio_bound") else None
    row.update(
        repeats=1,
        slo=dict(result.slo),
        capacity_ratio=_number(ratio),  # null for a bound: a bound is never a value
        capacity_ratio_bound=bound[1] if bound else None,
        capacity_ratio_bound_direction=bound[0] if bound else None,
        capacity={
            "over": result.pattern.get("search"),
            "percentile": result.percentile,
            "note": result.ratio_note(),
            # the ratio as an estimate (with the interval the brackets allow) or a bound with its direction
            "ratio": _json_safe(result.as_dict()["ratio"]) if hasattr(result, "as_dict") else None,
            "objectives": _json_safe(getattr(result, "objectives", {})),  # as given, the ms they resolved to, the unloaded median
            "reference": _json_safe(result.reference.as_dict()),
            "speculative": _json_safe(result.speculative.as_dict()),
        },
        reproduce=dict(result.reproduce),
    )
    if why := result.unavailable("capacity_ratio"):
        row["unavailable"]["capacity_ratio"] = why
    if gpu_usd_per_hour is not None:
        # Priced at each side's own SLO capacity: the most load it carries within the objectives.
        for side in ("reference", "speculative"):
            row[f"{side}_usd_per_1m_tokens"] = result.cost_per_million(side, gpu_usd_per_hour)
            if row[f"{side}_usd_per_1m_tokens"] is None:
                row["unavailable"][f"{side}_usd_per_1m_tokens"] = f"the {side} side reached no SLO capacity to price"
        row.update(cost_operating_point=SLO_CAPACITY, cost_operating_point_detail=(
            "each side at its SLO capacity: the highest load probed at which every objective held"))
    return row


def rows_for_test(test_id: str, plan, test, outcome: str, *, resolve=None,
                  gpu_usd_per_hour: float | None = None, failure: str | None = None) -> list[dict[str, Any]]:
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
    comparison = getattr(gate, "comparison", None)
    results = test.results if test is not None else []
    if not results and outcome == "passed":
        return []  # a test that used servers without measuring SD has nothing to report
    # A result's pattern says what ran (a sweep's level); the plan's fills in what it leaves out.
    return [row_for(test_id, plan.spec, result.workload if result else workload,
                    {**pattern, **result.pattern} if result else pattern, outcome=outcome, result=result,
                    regression=regression, gpu_usd_per_hour=gpu_usd_per_hour, detection=detection,
                    regression_comparison=comparison,
                    regression_not_compared=getattr(gate, "not_compared", None) if regression else None,
                    regression_figures=getattr(gate, "figures", None) if regression else None,
                    failure=_cut(failure) if outcome in ("failed", "error") else None)
            for result in results or [None]]


def _match_basis(result) -> str | None:
    """What the output match compared: "token ids" (exact) or "text" (a server sent no ids); None if nothing."""
    bases = {o.basis for o in (getattr(result, "outputs_per_repeat", None) or [result.outputs]) if o.basis}
    return "text" if "text" in bases else bases.pop() if bases else None


def _numerical_ties(result) -> int | None:
    """Divergences at a reference near-tie; None when no logprobs were asked for (unknown)."""
    from ..verdict.assertions import classify_divergences

    divergences = classify_divergences(result)
    if any(d.tie is None for d in divergences):
        return None
    return sum(1 for d in divergences if d.tie)


def _range(values) -> list[float] | None:
    """[lowest, highest] of the repeats' throughput speedups: the run-to-run spread beside the median."""
    finite = [v for v in (_number(x) for x in values) if v is not None]
    return [min(finite), max(finite)] if len(finite) > 1 else None
