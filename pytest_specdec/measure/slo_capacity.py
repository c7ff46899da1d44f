"""SLO capacity on real servers: how much load each side carries within the test's latency objectives.

`measure_capacity` runs the bounded search of `load.capacity` for the
reference, then for SD, on the servers of the test's target.  Each probe
sends the test's prompts at one load (a request rate, or a concurrency) with
arrivals of its own, seeded by the load, so the reference and SD probing the
same load see the same schedule; SD's search prefers the loads the reference
probed.  A probe holds when every SLO metric's percentile (default p99) is
within its objective and no request failed (`goodput.SLOPercentiles.holds`).

What a search costs: at most ``max_probes`` runs of ``num_prompts`` requests
per side, plus one short warm-up per server, on two server starts (the
reference's is shared with the test's other traffic where it can be).
"""

from __future__ import annotations

import shlex

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..config.spec import ServerSpec
from ..load.capacity import Capacity, CapacitySearch, Probe, capacity_ratio, search_capacity
from .goodput import SLOPercentiles
from .result import Run
from .theory import cost_per_million_tokens

CAPACITY_METRICS = ("capacity_ratio",)


def probe_seed(seed: int, load: float) -> int:
    """Arrivals of the probe at `load`: the same on both sides, different from every other load's."""
    return seed + int(round(load * 1000))


