"""What collection decides for one test, from its markers: plain logic, no pytest.

A `Plan` holds the test's server spec, workload, access pattern and baseline
tolerances, or the error that fails the test at setup with the marker and
field named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..load.patterns import CATALOG as PATTERN_CATALOG
from ..load.patterns import AccessPattern, PatternError, resolve_pattern
from .spec import MarkerError, ServerSpec, parse_specdec_marker
from ..engines import engine_named
from ..engines.base import EngineConfigError
from ..engines.forced_acceptance import forced_acceptance
from ..verdict.tolerances import parse_tolerance_marker
from ..load.workloads import CATALOG as WORKLOAD_CATALOG
from ..load.workloads import MissingDataPath, Workload, WorkloadError, resolve_workload
from ..load.structured import constraint_kinds


# The plugin's markers as `pytest --markers` lists them.
MARKER_DOCS = (
    "specdec(model, speculative_config=None, server_args=(), tensor_parallel_size=1, requires_gpu=False, "
    "endpoints=None): run the test against vLLM servers for this target and speculative config "
    "(needs --specdec-gpu or --specdec-cpu, or running endpoints).",
    "workload(name_or_Workload, **overrides): the traffic specdec.run() sends; catalog: " + ", ".join(WORKLOAD_CATALOG),
    "access_pattern(name_or_AccessPattern, **overrides): how specdec.run() sends it; catalog: "
    + ", ".join(PATTERN_CATALOG),
    "specdec_tolerance(fraction | metric=fraction, ...): this test's regression tolerances for "
    "assert_no_regression (over the ini's and the defaults)",
    "specdec_slo(ttft_ms=None, tpot_ms=None, e2el_ms=None, ttft_x=None, tpot_x=None, e2el_x=None, percentile=99): "
    "this test's service-level objectives for goodput and SLO capacity searches (over the ini's specdec_slo): "
    "*_ms in milliseconds, as vllm bench serve --goodput; *_x as a multiple of the reference's unloaded median "
    "measured in the same session (tpot_x=2: twice its TPOT), so the objective moves with the machine",
    "specdec_mechanism: specdec.run() also measures a reference on the engine path the engine forced on the SD "
    "side (vLLM: async scheduling off for ngram) and reports that speedup beside the deployed one, labelled; "
    "one more reference start",
    "specdec_gpu_memory(mib): free GPU memory (MiB per GPU) this test's servers need before they start "
    "(default: the --gpu-memory-utilization share of each GPU, 0.9 unless the server args say otherwise)",
    # pytest-xdist registers it too; without xdist the plugin's groups are inert.
    "xdist_group(name): pytest-xdist loadgroup: run tests of a group on one worker",
)


@dataclass
class Plan:
    spec: ServerSpec | None = None
    workload: Workload | None = None
    pattern: AccessPattern | None = None
    tolerances: Any = None  # from @pytest.mark.specdec_tolerance: a float or {metric: float}
    error: str | None = None
    # A data file nobody pointed at: fails the test only where it would run
    # (a run without a device flag skips it like every specdec test).
    missing_data: str | None = None
    gpu_memory_mib: int | None = None  # from @pytest.mark.specdec_gpu_memory
    slo: dict[str, float] = field(default_factory=dict)  # {"tpot": ms, ...}: the marker's, else the ini's
    slo_percentile: float = 99.0
    mechanism: bool = False  # from @pytest.mark.specdec_mechanism

    @property
    def ok(self) -> bool:
        """The markers were valid: there is a server spec to run (data files aside)."""
        return self.spec is not None and not self.error


def registered(results, kind) -> dict:
    """Merge what registration hooks returned (dicts or lists) into {name: item}."""
    merged = {}
    for result in results:
        items = result.values() if isinstance(result, dict) else result
        for item in items:
            if not isinstance(item, kind):
                raise TypeError(f"a specdec registration hook returned {item!r}, not a {kind.__name__}")
            merged[item.name] = item
    return merged


def plan_for(get_marker: Callable[[str], Any], settings, workloads: dict, patterns: dict) -> Plan | None:
    """Read a test's specdec markers (`get_marker(name)` -> marker or None)."""
    marker = get_marker("specdec")
    workload_marker = get_marker("workload")
    pattern_marker = get_marker("access_pattern")
    tolerance_marker = get_marker("specdec_tolerance")
    slo_marker = get_marker("specdec_slo")
    mechanism_marker = get_marker("specdec_mechanism")
    if marker is None:
        if workload_marker or pattern_marker or tolerance_marker or slo_marker or mechanism_marker:
            return Plan(
                error="@pytest.mark.workload, access_pattern, specdec_tolerance and specdec_slo need "
                "@pytest.mark.specdec (as does specdec_mechanism)"
            )
        return None
    try:
        spec = parse_specdec_marker(
            marker.args, marker.kwargs, extra_methods=settings.extra_methods, default_engine=settings.engine
        )
    except MarkerError as exc:
        return Plan(error=f"invalid @pytest.mark.specdec: {exc}")
    if settings.build is not None:
        spec = spec.on_build(settings.build)
    for flag, build in (
        ("--specdec-build", settings.build),
        ("--specdec-baseline-from build:", settings.history.baseline_build),
    ):
        if build is not None:
            try:  # an engine refuses a build it cannot launch (vLLM: only another environment's Python)
                engine_named(spec.engine).check_build(build)
            except EngineConfigError as exc:
                return Plan(error=f"{flag}{'' if flag.endswith(':') else ' '}{build}: {exc}")
    plan = Plan(spec)
    try:
        if workload_marker is not None:
            try:
                plan.workload = resolve_workload(
                    *_one_arg("workload", workload_marker), registered=workloads, paths=dict(settings.data_paths)
                )
            except MissingDataPath as exc:
                plan.missing_data = f"@pytest.mark.workload: {exc}"
            if plan.workload is not None:
                try:  # an engine refuses an endpoint it has no measurable route for (SGLang's chat)
                    engine_named(spec.engine).check_endpoint(plan.workload.endpoint)
                    for kind in sorted(constraint_kinds(plan.workload)):  # each engine sends its own words
                        engine_named(spec.engine).check_constraint(kind, plan.workload.endpoint, spec.server_args)
                except EngineConfigError as exc:
                    return Plan(error=f"invalid @pytest.mark.workload: {exc}")
        if pattern_marker is not None:
            plan.pattern = resolve_pattern(*_one_arg("access_pattern", pattern_marker), registered=patterns)
    except (WorkloadError, PatternError) as exc:
        which = "workload" if isinstance(exc, WorkloadError) else "access_pattern"
        return Plan(error=f"invalid @pytest.mark.{which}: {exc}")
    forced = forced_acceptance(spec.speculative_config)
    if forced is not None:
        # A test skipped for its device (no device flag; a GPU test on the CPU build) is not checked against
        # this machine's engine build or device: the skip's reason is the one to give (examples/gpu collects on
        # runners without vLLM), and the device that runs it checks it.
        skipped = not spec.endpoints and (settings.device is None or (spec.requires_gpu and settings.device != "gpu"))
        try:  # the engine, its build and the device must be able to force it (engines/forced_acceptance.py)
            if not skipped:
                engine_named(spec.engine).check_forced(spec, forced, None if spec.endpoints else settings.device)
        except EngineConfigError as exc:
            return Plan(error=f"invalid @pytest.mark.specdec: {exc}")
        if plan.workload is not None and not plan.workload.ignore_eos:
            return Plan(
                error=f"invalid @pytest.mark.workload: {plan.workload.name} lets requests stop at the model's end "
                f"of sequence (stop='natural'), and under forced acceptance the two sides' outputs differ, so they "
                f"would decode different amounts: forced acceptance needs stop='length'"
            )
    memory_marker = get_marker("specdec_gpu_memory")
    if memory_marker is not None:
        mib = memory_marker.args[0] if len(memory_marker.args) == 1 and not memory_marker.kwargs else None
        if isinstance(mib, bool) or not isinstance(mib, int) or mib < 1:
            return Plan(
                error="invalid @pytest.mark.specdec_gpu_memory: takes one whole number of MiB per GPU, "
                f"e.g. specdec_gpu_memory(40000); got {memory_marker.args!r} {memory_marker.kwargs!r}"
            )
        plan.gpu_memory_mib = mib
    if tolerance_marker is not None:
        try:
            plan.tolerances = parse_tolerance_marker(tolerance_marker.args, tolerance_marker.kwargs)
        except ValueError as exc:
            return Plan(error=f"invalid @pytest.mark.specdec_tolerance: {exc}")
    plan.slo, plan.slo_percentile = dict(settings.slo), settings.slo_percentile
    if slo_marker is not None:
        try:
            plan.slo, plan.slo_percentile = parse_slo_marker(slo_marker.args, slo_marker.kwargs)
        except ValueError as exc:
            return Plan(error=f"invalid @pytest.mark.specdec_slo: {exc}")
    if mechanism_marker is not None:
        refused = _mechanism_refused(mechanism_marker, plan, settings)
        if refused:
            return Plan(error=f"invalid @pytest.mark.specdec_mechanism: {refused}")
        plan.mechanism = True
    if plan.pattern is not None and plan.pattern.search and not plan.slo:
        return Plan(
            error=f"access pattern {plan.pattern.name!r} searches for the highest load an SLO holds at, "
            "and this test declares none: add @pytest.mark.specdec_slo(tpot_x=..., ttft_ms=...) "
            "or the ini's specdec_slo"
        )
    return plan


