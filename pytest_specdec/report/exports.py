"""Results as JUnit XML properties and pytest-benchmark entries.

Dashboards that chart pytest-benchmark JSON across commits, and CI systems
that read JUnit XML, get the SD figures without new tooling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..analysis.energy_figures import energy_figures
from ..measure.result import why_no_value
from ..measure.validity import constraint_properties


def junit_properties(result) -> dict:
    """Key figures as JUnit XML properties (and pytest-benchmark extra info)."""
    props = {
        "specdec_config": result.spec.label(),
        "specdec_workload": result.workload.get("name"),
        "specdec_pattern": result.pattern.get("name"),
    }
    for key, value in result.derived().items():
        props[f"specdec_{key}"] = _figure(value, 4, lambda: result.unavailable(key))
    if hasattr(result, "analysis"):  # whether best_k, the oracle and per-request figures are the server's or estimated
        from ..analysis.inside_acceptance import cost_ratio_of

        props["specdec_per_step_source"] = result.analysis().source or f"unavailable: {result.analysis().problem}"
        props["specdec_oracle_speedup_label"] = result.analysis().oracle
        cost = cost_ratio_of(result)  # c measured from the run's step times, else its labelled fallback
        props["specdec_cost_ratio"] = _figure(cost.value, 4, lambda: cost.note)
        props["specdec_cost_ratio_source"] = cost.source
        energy = energy_figures(result)  # SD's energy per output token over the reference's
        props["specdec_energy_ratio"] = _figure(energy["ratio"], 4, lambda: energy["unavailable"])
    if hasattr(result, "capacity_ratio_bound"):  # a bound has its own fields, never the value's
        bound = result.capacity_ratio_bound()
        props["specdec_capacity_ratio_bound"] = round(bound[1], 4) if bound else "none: the ratio is not a bound"
        props["specdec_capacity_ratio_bound_direction"] = bound[0] if bound else "none"
    if hasattr(result, "constraint_figures") and (constrained := result.constraint_figures()):
        props.update({f"specdec_{k}": v for k, v in constraint_properties(constrained).items()})
    gate = getattr(result, "gate", None)
    if getattr(gate, "outcome", None):  # the baseline check's verdict, "not compared" apart from "passed"
        props["specdec_regression"] = gate.outcome
        if gate.not_compared:
            props["specdec_regression_not_compared"] = "; ".join(f"{m}: {why}" for m, why in gate.not_compared.items())
    if hasattr(result, "reference_metric"):  # a capacity search has no single run per side
        for key in ("output_throughput", "median_tpot_ms", "median_ttft_ms"):
            props[f"specdec_reference_{key}"] = _figure(result.reference_metric(key), 3, lambda: why_no_value(key))
            props[f"specdec_speculative_{key}"] = _figure(result.speculative_metric(key), 3, lambda: why_no_value(key))
    return props


def _figure(value: float, digits: int, why) -> float | str:
    """A number, or "unavailable: <why>": never "nan", which dashboards chart as a value or drop silently."""
    if isinstance(value, (int, float)) and math.isfinite(value):
        return round(value, digits)
    return f"unavailable: {why() or 'not measured'}"


@dataclass(frozen=True)
class TestIdentity:
    """What pytest-benchmark records of a test, as plain values (the plugin reads them off pytest's node)."""

    name: str
    nodeid: str
    param: str | None = None
    params: dict[str, str] | None = None


class BenchmarkFixtureView:
    """The attributes pytest-benchmark reads from its fixture when it stores a result."""

    def __init__(self, test: TestIdentity, extra_info):
        self.name, self.fullname, self.group = test.name, test.nodeid, "specdec"
        self.param, self.params = test.param, test.params
        self.extra_info = extra_info
        self.cprofile_stats = None
        self.has_error = False


def benchmark_entry(benchmark_session, test: TestIdentity, result) -> None:
    """Add the SD run to pytest-benchmark's session (if any) so --benchmark-json carries it.

    Dashboards that chart pytest-benchmark JSON across commits then get the
    SD figures as extra_info, with each SD repeat's duration as the timing.
    """
    if benchmark_session is None or getattr(benchmark_session, "disabled", False):
        return
    if not (benchmark_session.json or benchmark_session.save or benchmark_session.autosave):
        return  # nobody asked for benchmark files: keep pytest-benchmark's table out of the report
    from pytest_benchmark.stats import Metadata

    metadata = Metadata(BenchmarkFixtureView(test, junit_properties(result)), iterations=1, options={})
    for run in result.speculative_runs:
        metadata.stats.update(run.metrics.duration_s)
    benchmark_session.benchmarks.append(metadata)


def export_last_result(results, test: TestIdentity, user_properties: list, benchmark_session=None) -> None:
    """A test's last result as JUnit properties (appended to `user_properties`) and a pytest-benchmark
    entry in `benchmark_session` (pytest-benchmark's session object, when that plugin runs)."""
    for result in results[-1:]:
        user_properties.extend(junit_properties(result).items())
        benchmark_entry(benchmark_session, test, result)
