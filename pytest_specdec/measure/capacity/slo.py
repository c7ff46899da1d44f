"""SLO capacity on real servers: how much load each side carries within the test's latency objectives.

`measure_capacity` runs the search of `load.capacity` (bracket, bisect, probe
the boundary again) for the reference, then for SD, on the servers of the
test's target. Each probe sends the test's prompts at one load (a request
rate, or a concurrency) with arrivals of its own, seeded by the load, so the
reference and SD probing the same load see the same schedule; SD's search
prefers the loads the reference probed. A probe holds when every SLO
metric's percentile (default p99) is within its objective, no request failed,
the client kept pace and the queue did not keep growing (load/saturation.py).

A probe where the client did not keep pace (its p99 dispatch lag over the
session's limit) measured the client, not the server: a stall of the test
process (a noisy neighbour, a paused VM) makes one run client-bound while the
server is idle.  Such a probe is run again, up to `CLIENT_BOUND_ATTEMPTS`
runs in all; a load still client-bound is reported as not offered and counts
neither way, so a client stall never reads as the server missing its SLO.

Objectives may be relative (``tpot_x=2``: twice the reference's unloaded
median TPOT). An absolute number of milliseconds holds on the machine it was
tuned on only: a faster box holds it at every load and the search never
brackets. Relative ones are resolved to milliseconds once, before probing,
from the reference's run of this workload one request at a time (see
`unloaded_reference`), and both sides are held to the same limits.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field
from typing import Any, Sequence

from ...engines.server_spec import ServerSpec
from .search import Capacity, CapacityRatio, ratio_of
from ...analysis.goodput import describe_objectives, resolve_slo
from .sides import (  # noqa: F401 (CLIENT_BOUND_ATTEMPTS, UNLOADED, unloaded_reference: importable here)
    CLIENT_BOUND_ATTEMPTS,
    UNLOADED,
    probe_seed,
    reference_job,
    search_side,
    unloaded_reference,
)
from ..result import Run
from ...analysis.theory import cost_per_million_tokens

CAPACITY_METRICS = ("capacity_ratio",)


def _json_safe(value: Any) -> Any:
    # JSON has no NaN or infinity: a figure that could not be measured (or an open bracket) is null.
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass
class CapacityResult:
    """The capacity of the reference and of SD under one SLO, with every probe.

    ``slo`` holds the limits both sides were held to, in ms; ``objectives``
    how each was given and resolved (``{"tpot": {"objective": "tpot_x=3",
    "ms": 99.3, "multiple": 3.0, "unloaded_p50_ms": 33.1}}``), and
    ``unloaded_ms`` the reference's unloaded medians they came from (empty
    when every objective was absolute).
    """

    spec: ServerSpec
    workload: dict[str, Any]
    pattern: dict[str, Any]
    slo: dict[str, float]
    percentile: float
    reference: Capacity
    speculative: Capacity
    reference_runs: dict[float, Run] = field(default_factory=dict)  # load -> the probe's last run
    speculative_runs_by_load: dict[float, Run] = field(default_factory=dict)
    seed: int = 0
    reproduce: dict[str, str] = field(default_factory=dict)
    server_log: str = ""
    gate: Any = field(default=None, repr=False, compare=False)
    objectives: dict[str, dict] = field(default_factory=dict)
    unloaded_ms: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.objectives:
            self.objectives = resolve_slo(self.slo)[1]

    @property
    def speculative_runs(self) -> list[Run]:
        return list(self.speculative_runs_by_load.values())

    def ratio(self) -> CapacityRatio:
        """SD's capacity over the reference's: an estimate, a bound, or unknown (`load.capacity.CapacityRatio`)."""
        return ratio_of(self.reference, self.speculative)

    def capacity_ratio(self) -> float:
        """The ratio's estimate; NaN where it is a bound or unknown (a bound is not a value: capacity_ratio_bound)."""
        ratio = self.ratio()
        return ratio.value if ratio.kind == "estimate" else math.nan

    def capacity_ratio_bound(self) -> tuple[str, float] | None:
        """``(">=" or "<=", bound)`` where a side was not bracketed, else None."""
        ratio = self.ratio()
        return {"lower_bound": (">=", ratio.value), "upper_bound": ("<=", ratio.value)}.get(ratio.kind)

    def ratio_note(self) -> str | None:
        """Why the ratio is a bound or unknown, and any non-monotone side (None: a plain estimate)."""
        return "; ".join(self.ratio().notes) or None

    def unavailable(self, metric: str) -> str | None:
        if metric == "capacity_ratio":
            # A bound is not a measurement: a baseline must neither record one nor compare one.
            ratio = self.ratio()
            return None if ratio.kind == "estimate" else f"the ratio is {ratio.describe()}"
        return f"{metric} is not measured by an SLO capacity search (it gates capacity_ratio)"

    def output_throughput_at_capacity(self, side: str) -> float:
        """Output tok/s of the probe at `side`'s capacity (NaN when not reached)."""
        capacity = self.speculative if side == "speculative" else self.reference
        runs = self.speculative_runs_by_load if side == "speculative" else self.reference_runs
        run = runs.get(capacity.capacity) if capacity.capacity is not None else None
        return run.metrics.output_throughput if run is not None else math.nan

    def cost_per_million(self, side: str, usd_per_hour: float) -> float | None:
        """USD per 1M output tokens at `side`'s capacity (None when not reached)."""
        tok_s = self.output_throughput_at_capacity(side)
        return cost_per_million_tokens(tok_s, usd_per_hour) if math.isfinite(tok_s) and tok_s > 0 else None

    def derived(self) -> dict[str, float]:
        """The figures exports carry: each side's capacity, the ratio, and the limits with what they came from."""
        figures = {
            "capacity_ratio": self.capacity_ratio(),
            **{
                f"{side}_capacity": math.nan if cap.capacity is None else float(cap.capacity)
                for side, cap in (("reference", self.reference), ("speculative", self.speculative))
            },
        }
        for key, record in self.objectives.items():
            figures[f"slo_{key}_ms"] = record["ms"]
            if "multiple" in record:
                figures[f"slo_{key}_x"] = record["multiple"]
                figures[f"unloaded_reference_{key}_ms"] = record["unloaded_p50_ms"]
        return figures

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe summary: the objectives as given and resolved, both capacities and the ratio."""
        ratio = self.ratio()
        return _json_safe(
            {
                "slo": self.slo,
                "percentile": self.percentile,
                "objectives": self.objectives,
                "unloaded_reference_ms": self.unloaded_ms,
                "reference": self.reference.as_dict(),
                "speculative": self.speculative.as_dict(),
                "ratio": {
                    "value": ratio.value,
                    "kind": ratio.kind,
                    "low": ratio.low,
                    "high": ratio.high,
                    "notes": ratio.notes,
                },
                "describe": self.describe(),
            }
        )

    def repeat_seeds(self) -> list[int]:
        return [self.seed]

    def repeats(self) -> list[dict[str, dict[str, float]]]:
        """One entry, as baselines store figures: each side's capacity and the ratio."""
        sides = {
            side: {
                "capacity": math.nan if cap.capacity is None else float(cap.capacity),
                "output_throughput_at_capacity": self.output_throughput_at_capacity(side),
            }
            for side, cap in (("reference", self.reference), ("speculative", self.speculative))
        }
        ratio = self.ratio()
        # The ratio's interval beside its point: a baseline gate decides on both intervals (stats.compare_intervals).
        interval = (ratio.low, ratio.high) if ratio.kind == "estimate" else (math.nan, math.nan)
        derived = {"capacity_ratio": self.capacity_ratio()}
        derived.update({"capacity_ratio_low": interval[0], "capacity_ratio_high": interval[1]})
        return [{**sides, "derived": derived}]

    def assert_capacity(self, min_ratio: float = 1.0) -> "CapacityResult":
        """SD must carry at least `min_ratio` times the reference's load within the SLO.

        A ratio that is only a bound passes only when the bound decides it (a
        lower bound >= `min_ratio`); otherwise the check fails as undecidable.
        """
        from ...verdict.assertions import Row, failure_message

        if isinstance(min_ratio, bool) or not isinstance(min_ratio, (int, float)) or min_ratio <= 0:
            raise ValueError(f"assert_capacity(min_ratio=...) must be a number > 0, got {min_ratio!r}")
        ratio = self.ratio()
        verdict, why = ratio.decide(min_ratio)
        if verdict == "pass":
            return self
        if verdict == "undecidable":
            remedy = (
                "Bracket both sides: raise the pattern's max_load or bracket_probes "
                f"(now max_load={self.pattern.get('max_load')}, "
                f"bracket_probes={self.pattern.get('bracket_probes')}), or lower search_start where a side "
                "failed at the lowest load"
            )
            if ratio.kind == "estimate":  # both bracketed, the threshold inside the interval
                remedy = (
                    f"Both sides are bracketed, but {min_ratio:g}x lies within the interval: narrow it with "
                    f"a finer resolution in the access pattern (now {self.pattern.get('resolution', 0.1)}; "
                    "each halving costs about one more probe per side, and raise bisect_probes, now "
                    f"{self.pattern.get('bisect_probes')}, to pay for it), or gate a threshold the interval "
                    "can decide"
                )
            if self.reference.not_offered() or self.speculative.not_offered():
                remedy = (
                    "The client could not offer the load it was asked to (its p99 dispatch lag stayed over "
                    "--specdec-max-dispatch-lag-ms in every run of a probe): spread the load over client "
                    "processes with --specdec-client-workers, or find what else is busy on this machine"
                )
            raise AssertionError(
                failure_message(
                    f"SD's SLO capacity against {min_ratio:g}x the reference's is undecidable for {self.spec.label()}: "
                    f"{why}. {remedy}",
                    [],
                    self,
                    extra=self.describe(),
                )
            )
        raise AssertionError(
            failure_message(
                f"SD's SLO capacity is below {min_ratio:g}x the reference's for {self.spec.label()}",
                [Row("capacity_ratio", min_ratio, ratio.value, ok=False, note="; ".join(ratio.notes))],
                self,
                extra=self.describe(),
            )
        )

    def assert_no_regression(
        self, metrics: Sequence[str] | None = None, tolerance=None, allow_unavailable: Sequence[str] = ()
    ) -> "CapacityResult":
        """Compare the capacity ratio with this test's stored baseline."""
        if self.gate is None:
            raise RuntimeError("assert_no_regression needs a baseline gate: use the specdec fixture")
        self.gate.check(
            self, metrics=list(metrics or CAPACITY_METRICS), tolerance=tolerance, allow_unavailable=allow_unavailable
        )
        return self

    def describe(self) -> str:
        lines = [
            f"SLO: {describe_objectives(self.objectives, self.percentile)}",
            f"reference: {self.reference.describe()}",
            f"SD:        {self.speculative.describe()}",
            f"capacity ratio: {self.ratio().describe()}",
        ]
        for side, capacity in (("reference", self.reference), ("SD", self.speculative)):
            lines += [
                f"  {side} probe at {p.load:g}: {'held' if p.holds else 'failed' if p.offered else 'not offered'}"
                f" ({p.detail.get('reason', '')})"
                for p in capacity.probes
            ]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"<CapacityResult {self.spec.label()} reference={self.reference.capacity} "
            f"speculative={self.speculative.capacity} ratio={self.ratio().describe()}>"
        )


