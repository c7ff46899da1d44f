"""What `specdec.run()` returns: both runs' metrics, SD counters, speedups, outputs.

Every repeat is kept; summary figures over repeats use the median, which a
single noisy repeat cannot drag far.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..engines import engine_named
from ..engines.server_spec import DEFAULT_ENGINE, ServerSpec
from ..engines.counters import SpecDecodeCounters
from ..engines.forced_acceptance import ForcedAcceptance, forced_acceptance
from ..verdict.metric_names import (
    SPEEDUP_METRICS,
    SPEEDUP_PREFIX,
    derived_metrics,
    speedup as speedup_of,
    speedup_metric,
    speedup_name,
)
from ..load.workloads import REPEAT_SEED_STRIDE, repeat_seed  # noqa: F401 - re-exported
from ..analysis.metrics import RunMetrics
from ..analysis.forced_sweep import ForcedCurve
from ..analysis.frontier import FrontierReport

# Output comparison lives in `outputs`; these names stay importable from here.
from ..analysis.outputs import OutputComparison, RequestComparison, compare_outputs  # noqa: F401
from ..analysis.inside_acceptance import ANALYSIS_FIGURES, analyse, diagnosis as causes_of
from ..analysis.diagnosis import describe
from .groups import GroupedFigures
from .fairness import FairComparison
from .result_checks import ResultChecks
from .timing_decisions import DecidedFigures
from .validity import ConstrainedFigures
from ..analysis.goodput import goodput as goodput_of, is_relative

if TYPE_CHECKING:  # the types of the parts a result carries; their modules need no result at run time
    from ..analysis.cost_ratio import CostRatio
    from ..serving.energy import EnergyReading
    from ..serving.server_series import ServerSeries
    from ..verdict.distribution import DistributionTest
    from ..verdict.gate import RegressionGate
    from ..verdict.learned_drift import StartSpread
    from ..verdict.sequential.rule import Rule
    from .build_runs import BuildComparison
    from .distribution_samples import Drawer
    from .mechanism import Mechanism
    from .warm_up import SteadyState


@dataclass
class Run:
    """One measured repeat of one configuration on one workload and pattern."""

    spec: ServerSpec
    repeat: int
    metrics: RunMetrics
    records: list  # client.RequestRecord, one per request, in request order
    counters: SpecDecodeCounters | None  # SD counter deltas for this run; None for the reference
    server_command: list[str]
    started_at: float  # wall clock
    warm_up: SteadyState | None = None  # what warming this run's server took, and whether it settled
    engine_facts: dict | None = None  # what the server revealed it runs (serving.engine_facts)
    energy: EnergyReading | None = None  # the energy counters around the run's requests; None: not read
    series: ServerSeries | None = None  # the server's metrics during the run; None: not read


def why_no_value(metric: str) -> str:
    """Why a run metric (vllm bench serve's keys) has no value in a run that completed."""
    if "tpot" in metric:
        return (
            "TPOT needs requests with more than one output token, streamed in more than one event "
            "(a whole output in one event leaves no time between tokens to measure)"
        )
    if "itl" in metric:
        return "ITL needs at least two streamed chunks in a request"
    return "no request of the run completed"


def _median_metric(runs: list[Run], metric: str) -> float:
    values = [run.metrics.as_dict()[metric] for run in runs]
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def _forwarded(part: str, method: Callable) -> Callable:
    """`method` of the result's part `part`, callable on the result itself: the documented API
    (`result.assert_speedup(...)`, `result.fairness_flags()`, ...) keeps its names, signatures and docs."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        return method(getattr(self, part), *args, **kwargs)

    return call


@dataclass
class SpecDecResult:
    """The reference and SD runs of one test, with the figures derived from them.

    Composed of parts, each in its own module and each handed this result: `checks` (the `assert_*` checks),
    `decided` (timing checks decided by the sequential rule), `fairness` (flags and confounds), `groups`
    (per-category and per-turn figures) and `constraints` (structured-output validity). Their public methods
    are callable on the result too, under the same names."""

    spec: ServerSpec
    workload: dict[str, Any]
    pattern: dict[str, Any]
    reference_runs: list[Run]
    speculative_runs: list[Run]
    outputs: OutputComparison
    reproduce: dict[str, str]  # "reference_server", "speculative_server", "bench" -> shell commands
    seed: int = 0
    server_log: str = ""
    # Set by the plugin (or a script) to compare with stored baselines.
    gate: RegressionGate | None = field(default=None, repr=False, compare=False)
    # SD repeat i's outputs against reference repeat i (`outputs` is repeat 0's).
    outputs_per_repeat: list[OutputComparison] = field(default_factory=list)
    # p99 dispatch lag (ms) above which a run measured the client, not the server (see client_bound).
    dispatch_lag_limit_ms: float = 10.0
    # The draft/target cost ratio c estimated at measure time, labelled (theory.cost_ratio_for, a theory.CostRatio;
    # a bare number is taken as "given"); None: not estimated.  Only a fallback: the reports measure c from the
    # run's own step times (analysis.cost_ratio_of) and say which they used (`cost_ratio_source`).
    cost_ratio: CostRatio | float | None = None
    # The test's service-level objectives ({"tpot": ms, ...}, vllm bench serve's keys) for goodput; {} if none.
    slo: dict = field(default_factory=dict)
    # (concurrency, speedup) of every level when this result is one level of a sweep, for the diagnosis.
    sweep_speedups: list = field(default_factory=list, repr=False, compare=False)
    # The curve of the forced-acceptance sweep this result is one length of (measure.forced_sweep).
    forced_sweep: ForcedCurve | None = field(default=None, repr=False, compare=False)
    # The two throughput-interactivity frontiers of the concurrency sweep this result is one level of.
    frontier: FrontierReport | None = field(default=None, repr=False, compare=False)
    # The cold or drifting flags that had the comparison measured again (measure.fairness), and the kinds a
    # test accepts: a speedup still flagged after the second measurement is not compared unless accepted.
    remeasured: list = field(default_factory=list)
    # (reference runs, SD runs) of each measurement a flagged comparison replaced: a flag that stays may be the
    # regression itself, so the row and the gate keep them (verdict.gate.earlier_repeats).
    earlier_runs: tuple = field(default=(), repr=False, compare=False)
    accepted_flags: tuple = ()
    # --specdec-baseline-from build:PATH: the baseline build measured beside it (build_runs.BuildComparison).
    builds: BuildComparison | None = field(default=None, repr=False, compare=False)
    # Draws sampled continuations from the test's two servers (distribution_samples.drawer_for), set by
    # `SpecDecTest.run`; `distribution` is the last `assert_same_distribution`'s test, for the report.
    sampler: Drawer | None = field(default=None, repr=False, compare=False)
    distribution: DistributionTest | None = field(default=None, repr=False, compare=False)
    # With @pytest.mark.specdec_mechanism: SD against a reference on its own engine path (measure.mechanism).
    mechanism: Mechanism | None = field(default=None, repr=False, compare=False)
    # --specdec-repeats auto (measure.timing_decisions): SD's sends of a draw after its first (timing only:
    # acceptance and outputs are never counted from them), a callable that sends every draw once more while the
    # servers are up (None: no more can be had), the rule's error rates and cap, and each timing check's decision.
    timing_runs: list = field(default_factory=list, repr=False, compare=False)
    more_runs: Callable[[], bool] | None = field(default=None, repr=False, compare=False)
    # The reference's draws sent again after SD's (verdict.sequential.evidence: the machine's move between the
    # two), and the callable that sends them while the servers can (None: they cannot be had).
    reference_again_runs: list = field(default_factory=list, repr=False, compare=False)
    again_reference: Callable[[], bool] | None = field(default=None, repr=False, compare=False)
    # New draws of the workload measured for checks against the reference, (reference run, SD run) each, apart
    # from the draws run() measured (timing only, like sends again), and the callable that measures them
    # (measure.more_draws: SD's first sends are what a check is left with); None: they cannot be had.
    new_draw_runs: list = field(default_factory=list, repr=False, compare=False)
    new_draws: Callable[[], bool] | None = field(default=None, repr=False, compare=False)
    rule: Rule | None = field(default=None, repr=False, compare=False)
    decisions: dict = field(default_factory=dict, repr=False, compare=False)
    strict: bool = field(default=False, repr=False, compare=False)  # --specdec-strict: an undecided check fails
    # check name -> the error rates it is decided at (the session's false-alarm budget); None: the rule's own.
    rates: Callable[[str], dict[str, float]] | None = field(default=None, repr=False, compare=False)
    # --specdec-measure-drift: the changes of every server started anew so far in the session on this engine
    # build, this test's two included (measure.start_drift); the gate reads its drift from them.  None: not asked.
    start_drift: StartSpread | None = field(default=None, repr=False, compare=False)
    # With run(unconstrained=True), the same prompts measured free of their constraints (measure.validity).
    unconstrained: SpecDecResult | None = field(default=None, repr=False, compare=False)
    _analyses: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # Results of the same config at other k: the step cost's fixed and per-token parts fitted from all of them.
    step_cost_runs: tuple = field(default=(), init=False, repr=False, compare=False)

    def __getstate__(self) -> dict:
        # The sampler is bound to this session's live servers: a result pickled for another process (kept
        # results, a worker's) carries what was measured, not a way to draw more.
        return {**self.__dict__, "sampler": None, "more_runs": None, "again_reference": None, "new_draws": None}

    @property
    def checks(self) -> ResultChecks:
        return ResultChecks(self)

    @property
    def decided(self) -> DecidedFigures:
        return DecidedFigures(self)

    @property
    def fairness(self) -> FairComparison:
        return FairComparison(self)

    @property
    def groups(self) -> GroupedFigures:
        return GroupedFigures(self)

    @property
    def constraints(self) -> ConstrainedFigures:
        return ConstrainedFigures(self)

    assert_speedup = _forwarded("checks", ResultChecks.assert_speedup)
    assert_acceptance = _forwarded("checks", ResultChecks.assert_acceptance)
    assert_best_k = _forwarded("checks", ResultChecks.assert_best_k)
    assert_outputs_equivalent = _forwarded("checks", ResultChecks.assert_outputs_equivalent)
    assert_same_distribution = _forwarded("checks", ResultChecks.assert_same_distribution)
    assert_no_regression = _forwarded("checks", ResultChecks.assert_no_regression)
    runs_per_side = _forwarded("decided", DecidedFigures.runs_per_side)
    speedup_evidence = _forwarded("decided", DecidedFigures.speedup_evidence)
    sequential_rule = _forwarded("decided", DecidedFigures.sequential_rule)
    decide = _forwarded("decided", DecidedFigures.decide)
    undecided = _forwarded("decided", DecidedFigures.undecided)
    runs_note = _forwarded("decided", DecidedFigures.runs_note)
    spread_note = _forwarded("decided", DecidedFigures.spread_note)
    fairness_flags = _forwarded("fairness", FairComparison.fairness_flags)
    unfair_speedup = _forwarded("fairness", FairComparison.unfair_speedup)
    accept_flags = _forwarded("fairness", FairComparison.accept_flags)
    confounds = _forwarded("fairness", FairComparison.confounds)
    sd_costs = _forwarded("fairness", FairComparison.sd_costs)
    assert_no_confounds = _forwarded("fairness", FairComparison.assert_no_confounds)
    assert_fair_comparison = _forwarded("fairness", FairComparison.assert_fair_comparison)
    by = _forwarded("groups", GroupedFigures.by)
    assert_group = _forwarded("groups", GroupedFigures.assert_group)
    assert_category = _forwarded("groups", GroupedFigures.assert_category)
    validity = _forwarded("constraints", ConstrainedFigures.validity)
    assert_outputs_valid = _forwarded("constraints", ConstrainedFigures.assert_outputs_valid)
    constraint_figures = _forwarded("constraints", ConstrainedFigures.constraint_figures)

    @property
    def constrained(self) -> bool:
        """Whether any request of the reference carried a constraint (a JSON schema, a regex, a grammar)."""
        return self.constraints.constrained

    def fit_step_cost_with(self, *others: "SpecDecResult") -> "SpecDecResult":
        """Fit the step cost behind best k, the predictions and the oracle from this run and runs of the same
        config at other k (one k cannot split a step's cost into a fixed and a per-token part; see
        analysis.step_cost).  Returns self; the analyses are computed again."""
        self.step_cost_runs = tuple(others)
        self._analyses.clear()
        return self

    def analysis(self, repeat: int | None = None):
        """The per-request analyses (`analysis.AcceptanceAnalysis`) of every SD repeat, or of one."""
        if repeat not in self._analyses:
            self._analyses[repeat] = analyse(self, engine_named(getattr(self.spec, "engine", DEFAULT_ENGINE)), repeat)
        return self._analyses[repeat]

    def diagnosis(self) -> list:
        """Why SD did not pay: `diagnosis.Cause`s, each with the figure behind it."""
        return causes_of(self, self.sweep_speedups or None)

    def why_sd_did_not_pay(self) -> str:
        """The causes the measured figures point at, each with its number, as a failure message says them."""
        return "why SD did not pay:\n" + describe(self.diagnosis())

    def repeat_seeds(self) -> list[int]:
        """The prompt/arrival seed of each SD repeat: a baseline with the same ones is compared in pairs."""
        return [repeat_seed(self.seed, run.repeat) for run in self.speculative_runs]

    def client_bound(self) -> str | None:
        """Why a run is client-bound (the load generator held requests back: coordinated omission must not
        pass for a server regression, so speedups and run metrics are unavailable with this reason), or None."""
        for side, runs in (("reference", self.reference_runs), ("SD", self.speculative_runs)):
            for run in runs:
                if run.metrics.client_bound(self.dispatch_lag_limit_ms):
                    return (
                        f"client-bound: the {side} run (repeat {run.repeat + 1}) had a p99 dispatch lag of "
                        f"{run.metrics.dispatch_lag.p99:.1f} ms, over the {self.dispatch_lag_limit_ms:g} ms limit: the load generator, "
                        "not the server, set its pace (fewer concurrent streams, or a bigger client machine)"
                    )
        return None

    @property
    def counters(self) -> SpecDecodeCounters:
        """SD counter deltas summed over every SD repeat; unavailable if any repeat's are."""
        total = SpecDecodeCounters()
        for run in self.speculative_runs:
            total = total + (
                run.counters
                if run.counters is not None
                else SpecDecodeCounters.unavailable("the SD run recorded no counters")
            )
        return total

    @property
    def forced(self) -> ForcedAcceptance | None:
        """The acceptance the SD server was told to force (engines.forced_acceptance), or None."""
        return forced_acceptance(self.spec.speculative_config)

    def unavailable(self, metric: str) -> str | None:
        """Why `metric` (a speedup, acceptance or match figure, or a run metric) could not be
        measured, or None when it was.  An unavailable figure never passes a check."""
        if metric in ("acceptance_rate", "acceptance_length", "per_position_acceptance"):
            counters = self.counters
            if not counters.present:
                return counters.problem
            if not counters.num_drafts:
                return "the SD server drafted nothing during the run (its counters did not move)"
            return None
        if metric == "match_rate":
            if (forced := self.forced) is not None:
                return (
                    f"not applied {forced.label()}: the SD server accepts drafts whether or not they match the "
                    "target, so its outputs are not the target's"
                )
            problems = [o.problem for o in self._comparisons() if o.problem]
            return problems[0] if problems else None
        if metric in ANALYSIS_FIGURES:
            return self.analysis().unavailable(metric)
        if metric == "goodput_ratio":
            if not self.slo:
                return "no SLO declared for this test (@pytest.mark.specdec_slo or the ini's specdec_slo)"
            if is_relative(self.slo):
                return (
                    f"the SLO is relative ({', '.join(k for k in self.slo if k.endswith('_x'))}): its "
                    "milliseconds come from the reference's unloaded run, which only an SLO capacity search "
                    "measures; goodput needs absolute objectives (e.g. tpot_ms=...)"
                )
            if not any(math.isfinite(v) for v in self.repeat_goodput_ratios()):
                return "no reference request met the SLO, so SD's goodput has nothing to be compared with"
            return None
        name = speedup_metric(metric) if metric.startswith(SPEEDUP_PREFIX) else metric
        if metric.startswith(SPEEDUP_PREFIX) and (unfair := self.unfair_speedup()):
            return unfair
        if bound := self.client_bound():
            return bound
        for side, runs in (("reference", self.reference_runs), ("SD", self.speculative_runs)):
            missing = [run.repeat + 1 for run in runs if not math.isfinite(run.metrics.as_dict().get(name, math.nan))]
            if missing:
                return (
                    f"{name} has no value in the {side} run{'s' if len(missing) > 1 else ''} "
                    f"(repeat {', '.join(map(str, missing))}): " + why_no_value(name)
                )
        if metric.startswith(SPEEDUP_PREFIX):
            for reference, speculative in self.repeat_pairs():
                ref, sd = reference.metrics.as_dict()[name], speculative.metrics.as_dict()[name]
                if not math.isfinite(speedup_of(name, ref, sd)):
                    return (
                        f"{metric} is undefined in repeat {speculative.repeat + 1}: "
                        f"{name} is {ref:g} for the reference and {sd:g} for SD"
                    )
        return None

    @property
    def engine_version(self) -> str | None:
        """The engine's version as its servers reported it (engine facts): the SD side's, else the reference's."""
        runs = [*self.speculative_runs[:1], *self.reference_runs[:1]]
        return next((run.engine_facts["version"] for run in runs if (run.engine_facts or {}).get("version")), None)

    @property
    def acceptance_rate(self) -> float:
        return self.counters.acceptance_rate

    @property
    def acceptance_length(self) -> float:
        return self.counters.acceptance_length

    @property
    def per_position_acceptance(self) -> list[float]:
        return self.counters.per_position_rate

    def reference_metric(self, metric: str) -> float:
        return _median_metric(self.reference_runs, metric)

    def speculative_metric(self, metric: str) -> float:
        return _median_metric(self.speculative_runs, metric)

    def speedup(self, metric: str = "output_throughput") -> float:
        """How many times better SD is on `metric` (> 1 is a win): the median over repeats of each
        repeat's speedup, SD repeat i against reference repeat i (they sent the same prompts and arrivals).

        Throughputs divide SD by reference; latencies (``*_ms``) divide
        reference by SD, so a speedup always reads the same way.  This is the
        one definition the assertions, the gate, the reports and the exports use.
        """
        values = [v for v in self.repeat_speedups(metric) if not math.isnan(v)]
        return statistics.median(values) if values else math.nan

    def repeat_speedups(self, metric: str = "output_throughput") -> list[float]:
        """Each repeat's speedup on `metric`, in repeat order (NaN where a side has no value)."""
        return [
            speedup_of(metric, ref.metrics.as_dict().get(metric, math.nan), sd.metrics.as_dict().get(metric, math.nan))
            for ref, sd in self.repeat_pairs()
        ]

    def goodput(self, side: str = "speculative", unit: str = "requests") -> float:
        """Requests per second that met every SLO (`vllm bench serve --goodput`), or with ``unit="tokens"``
        their output tokens per second; median over repeats; NaN when the test declares no SLO."""
        if unit not in ("requests", "tokens"):
            raise ValueError(f"goodput unit must be 'requests' or 'tokens', got {unit!r}")
        runs = self.speculative_runs if side == "speculative" else self.reference_runs
        figure = "request_goodput" if unit == "requests" else "output_goodput"
        values = (
            [getattr(goodput_of(run.records, run.metrics.duration_s, self.slo), figure) for run in runs]
            if self.slo and not is_relative(self.slo)
            else []
        )
        values = [v for v in values if math.isfinite(v)]
        return statistics.median(values) if values else math.nan

    def repeat_goodput_ratios(self) -> list[float]:
        """Each repeat's SD goodput over the reference's (NaN without SLOs or without a good reference request)."""
        if not self.slo or is_relative(self.slo):
            return [math.nan for _ in self.speculative_runs]
        ratios = []
        for ref, sd in self.repeat_pairs():
            before = goodput_of(ref.records, ref.metrics.duration_s, self.slo).request_goodput
            now = goodput_of(sd.records, sd.metrics.duration_s, self.slo).request_goodput
            ratios.append(now / before if before > 0 and math.isfinite(now) else math.nan)
        return ratios

    def goodput_ratio(self) -> float:
        """SD's goodput over the reference's: the median of the per-repeat ratios (paired, as speedups)."""
        values = [v for v in self.repeat_goodput_ratios() if math.isfinite(v)]
        return statistics.median(values) if values else math.nan

    def repeat_pairs(self) -> list[tuple[Run, Run]]:
        """(reference run, SD run) per repeat; a reference with fewer repeats reuses its last one."""
        return [
            (self.reference_runs[min(i, len(self.reference_runs) - 1)], sd)
            for i, sd in enumerate(self.speculative_runs)
        ]

    def repeats(self) -> list[dict[str, dict[str, float]]]:
        """One entry per repeat, as baselines store them: both sides' metrics and the derived figures."""
        entries = []
        for ref_run, sd_run in self.repeat_pairs():
            ref, sd = ref_run.metrics.as_dict(), sd_run.metrics.as_dict()
            derived = derived_metrics(ref, sd)
            counters = sd_run.counters
            derived["acceptance_rate"] = counters.acceptance_rate if counters else math.nan
            derived["acceptance_length"] = counters.acceptance_length if counters else math.nan
            comparisons = self._comparisons()
            derived["match_rate"] = comparisons[min(len(entries), len(comparisons) - 1)].match_rate
            analysis = self.analysis(len(entries))
            derived.update({name: analysis.figure(name) for name in ANALYSIS_FIGURES})
            derived["goodput_ratio"] = self.repeat_goodput_ratios()[len(entries)]
            entries.append({"reference": ref, "speculative": sd, "derived": derived})
        return entries

    def _comparisons(self) -> list[OutputComparison]:
        return self.outputs_per_repeat or [self.outputs]

    @property
    def match_rate(self) -> float:
        """Share of requests, over every repeat, whose SD output equals the reference's (NaN if unavailable)."""
        comparisons = self._comparisons()
        if any(c.problem for c in comparisons):
            return math.nan
        requests = [r for c in comparisons for r in c.requests]
        return sum(r.identical for r in requests) / len(requests) if requests else math.nan

    def derived(self) -> dict[str, float]:
        """The ratios that compare across environments: speedups and acceptance."""
        values = {speedup_name(metric): self.speedup(metric) for metric in SPEEDUP_METRICS}
        values["acceptance_rate"] = self.acceptance_rate
        values["acceptance_length"] = self.acceptance_length
        values["match_rate"] = self.match_rate
        analysis = self.analysis()
        values.update({name: analysis.figure(name) for name in ANALYSIS_FIGURES})
        values["goodput_ratio"] = self.goodput_ratio()
        return values

    def summary(self) -> dict[str, Any]:
        """Key figures, JSON-able (used for reports and JUnit properties)."""
        return {
            "spec": self.spec.label(),
            "workload": self.workload,
            "pattern": self.pattern,
            "repeats": len(self.speculative_runs),
            **{speedup_name(metric): self.speedup(metric) for metric in SPEEDUP_METRICS},
            "acceptance_rate": self.acceptance_rate,
            "acceptance_length": self.acceptance_length,
            "per_position_acceptance": self.per_position_acceptance,
            "match_rate": self.match_rate,
            "reference": {k: self.reference_metric(k) for k in self.reference_runs[0].metrics.as_dict()},
            "speculative": {k: self.speculative_metric(k) for k in self.speculative_runs[0].metrics.as_dict()},
            "reproduce": self.reproduce,
        }

    def __repr__(self) -> str:
        return (
            f"<SpecDecResult {self.spec.label()} speedup={self.speedup():.3f} "
            f"acceptance_rate={self.acceptance_rate:.3f} match_rate={self.match_rate:.2f}>"
        )