def _mechanism_refused(marker, plan: Plan, settings) -> str:
    """Why a test cannot have the mechanism figure ("" when it can): it needs a reference the plugin starts with
    other settings, beside one run() of SD against the deployed reference."""
    if marker.args or marker.kwargs:
        return f"takes no arguments, got {marker.args!r} {marker.kwargs!r}"
    if plan.spec.speculative_config is None:
        return "needs a speculative_config: it compares SD with a reference on SD's engine path"
    if plan.spec.endpoints or settings.endpoints:
        return "needs servers the plugin starts (a reference with other settings); running endpoints cannot be"
    if plan.pattern is not None and plan.pattern.search:
        return f"access pattern {plan.pattern.name!r} is a capacity search; the mechanism figure is run()'s"
    if settings.history.baseline_build is not None:
        return "--specdec-baseline-from build: measures two builds; the mechanism figure is one build's run()"
    return ""


def parse_slo_marker(args, kwargs) -> tuple[dict[str, float], float]:
    """``specdec_slo(tpot_ms=50, ttft_x=3, percentile=99)`` -> ({"tpot": 50.0, "ttft_x": 3.0}, 99.0).

    ``*_x`` objectives are multiples of the reference's unloaded median, resolved
    to milliseconds when the test measures (see goodput.resolve_slo).
    """
    from ..analysis.goodput import parse_objectives

    if args:
        raise ValueError(
            f"takes keywords only (ttft_ms=, tpot_ms=, e2el_ms=, ttft_x=, tpot_x=, e2el_x=, percentile=), got {args!r}"
        )
    fields = dict(kwargs)
    percentile = fields.pop("percentile", 99.0)
    if isinstance(percentile, bool) or not isinstance(percentile, (int, float)) or not 0 < percentile <= 100:
        raise ValueError(f"percentile must be a number in (0, 100], got {percentile!r}")
    return parse_objectives(fields), float(percentile)


def _one_arg(name, marker):
    if len(marker.args) != 1:
        kind = "Workload" if name == "workload" else "AccessPattern"
        raise (WorkloadError if name == "workload" else PatternError)(
            f"@pytest.mark.{name} takes one catalog name or {kind}(...) and keyword overrides, got {marker.args!r}"
        )
    return marker.args[0], dict(marker.kwargs)


@dataclass(frozen=True)
class SetupDecision:
    """What happens to a test before it runs: skipped or failed with `reason`."""

    action: str  # "skip" or "fail"
    reason: str


@dataclass
class Collected:
    """What collection decided: the order to run items in and which to deselect."""

    order: list[int]  # indices of the items to run, in order
    deselected: list[int] = field(default_factory=list)  # indices of the items the shard leaves to others
    groups: dict[str, str] = field(default_factory=dict)  # node id -> target (xdist scheduling group)
