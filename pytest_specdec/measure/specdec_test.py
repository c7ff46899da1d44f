"""What the ``specdec`` fixture hands a test: its configuration, traffic and ``run()``.

A plain object over the session's `Measurements`, usable from a script.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from ..engines import engine_named
from ..engines.forced_acceptance import forced_acceptance, forced_at
from ..engines.server_spec import ServerSpec
from ..load.patterns import AccessPattern
from ..load.workloads import Workload
from ..serving.pool import ServerPool
from ..serving.server import ManagedServer
from ..verdict.assertions import check_forced_acceptance
from .distribution_samples import drawer_for
from .forced_sweep import AcceptanceSweep
from .measurements import Measurements, RunError
from .more_draws import arm
from .start_drift import measure_start_drift
from .validity import finish_constrained, free_reference


class SpecDecTest:
    """One test's speculative configuration, traffic, and the servers behind them."""

    # @pytest.mark.specdec_mechanism: run() also measures a reference on SD's engine path (measure.mechanism).
    mechanism = False

    def __init__(
        self,
        spec: ServerSpec,
        measurements: Measurements,
        workload: Workload | None = None,
        pattern: AccessPattern | None = None,
        gate=None,
        slo: dict | None = None,
        slo_percentile: float = 99.0,
        builds: tuple | None = None,
        rates: Callable[[str], dict[str, float]] | None = None,
    ):
        self.spec = spec
        self.measurements = measurements
        self.workload = workload
        self.pattern = pattern
        self.gate = gate  # compares results with stored baselines (assert_no_regression)
        self.slo = dict(slo or {})  # {"tpot": ms, ...}: goodput on every run, the objective of capacity searches
        self.slo_percentile = slo_percentile
        self.results: list = []  # SpecDecResult, CapacityResult: one report row each
        # (this build, the baseline build) under --specdec-baseline-from build:PATH (build_runs.Build), else None.
        self.builds = builds
        # check name -> the error rates it is decided at (the session's false-alarm budget: verdict.alarm_budget);
        # None: the rule's defaults.
        self.rates = rates
        self.alarm_budget: dict | None = None  # the session budget's settings, for the rows (AlarmBudget.config)

    @property
    def pool(self) -> ServerPool:
        return self.measurements.pool

    @property
    def reference_spec(self) -> ServerSpec:
        return self.spec.reference()

    def server(self) -> ManagedServer:
        """The server with the test's speculative config, started if needed.

        Reference runs other tests announced for this target are measured
        first, while no SD server has displaced the reference server.
        """
        self.measurements.measure_planned_references(self.spec)
        return self.pool.get(self.spec)

    def reference_server(self) -> ManagedServer:
        """The same target and flags without speculation."""
        return self.pool.get(self.reference_spec)

    def run(self, *, seed: int = 0, logprobs: int | None = None, unconstrained: bool = False):
        """Measure the no-SD reference (shared, once per session) and SD on the same traffic.

        Constrained traffic (load.constraints) fails here on any output that breaks its constraint, on either
        side, once the row is recorded; `unconstrained` also measures the same prompts free, for the row's
        constrained-versus-free figures (measure.validity).

        With a capacity-search access pattern (``slo_capacity``, ...) this is the
        search instead, and the result a `slo_capacity.CapacityResult`.
        """
        self._need_traffic("run")
        began = time.monotonic()
        if self.builds is not None and self.pattern.search:
            raise RunError(
                f"{self.spec.label()}: a capacity search is not measured across builds (--specdec-baseline-from "
                "build:PATH measures run() and sweep levels only); compare the builds' capacities with two sessions"
            )
        if self.builds is not None:
            result = self.measurements.builds.run_builds(
                self.spec, *self.builds, self.workload, self.pattern, seed=seed, logprobs=logprobs, slo=self.slo
            )
            prompts = self.measurements.prompts(self.spec.model, self.workload, self.pattern, seed)
            arm(self.measurements, result, self.workload, self.pattern, prompts, seed=seed, logprobs=logprobs)
            summary = (
                f"speedup {result.speedup():.2f}x on this build, {result.builds.baseline_result.speedup():.2f}x on "
                f"the baseline build; acceptance {result.acceptance_rate:.0%} and "
                f"{result.builds.baseline_result.acceptance_rate:.0%}"
            )
        elif self.pattern.search:
            from .capacity.slo import measure_capacity

            result = measure_capacity(
                self.measurements, self.spec, self.workload, self.pattern, self.slo, self.slo_percentile, seed=seed
            )
            summary = f"SLO capacity ratio {result.ratio().describe()}"  # a bound says its direction
        else:
            if unconstrained:  # the free reference while the reference server is up: the free run restarts nothing
                free_reference(self, seed, logprobs)
            result = self.measurements.run(
                self.spec, self.workload, self.pattern, seed=seed, logprobs=logprobs, slo=self.slo
            )
            summary = f"speedup {result.speedup():.2f}x, acceptance {result.acceptance_rate:.0%}"
            prompts = self.measurements.prompts(self.spec.model, self.workload, self.pattern, seed)
            if self.measurements.measure_drift:  # before any check: the gate reads its drift from these starts
                result.start_drift = measure_start_drift(
                    self.measurements, result, self.workload, self.pattern, prompts, seed=seed, logprobs=logprobs
                )
            arm(self.measurements, result, self.workload, self.pattern, prompts, seed=seed, logprobs=logprobs)
            if self.mechanism:
                from .mechanism import measure_mechanism

                prompts = self.measurements.prompts(self.spec.model, self.workload, self.pattern, seed)
                result.mechanism = measure_mechanism(
                    self.measurements, result, self.workload, self.pattern, prompts, seed=seed, logprobs=logprobs
                )
                summary += f"; mechanism {result.mechanism.speedup():.2f}x {result.mechanism.note}".rstrip()
        result.gate = self.gate
        result.rates = self.rates
        if not self.pattern.search and self.builds is None:
            result.sampler = drawer_for(self.measurements, self.spec, self.workload, self.pattern, seed)
        self.results.append(result)
        self.measurements.on_event(f"{self.spec.label()}: {summary} ({time.monotonic() - began:.0f} s)")
        finish_constrained(self, result, seed, logprobs, unconstrained)
        if not self.pattern.search and (forced := result.forced) is not None:
            check_forced_acceptance(result, forced)  # a server that ignored it fails here, by name
        return result

    def sweep(
        self,
        levels=(1, 5, 25, 50, 100, 200),
        *,
        num_prompts: int | None = None,
        prompts_per_level: int = 4,
        seed: int = 0,
    ):
        """The test's workload at each closed-loop concurrency level (see `patterns.concurrency_sweep`);
        returns a `sweep.SweepResult` (speedup per level, the crossover concurrency)."""
        from ..load.patterns import concurrency_sweep
        from .sweep import SweepResult

        self._need_traffic("sweep", pattern=False)
        if self.mechanism:  # a reference start more per level: asked of run() only, never silently skipped
            raise RunError("@pytest.mark.specdec_mechanism is measured by specdec.run(), not by sweep()")
        sweep = SweepResult()
        patterns = concurrency_sweep(levels, num_prompts=num_prompts, prompts_per_level=prompts_per_level)
        for pattern in patterns:  # every reference level on one reference server start, then SD's
            prompts = self.measurements.prompts(self.spec.model, self.workload, pattern, seed)
            self.measurements.reference(self.spec, self.workload, pattern, prompts, seed=seed)
        for pattern in patterns:
            if self.builds is not None:
                result = self.measurements.builds.run_builds(
                    self.spec, *self.builds, self.workload, pattern, seed=seed, slo=self.slo
                )
            else:
                result = self.measurements.run(self.spec, self.workload, pattern, seed=seed, slo=self.slo)
            result.gate = self.gate
            result.rates = self.rates
            self.results.append(result)
            sweep.results.append(result)
        sweep.attach_report()
        for result in sweep.results:  # each level's diagnosis can then name speedup falling with load
            result.sweep_speedups = sweep.speedups()
        self.measurements.on_event(f"{self.spec.label()}: {sweep.crossover().describe()}")
        return sweep

    def sweep_acceptance(self, lengths, *, seed: int = 0) -> AcceptanceSweep:
        """The test's workload at each forced acceptance length in `lengths` (mean tokens a step, each in 1 to
        k+1): the reference once, then one SD server start per length (a server setting).  The marker's config
        must force acceptance, so collection checked that the engine, its build and the device can; each
        length replaces the one it forced.  Every result is checked for the length its server honoured and
        is a report row; returns a `forced_sweep.AcceptanceSweep` (speedup per length, break-even, the fitted
        step cost beside the theory's)."""
        self._need_traffic("sweep_acceptance")
        if self.builds is not None or self.pattern.search or self.mechanism:
            raise RunError(
                f"{self.spec.label()}: specdec.sweep_acceptance() measures one build with a fixed access pattern; "
                "a builds A/B, a capacity search or @pytest.mark.specdec_mechanism is measured by specdec.run()"
            )
        chosen = sorted(set(lengths))
        if len(chosen) < 2:
            raise ValueError(f"specdec.sweep_acceptance() needs at least two forced lengths, got {lengths!r}")
        specs = [replace(self.spec, speculative_config=forced_at(self.spec.speculative_config, x)) for x in chosen]
        for spec in specs:  # a length the engine cannot force (TensorRT-LLM's whole counts), before any server
            device = None if spec.endpoints else self.pool.device
            engine_named(spec.engine).check_forced(spec, forced_acceptance(spec.speculative_config), device)
        prompts = self.measurements.prompts(self.spec.model, self.workload, self.pattern, seed)
        results = []
        for spec in specs:
            result = self.measurements.run(spec, self.workload, self.pattern, seed=seed, slo=self.slo)
            arm(self.measurements, result, self.workload, self.pattern, prompts, seed=seed)
            result.gate = self.gate
            result.rates = self.rates
            self.results.append(result)
            check_forced_acceptance(result, result.forced)  # a server that ignored it fails here, by name
            results.append(result)
        sweep = AcceptanceSweep(results)  # gives each result the curve, its report row's
        self.measurements.on_event(f"{self.spec.label()}: {results[0].forced_sweep.describe()}")
        return sweep

    def _need_traffic(self, what: str, pattern: bool = True) -> None:
        needed = (("workload", self.workload), ("access_pattern", self.pattern if pattern else True))
        missing = [name for name, value in needed if value is None]
        if missing:
            raise RunError(f"specdec.{what}() needs @pytest.mark.{' and @pytest.mark.'.join(missing)}(...)")

    def __repr__(self) -> str:
        return f"<SpecDecTest {self.spec.label()}>"
