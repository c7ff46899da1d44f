"""The two sides of an SLO capacity search (`slo_capacity`): the objectives, each side's probes and search,
and the reference's side planned to run while its server is up for the target's other reference runs.

The reference's search does not depend on SD's (SD's prefers the loads the reference probed), so a capacity
test announces it when the session plans its reference runs (`plan_capacity`), and it runs in that batch.
"""

from __future__ import annotations

import json

from ...engines.server_spec import ServerSpec
from .search import CapacitySearch, Probe, search_capacity
from ...load.patterns import CATALOG
from ...load.saturation import over_saturation
from ...analysis.goodput import SLOPercentiles, is_relative, parse_objectives, resolve_slo
from ..result import Run

# Four requests one at a time: enough for a median, seconds on a CPU. The same run as a
# `throughput_low` test of this workload with num_prompts=4 measures, so a suite with both
# measures it once (Measurements.reference keys it by target, workload and pattern).
UNLOADED = CATALOG["throughput_low"].with_overrides(num_prompts=4)
# Runs of one probe while the client is the bottleneck: a stall rarely repeats, a client
# too slow for the load always does (then --specdec-client-workers is the remedy).
CLIENT_BOUND_ATTEMPTS = 3


def probe_seed(seed: int, load: float) -> int:
    """Arrivals of the probe at `load`: the same on both sides, different from every other load's."""
    return seed + int(round(load * 1000))


def unloaded_reference(measurements, spec: ServerSpec, workload, *, seed: int = 0) -> dict[str, float]:
    """The reference's median TTFT, TPOT and E2E latency (ms) under no load: `UNLOADED` on this workload.

    Measured once per session per (reference server, workload, seed) and
    reused: it is an ordinary reference run, cached like every other
    (``measurements.reference``). Medians pool every repeat's requests.
    """
    prompts = measurements.prompts(spec.model, workload, UNLOADED, seed)
    runs = measurements.reference(spec, workload, UNLOADED, prompts, seed=seed)
    return SLOPercentiles.of([record for run in runs for record in run.records]).at(50)


def resolve_objectives(
    measurements, spec: ServerSpec, workload, slo, *, seed: int = 0
) -> tuple[dict[str, float], dict[str, dict], dict[str, float]]:
    """The test's objectives in ms, how each resolved, and the unloaded medians (measured only when needed)."""
    objectives = parse_objectives(slo)
    unloaded = unloaded_reference(measurements, spec, workload, seed=seed) if is_relative(objectives) else {}
    limits, how = resolve_slo(objectives, unloaded)
    return limits, how, unloaded


def _judge(measurements, run: Run, limits: dict[str, float], percentile: float) -> tuple[bool, dict]:
    percentiles = SLOPercentiles.of(run.records)
    holds, why = percentiles.holds(limits, percentile)
    saturation = over_saturation(run.records)
    client_bound = run.metrics.client_bound(measurements.max_dispatch_lag_ms)
    if client_bound:
        # The client, not the server, held requests back (and read their events late): the
        # load was not offered, so the run says nothing of the server either way.
        holds, why = (
            False,
            (
                f"client-bound: p99 dispatch lag {run.metrics.dispatch_lag.p99:.1f} ms over "
                f"the {measurements.max_dispatch_lag_ms:g} ms limit"
            ),
        )
    elif saturation.over_saturated:
        holds, why = False, f"{saturation.reason}; {why}"
    return holds, {
        **percentiles.as_dict(percentile),
        "reason": why,
        "over_saturated": saturation.over_saturated,
        "saturation": saturation.as_dict(),
        "output_throughput": run.metrics.output_throughput,
        "request_throughput": run.metrics.request_throughput,
        "client_bound": client_bound,
    }


def search_side(measurements, side_spec, what, workload, pattern, prompts, limits, percentile, seed, shared):
    """One side's capacity search: (Capacity, {load: the probe's last run})."""
    runs: dict[float, Run] = {}

    def probe(load: float) -> Probe:
        at = pattern.at_load(load)
        lags = []
        for attempt in range(1, CLIENT_BOUND_ATTEMPTS + 1):
            (run,) = measurements.measure(
                side_spec, workload, at, prompts, seed=probe_seed(seed, load), what=f"{what} probe", repeats=1
            )
            runs[load] = run
            holds, detail = _judge(measurements, run, limits, percentile)
            if not detail["client_bound"]:
                break
            lags.append(run.metrics.dispatch_lag.p99)
            measurements.on_event(
                f"{what} probe at {load:g}: {detail['reason']} (run {attempt} of at most "
                f"{CLIENT_BOUND_ATTEMPTS}): the client set the pace, not the server"
                + ("; running it again" if attempt < CLIENT_BOUND_ATTEMPTS else "")
            )
        if lags:
            detail["client_bound_lags_ms"] = lags
        return Probe(load, holds, detail, offered=not detail["client_bound"])

    return search_capacity(probe, CapacitySearch(**pattern.search_bounds()), shared_loads=shared), runs


def reference_search_key(spec: ServerSpec, workload, pattern, slo, percentile, seed) -> str:
    return json.dumps(
        ["capacity", spec.target, workload.describe(), pattern.describe(), sorted(slo.items()), percentile, seed],
        sort_keys=True,
        default=str,
    )


def reference_side(measurements, spec: ServerSpec, workload, pattern, slo, percentile, seed) -> tuple:
    """The objectives and the reference's search, which SD's does not change: (limits, how, unloaded,
    prompts, reference capacity, reference runs)."""
    limits, how, unloaded = resolve_objectives(measurements, spec, workload, slo, seed=seed)
    prompts = measurements.prompts(spec.model, workload, pattern, seed)
    reference, runs = search_side(
        measurements, spec.reference(), "reference", workload, pattern, prompts, limits, percentile, seed, ()
    )
    return limits, how, unloaded, prompts, reference, runs


def reference_job(measurements, spec: ServerSpec, workload, pattern, slo, percentile: float, seed: int) -> tuple:
    """(key, search) of a capacity test's reference side: what `plan_capacity` announces and
    `measure_capacity` asks for."""
    key = reference_search_key(spec, workload, pattern, slo, percentile, seed)
    return key, lambda: reference_side(measurements, spec, workload, pattern, slo, percentile, seed)


def plan_capacity(measurements, spec: ServerSpec, workload, pattern, slo, percentile: float, *, seed: int = 0) -> None:
    """Announce a capacity test's reference search, so it runs while the reference's server is up for the
    target's other reference runs (two server starts fewer than searching it when the test comes)."""
    measurements.plan_reference_search(
        spec, *reference_job(measurements, spec, workload, pattern, slo, percentile, seed)
    )
