"""What a specdec session measured, as rows people can look at.

One row per test: the SD configuration, its traffic, the headline ratios, the
theory next to them, and the verdicts.  Rows are plain JSON-able dicts so
they cross pytest-xdist's wire unchanged and a report can be rebuilt from
``results.json`` alone (`tables` renders them, `files` writes them).
"""

from __future__ import annotations

import math
from typing import Any

from ..measure.analysis import ANALYSIS_FIGURES
from ..measure.derived import SIDES, SPEEDUP_METRICS, speedup_name
from ..measure.result import why_no_value
from ..measure.theory import cost_per_million_tokens, cost_ratio_for, theory_for

HEADLINE_METRICS = SPEEDUP_METRICS
# Per side: the headline metrics, and how late the client sent its requests (a client-bound run shows here).
SIDE_METRICS = (*HEADLINE_METRICS, "median_dispatch_lag_ms", "p99_dispatch_lag_ms")
SPEEDUPS = tuple(speedup_name(metric) for metric in SPEEDUP_METRICS)
CSV_COLUMNS = (
    "test", "outcome", "regression", "model", "config", "method", "k", "workload", "access_pattern",
    "max_concurrency", "request_rate", "num_prompts", "repeats", *SPEEDUPS, "expected_speedup", "cost_ratio",
    "acceptance_rate", "acceptance_length", "match_rate", "match_basis", "numerical_ties",
    "request_acceptance_length_p10", "request_acceptance_length_p50", "best_k", "oracle_speedup", "per_step_source",
    "reference_request_goodput", "speculative_request_goodput", "reference_output_goodput",
    "speculative_output_goodput", "goodput_ratio", "capacity_ratio",
    *(f"{side}_{metric}" for metric in SIDE_METRICS for side in SIDES),
    "reference_usd_per_1m_tokens", "speculative_usd_per_1m_tokens",
)


def _number(value: Any) -> float | None:
    """JSON has no NaN or infinity: a figure that could not be computed is null."""
    if value is None or isinstance(value, bool):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def sd_label(spec) -> str:
    """The SD part of a spec's label, e.g. ``ngram k=4 prompt_lookup_max=4``."""
    label = spec.label()
    inner = label[label.index("[") + 1: label.rindex("]")] if "[" in label else label
    return inner + (f" {' '.join(spec.server_args)}" if spec.server_args else "")


def row_for(test_id: str, spec, workload: dict, pattern: dict, *, outcome: str, result=None,
            regression: str | None = None, cost_ratio: float | None = None,
            gpu_usd_per_hour: float | None = None, detection: dict | None = None) -> dict[str, Any]:
    """One report row; `result` is None when the test ended before measuring."""
    config = spec.speculative_config or {}
    k = config.get("num_speculative_tokens")
    row: dict[str, Any] = {
        "test": test_id,
        "outcome": outcome,
        "regression": regression or "not checked",
        "model": spec.model,
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
        "cost_ratio": _number(cost_ratio),
    }
    for key in (*SPEEDUPS, "expected_speedup", "acceptance_rate", "acceptance_length", "match_rate",
                "reference_usd_per_1m_tokens", "speculative_usd_per_1m_tokens", *ANALYSIS_FIGURES, "per_step_source"):
        row[key] = None
    row.update(per_position_acceptance=[], match_basis=None, numerical_ties=None, reference={}, speculative={}, reproduce={},
               unavailable={}, detection={}, client_bound=None, per_request=None, diagnosis=[], slo={},
               reference_request_goodput=None, speculative_request_goodput=None, reference_output_goodput=None,
               speculative_output_goodput=None, goodput_ratio=None, capacity=None,
               capacity_ratio=None)
    row["detection"] = dict(detection or {})
    if result is None:
        return row
    if hasattr(result, "capacity_ratio"):
        return _capacity_row(row, result, gpu_usd_per_hour)

    reference = {m: _number(result.reference_metric(m)) for m in SIDE_METRICS}
    speculative = {m: _number(result.speculative_metric(m)) for m in SIDE_METRICS}
    counters = result.counters
    theory = theory_for(result.acceptance_length if counters.present else None, row["k"], cost_ratio,
                        result.speedup())
    # Figures that could not be measured are null with their reason: never 0, never blank.
    unavailable = {name: why for name in (*SPEEDUPS, "acceptance_rate", "acceptance_length", "match_rate",
                                          *ANALYSIS_FIGURES) if (why := result.unavailable(name))}
    analysis = result.analysis()
    if theory is None or theory.expected_speedup is None:
        unavailable["expected_speedup"] = (theory.problem if theory else unavailable.get("acceptance_length")
                                           or "no draft length k in the speculative config")
    row.update(
        client_bound=result.client_bound(),
        unavailable=unavailable,
        repeats=len(result.speculative_runs),
        **{speedup_name(metric): _number(result.speedup(metric)) for metric in SPEEDUP_METRICS},
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
    if gpu_usd_per_hour is not None:
        for side, metrics in (("reference", reference), ("speculative", speculative)):
            tok_s = metrics["output_throughput"]
            row[f"{side}_usd_per_1m_tokens"] = (cost_per_million_tokens(tok_s, gpu_usd_per_hour)
                                               if tok_s else None)
    return row


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
    row.update(
        repeats=1,
        slo=dict(result.slo),
        capacity_ratio=_number(ratio),
        capacity={
            "over": result.pattern.get("search"),
            "percentile": result.percentile,
            "note": result.ratio_note(),
            "reference": _json_safe(result.reference.as_dict()),
            "speculative": _json_safe(result.speculative.as_dict()),
        },
        reproduce=dict(result.reproduce),
    )
    if why := result.unavailable("capacity_ratio"):
        row["unavailable"]["capacity_ratio"] = why
    if gpu_usd_per_hour is not None:
        for side in ("reference", "speculative"):
            row[f"{side}_usd_per_1m_tokens"] = result.cost_per_million(side, gpu_usd_per_hour)
    return row


def rows_for_test(test_id: str, plan, test, outcome: str, *, resolve=None,
                  gpu_usd_per_hour: float | None = None) -> list[dict[str, Any]]:
    """One row per result a test measured (one without figures if it failed before measuring).

    `plan` is the test's collection plan (spec, workload, pattern) and `test`
    its `SpecDecTest` (None when the test ended before the fixture was made).
    """
    workload = plan.workload.describe() if plan.workload else {}
    pattern = plan.pattern.describe() if plan.pattern else {}
    cost_ratio = cost_ratio_for(plan.spec, resolve)
    gate = test.gate if test is not None else None
    regression = gate.outcome if gate is not None else None
    detection = {metric: found.as_dict() for metric, found in getattr(gate, "detections", {}).items()}
    results = test.results if test is not None else []
    if not results and outcome == "passed":
        return []  # a test that used servers without measuring SD has nothing to report
    return [row_for(test_id, plan.spec, result.workload if result else workload,
                    result.pattern if result else pattern, outcome=outcome, result=result, regression=regression,
                    cost_ratio=cost_ratio, gpu_usd_per_hour=gpu_usd_per_hour, detection=detection)
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


