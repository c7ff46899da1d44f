"""Reference runs shared by every SD configuration of a target: planned, measured once, drift-checked.

A part of `measurements.Measurements` (`measurements.references`), which measures for it: the reference's
traffic is measured once per (target, workload, the pattern's traffic, seed) and reused, and the session's
end measures the first of them again (`check_drift`).
"""

from __future__ import annotations

import collections
import json
from typing import TYPE_CHECKING, Any, Callable

from ..analysis.drift import compare
from ..load.patterns import AccessPattern
from .result import Run
from .warm_up import REQUESTS_PER_ROUND
from ..engines.server_spec import ServerSpec
from ..load.workloads import Workload

if TYPE_CHECKING:  # the measurements hold this part; the part measures through them
    from .measurements import Measurements

WARMUP_REQUESTS = REQUESTS_PER_ROUND
DEATH_GRACE_S = 3.0
WARMUP_TOKENS = 16
# The warm-up sends prompts of its own (see result.repeat_seed for why).
WARMUP_SEED_OFFSET = 104729


class ReferenceRuns:
    """The reference side of `Measurements`: the runs it measured, the runs and searches planned, by key."""

    def __init__(self, measurements: Measurements):
        self.measurements = measurements  # measures, builds the prompts, reports events
        self.reference_measurements: collections.Counter[str] = collections.Counter()  # per reference_key
        self._references: dict[str, list[Run]] = {}
        self._reference_jobs: dict[str, tuple] = {}  # key -> what measuring it again needs (drift check)
        self._planned: dict[str, list[tuple[ServerSpec, Workload, AccessPattern, int]]] = {}
        self._planned_searches: dict[str, dict[str, Callable[[], Any]]] = {}  # target -> key -> search
        self._searches: dict[str, Any] = {}  # key -> a planned search's result (reference_search)

    @staticmethod
    def reference_key(
        spec: ServerSpec, workload: Workload, pattern: AccessPattern, seed: int = 0, logprobs=None
    ) -> str:
        """One reference traffic of a target: what `reference_measurements` counts, measured once a session.

        The pattern's traffic, not its name: a sweep's ``concurrency_1`` and ``throughput_low`` with as many
        prompts send the same requests the same way (the README's main job measures both)."""
        traffic = {field: value for field, value in pattern.describe().items() if field != "name"}
        return json.dumps([spec.target, workload.describe(), traffic, seed, logprobs], sort_keys=True, default=str)

    def plan_reference(self, spec: ServerSpec, workload: Workload, pattern: AccessPattern, seed: int = 0) -> None:
        """Announce a reference run a later test will need.

        When the reference server is up for one test, every announced
        reference run of the same target is measured right then, so the
        reference server starts once however the SD tests are ordered.
        """
        queue = self._planned.setdefault(spec.target, [])
        key = self.reference_key(spec, workload, pattern, seed, None)
        if all(self.reference_key(*job, None) != key for job in queue):
            queue.append((spec, workload, pattern, seed))

    def measure_planned_references(self, spec: ServerSpec) -> None:
        """Measure every announced reference run of `spec`'s target that is still missing.

        Called before an SD server of that target is first needed, so the
        reference server (often already up) serves all its runs in one go.
        """
        for job in self._planned.pop(spec.target, []):
            key = self.reference_key(*job, None)
            if key not in self._references:
                job_spec, workload, pattern, seed = job
                prompts = self.measurements.prompts(job_spec.model, workload, pattern, seed)
                self._measure_reference(key, job_spec, workload, pattern, prompts, seed, None)
        for key, search in self._planned_searches.pop(spec.target, {}).items():
            if key not in self._searches:
                try:
                    self._searches[key] = search()
                except Exception as exc:  # the test that planned it fails with it, not the test running now
                    self._searches[key] = _SearchFailed(exc)

    def plan_reference_search(self, spec: ServerSpec, key: str, search: Callable[[], Any]) -> None:
        """Announce a search on the reference's server (a capacity search's reference side): it runs with
        the planned reference runs, while that server is up, and `reference_search(key)` returns its result."""
        self._planned_searches.setdefault(spec.target, {}).setdefault(key, search)

    def reference_search(self, spec: ServerSpec, key: str, search: Callable[[], Any]) -> Any:
        """A planned search's result, or `search()` run now (once a session per key)."""
        self.measure_planned_references(spec)
        if key not in self._searches:
            self._searches[key] = search()
        found = self._searches[key]
        if isinstance(found, _SearchFailed):
            raise found.error
        return found

    def reference(
        self,
        spec: ServerSpec,
        workload: Workload,
        pattern: AccessPattern,
        prompts: list,
        *,
        seed: int = 0,
        logprobs: int | None = None,
    ) -> list[Run]:
        """The no-SD runs for `spec`'s target; measured once per session per traffic."""
        key = self.reference_key(spec, workload, pattern, seed, logprobs)
        if key not in self._references:
            self.measure_planned_references(spec)
        if key not in self._references:
            self._measure_reference(key, spec, workload, pattern, prompts, seed, logprobs)
        return self._references[key]

    def _measure_reference(self, key, spec, workload, pattern, prompts, seed, logprobs) -> None:
        reference = spec.reference()
        self.reference_measurements[key] += 1
        self._reference_jobs[key] = (spec, workload, pattern, prompts, seed, logprobs)
        self._references[key] = self.measurements.measure(
            reference, workload, pattern, prompts, seed=seed, logprobs=logprobs, what="reference"
        )

    def replace(self, key: str, runs: list[Run]) -> None:
        """The reference's runs of `key` measured again (a flagged comparison): later tests reuse these."""
        self._references[key] = runs

    def check_drift(self) -> list:
        """Each reference traffic of the session measured once more, against its first run (analysis.drift)."""
        checks = []
        for key, (spec, workload, pattern, prompts, seed, logprobs) in self._reference_jobs.items():
            (again,) = self.measurements.measure(
                spec.reference(),
                workload,
                pattern,
                prompts,
                seed=seed,
                logprobs=logprobs,
                what="reference again (drift check)",
                repeats=1,
            )
            check = compare(spec.target, f"{workload.name}/{pattern.name} (seed {seed})", self._references[key], again)
            self.measurements.on_event(f"drift check: {check.describe()}")
            checks.append(check)
        return checks


class _SearchFailed:
    """A planned search that raised while another test's runs were being measured."""

    def __init__(self, error: Exception):
        self.error = error