@dataclass
class CapacityResult:
    """The capacity of the reference and of SD under one SLO, with every probe."""

    spec: ServerSpec
    workload: dict[str, Any]
    pattern: dict[str, Any]
    slo: dict[str, float]
    percentile: float
    reference: Capacity
    speculative: Capacity
    reference_runs: dict[float, Run] = field(default_factory=dict)  # load -> the probe's run
    speculative_runs_by_load: dict[float, Run] = field(default_factory=dict)
    seed: int = 0
    reproduce: dict[str, str] = field(default_factory=dict)
    server_log: str = ""
    gate: Any = field(default=None, repr=False, compare=False)

    @property
    def speculative_runs(self) -> list[Run]:
        return list(self.speculative_runs_by_load.values())

    def capacity_ratio(self) -> float:
        """SD's capacity over the reference's (NaN when either was not reached)."""
        return capacity_ratio(self.reference, self.speculative)[0]

    def ratio_note(self) -> str | None:
        """Why the ratio is a bound, or missing (None: both capacities were bracketed)."""
        return capacity_ratio(self.reference, self.speculative)[1]

    def unavailable(self, metric: str) -> str | None:
        if metric == "capacity_ratio":
            return self.ratio_note() if math.isnan(self.capacity_ratio()) else None
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
        """The figures exports carry: each side's capacity and the ratio."""
        return {"capacity_ratio": self.capacity_ratio(),
                **{f"{side}_capacity": math.nan if cap.capacity is None else float(cap.capacity)
                   for side, cap in (("reference", self.reference), ("speculative", self.speculative))}}

    def repeat_seeds(self) -> list[int]:
        return [self.seed]

    def repeats(self) -> list[dict[str, dict[str, float]]]:
        """One entry, as baselines store figures: each side's capacity and the ratio."""
        sides = {side: {"capacity": math.nan if cap.capacity is None else float(cap.capacity),
                        "output_throughput_at_capacity": self.output_throughput_at_capacity(side)}
                 for side, cap in (("reference", self.reference), ("speculative", self.speculative))}
        return [{**sides, "derived": {"capacity_ratio": self.capacity_ratio()}}]

    def assert_capacity(self, min_ratio: float = 1.0) -> "CapacityResult":
        """SD must carry at least `min_ratio` times the reference's load within the SLO."""
        from ..verdict.assertions import Row, failure_message, unavailable_message

        if isinstance(min_ratio, bool) or not isinstance(min_ratio, (int, float)) or min_ratio <= 0:
            raise ValueError(f"assert_capacity(min_ratio=...) must be a number > 0, got {min_ratio!r}")
        if why := self.unavailable("capacity_ratio"):
            raise AssertionError(unavailable_message(self, "SLO capacity", {"capacity_ratio": why}))
        ratio = self.capacity_ratio()
        note = self.ratio_note()
        if ratio >= min_ratio and not (note and note.startswith("upper bound")):
            return self
        raise AssertionError(failure_message(
            f"SD's SLO capacity is below {min_ratio:g}x the reference's for {self.spec.label()}",
            [Row("capacity_ratio", min_ratio, ratio, ok=False, note=note or "")], self,
            extra=self.describe()))

    def assert_no_regression(self, metrics: Sequence[str] | None = None, tolerance=None,
                             allow_unavailable: Sequence[str] = ()) -> "CapacityResult":
        """Compare the capacity ratio with this test's stored baseline."""
        if self.gate is None:
            raise RuntimeError("assert_no_regression needs a baseline gate: use the specdec fixture")
        self.gate.check(self, metrics=list(metrics or CAPACITY_METRICS), tolerance=tolerance,
                        allow_unavailable=allow_unavailable)
        return self

    def describe(self) -> str:
        slo = ", ".join(f"p{self.percentile:g} {key} <= {value:g} ms" for key, value in self.slo.items())
        ratio = self.capacity_ratio()
        lines = [f"SLO: {slo}",
                 f"reference: {self.reference.describe()}",
                 f"SD:        {self.speculative.describe()}",
                 f"capacity ratio: {'unavailable' if math.isnan(ratio) else f'{ratio:.2f}x'}"
                 + (f" ({self.ratio_note()})" if self.ratio_note() else "")]
        for side, capacity in (("reference", self.reference), ("SD", self.speculative)):
            lines += [f"  {side} probe at {p.load:g}: {'held' if p.holds else 'failed'} ({p.detail.get('reason', '')})"
                      for p in capacity.probes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        ratio = self.capacity_ratio()
        return (f"<CapacityResult {self.spec.label()} reference={self.reference.capacity} "
                f"speculative={self.speculative.capacity} ratio={ratio:.2f}>")


def measure_capacity(measurements, spec: ServerSpec, workload, pattern, slo: dict[str, float], percentile: float,
                     *, seed: int = 0) -> CapacityResult:
    """Search the reference's and SD's capacity under `slo` (see the module docstring)."""
    prompts = measurements.prompts(spec.model, workload, pattern, seed)
    search = CapacitySearch(over=pattern.search, start=pattern.search_start, max_probes=pattern.max_probes)

    def side(side_spec: ServerSpec, what: str, shared: Sequence[float]) -> tuple[Capacity, dict[float, Run]]:
        runs: dict[float, Run] = {}

        def probe(load: float) -> Probe:
            at = pattern.at_load(load)
            (run,) = measurements.measure(side_spec, workload, at, prompts, seed=probe_seed(seed, load),
                                          what=f"{what} probe", repeats=1)
            runs[load] = run
            percentiles = SLOPercentiles.of(run.records)
            holds, why = percentiles.holds(slo, percentile)
            if holds and run.metrics.client_bound(measurements.max_dispatch_lag_ms):
                # The client, not the server, held requests back: the load was not offered, so
                # the SLO holding there says nothing of the server (never overstate capacity).
                holds, why = False, (f"client-bound: p99 dispatch lag {run.metrics.dispatch_lag.p99:.1f} ms over "
                                     f"the {measurements.max_dispatch_lag_ms:g} ms limit")
            return Probe(load, holds, {**percentiles.as_dict(percentile), "reason": why,
                                       "output_throughput": run.metrics.output_throughput,
                                       "request_throughput": run.metrics.request_throughput})

        return search_capacity(probe, search, shared_loads=shared), runs

    measurements.measure_planned_references(spec)  # other tests' reference runs, while that server is up
    reference, reference_runs = side(spec.reference(), "reference", ())
    speculative, speculative_runs = side(spec, "SD", [p.load for p in reference.probes])
    server = measurements.pool.get(spec)
    # The servers as they were started; each probe is one `vllm bench serve` run at its load (see probes).
    reproduce = {name: shlex.join(run.server_command) for name, runs in
                 (("reference_server", reference_runs), ("speculative_server", speculative_runs))
                 for run in list(runs.values())[:1] if run.server_command}
    return CapacityResult(spec, workload.describe(), pattern.describe(), dict(slo), percentile, reference,
                          speculative, reference_runs, speculative_runs, seed=seed, reproduce=reproduce,
                          server_log=str(getattr(server, "log_path", "") or ""))