def measure_capacity(
    measurements, spec: ServerSpec, workload, pattern, slo: dict[str, float], percentile: float, *, seed: int = 0
) -> CapacityResult:
    """Search the reference's and SD's capacity under `slo` (see the module docstring)."""
    limits, how, unloaded, prompts, reference, reference_runs = measurements.reference_search(
        spec, *reference_job(measurements, spec, workload, pattern, slo, percentile, seed)
    )
    speculative, speculative_runs = search_side(
        measurements,
        spec,
        "SD",
        workload,
        pattern,
        prompts,
        limits,
        percentile,
        seed,
        [p.load for p in reference.probes],
    )
    server = measurements.pool.get(spec)
    # The servers as they were started; each probe is one `vllm bench serve` run at its load (see probes).
    reproduce = {
        name: shlex.join(run.server_command)
        for name, runs in (("reference_server", reference_runs), ("speculative_server", speculative_runs))
        for run in list(runs.values())[:1]
        if run.server_command
    }
    return CapacityResult(
        spec,
        workload.describe(),
        pattern.describe(),
        limits,
        percentile,
        reference,
        speculative,
        reference_runs,
        speculative_runs,
        seed=seed,
        reproduce=reproduce,
        server_log=str(getattr(server, "log_path", "") or ""),
        objectives=how,
        unloaded_ms=dict(unloaded),
    )
