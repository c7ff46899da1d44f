"""--specdec-measure-drift: each test's servers started once more, for the drift a stored-baseline gate allows for.

A comparison against a stored baseline pays for the drift between two sessions, which no run in this session
shrinks.  Where no results history knows the machine's drift yet (verdict.learned_drift), the session can measure
the nearest thing it can see: how far one draw's figures move when the same configuration's server is started
anew.  After a test's runs, its reference server and its SD server are each started once more and sent the test's
first draw again (after a warm-up, as every measured server is); the log change of each figure from the first start
to the new one is kept.  The changes pool over every test of the session on the same engine build, so each test's
gate reads every start anew measured so far, its own included (verdict.learned_drift.measured_drift).

It costs two server starts a test (a CPU vLLM server starts in tens of seconds); the session says so before its
first test.  A running endpoint is not the plugin's to start: its tests have no such figure, with the reason.
"""

from __future__ import annotations

import math
from collections import defaultdict

from ..verdict.learned_drift import StartSpread

# The run figures whose change is kept: those a gate's speedups are of, and each side's own figures it compares.
DRIFT_FIGURES = ("output_throughput", "median_tpot_ms", "median_ttft_ms")
ENDPOINTS = "its servers are running endpoints, which the plugin does not start anew: no drift measured"


class StartDrifts:
    """The session's starts anew, by engine build: each figure's log changes, pooled over the tests measured."""

    def __init__(self):
        self._changes: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        self._restarts: dict[tuple, int] = defaultdict(int)

    def add(self, build: tuple, changes: dict[str, float]) -> None:
        """One server started anew on `build` (engine, version): each figure's log change."""
        self._restarts[build] += 1
        for figure, change in changes.items():
            self._changes[build][figure].append(change)

    def spread(self, build: tuple) -> StartSpread:
        """Every change on `build` so far, as the gate reads them."""
        changes = {figure: tuple(values) for figure, values in self._changes[build].items()}
        return StartSpread(changes, self._restarts[build])


def changes_between(first: dict, again: dict) -> dict[str, float]:
    """The log change of each drift figure from `first` to `again` (run metrics, `RunMetrics.as_dict()`), where
    both have a positive value."""
    found = {}
    for figure in DRIFT_FIGURES:
        before, after = first.get(figure), again.get(figure)
        usable = all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (before, after))
        if usable:
            found[figure] = math.log(after / before)
    return found


def measure_start_drift(
    measurements, result, workload, pattern, prompts, *, seed: int = 0, logprobs=None
) -> StartSpread:
    """Start `result`'s reference server and SD server anew, send each the test's first draw again, and add their
    changes to the session's (`measurements.start_drifts`); the spread of every start anew on this engine build."""
    spec = result.spec
    if spec.endpoints:
        return StartSpread(why_none=ENDPOINTS)
    build = (spec.engine, result.engine_version)
    for side, first in ((spec.reference(), result.reference_runs[0]), (spec, result.speculative_runs[0])):
        measurements.pool.start_anew(side)
        name = "reference" if side.speculative_config is None else "SD"
        (again,) = measurements.measure(
            side, workload, pattern, prompts, seed=seed, logprobs=logprobs, what=f"{name} started anew", repeats=1
        )
        changes = changes_between(first.metrics.as_dict(), again.metrics.as_dict())
        measurements.start_drifts.add(build, changes)
        shown = ", ".join(f"{figure} {math.expm1(change):+.1%}" for figure, change in changes.items())
        measurements.on_event(f"{spec.label()}: {name} started anew, its first draw again: {shown or 'no figure'}")
    return measurements.start_drifts.spread(build)


def measure_drift_cost(plans, runnable) -> str:
    """What --specdec-measure-drift will cost this session, said before its first test: two more server starts
    for each test that starts its own servers (`runnable(plan)`: it would run here), none for an endpoint's."""
    started = [
        p
        for p in plans
        if runnable(p) and p.spec.speculative_config and not p.spec.endpoints and not (p.pattern and p.pattern.search)
    ]
    endpoints = sum(1 for p in plans if runnable(p) and p.spec.endpoints)
    line = (
        f"--specdec-measure-drift: each test's reference and SD servers are started once more after its runs: "
        f"2 more server starts a test, up to {2 * len(started)} for the {len(started)} test(s) here that start "
        "servers and call specdec.run() (a concurrency or acceptance sweep, a capacity search or a builds A/B "
        "measures none)"
    )
    return line + (f"; {endpoints} endpoint test(s) measure none" if endpoints else "")
