"""Two builds of one engine measured in one session: reference and SD on each, repeats interleaved.

A stored baseline compares with another day, and on these machines another
day is another speed: the same n-gram config on the same prompts paid very
different speedups on boxes of one kind with acceptance unchanged (docs/benchmarks.md, "Figures the code once quoted").  What
holds is the comparison the plugin already makes for SD against no SD: both
sides in one session, on one machine, interleaved.  `BuildRuns` (a part of
`measurements.Measurements`, `measurements.builds`) does that across builds (``--specdec-baseline-from
build:PATH``): repeat r runs this build's reference and SD and the baseline
build's, in the order A B B A A B ..., one server at a time, the same prompts
and arrivals on every side, so the gate compares the two builds repeat by
repeat (paired).  Within a repeat the second build starts where the first
left off (SD, then its reference), which saves a server start per repeat.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..analysis.outputs import compare_outputs
from ..engines import engine_named
from ..engines.server_spec import ServerSpec
from ..load.patterns import AccessPattern
from ..load.workloads import Workload
from ..serving.engine_facts import confounds
from .fairness import cold_flags

if TYPE_CHECKING:  # the measurements hold this part; the part measures through them
    from .measurements import Measurements

THIS, BASELINE = "this", "baseline"
# Facts that name the build itself, not a way it runs: their change is the upgrade, not a confound.
BUILD_OWN_FACTS = frozenset({"version"})


@dataclass(frozen=True)
class Build:
    """One build of an engine: the path that launches it (None: the session's own) and its version."""

    engine: str
    path: str | None
    version: str | None

    def describe(self) -> str:
        where = self.path or "this environment"
        return f"{engine_named(self.engine).title} {self.version or '(version unknown)'} ({where})"

    def as_dict(self) -> dict:
        return {"engine": self.engine, "path": self.path, "version": self.version, "describe": self.describe()}


def build_of(engine: str, path: str | None, version: str | None = None) -> Build:
    """`path`'s build of `engine`, its version read from the path itself (the servers' own is read later)."""
    if version is None:
        version = engine_named(engine).build_version(path)
    return Build(engine, path, version)


@dataclass
class BuildComparison:
    """What a builds A/B measured besides this build's result: the baseline build's, and how they ran."""

    this: Build
    baseline: Build
    baseline_result: object  # the baseline build's SpecDecResult, on the same prompts and arrivals
    order: list[str] = field(default_factory=list)  # the sides in the order they ran, e.g. ["this", "baseline", ...]
    flagged: dict[str, list[str]] = field(default_factory=dict)  # side -> why its speedups are not comparable
    # side -> the kinds of those flags ("client-bound" for a client that held its runs back), which the test's
    # own `result.accept_flags` lets stand for both builds' comparisons; None: not known, every flag counts
    flagged_kinds: dict[str, list[str]] | None = None

    def baseline_unfair(self, accepted: Sequence[str] = ()) -> str | None:
        """Why the baseline build's speedups are not comparable, or None: none of its flags stands, or the
        test accepted each (`result.accept_flags`: a flag the test's traffic raises holds on either build)."""
        why = self.flagged.get(BASELINE)
        kinds = (self.flagged_kinds or {}).get(BASELINE)
        if not why or (kinds is not None and set(kinds) <= set(accepted)):
            return None
        return "the baseline build's comparison: " + "; ".join(why)

    def fact_changes(self, result) -> list[tuple[str, str, str, str]]:
        """(side, fact, baseline's, this build's) for every engine fact both builds reveal that differs,
        the version aside: a build that turned on async scheduling or changed a default changed more than SD."""
        changes = []
        for side, runs_of in (("reference", "reference_runs"), ("SD", "speculative_runs")):
            before = _facts(getattr(self.baseline_result, runs_of))
            now = _facts(getattr(result, runs_of))
            # The rule reference and SD are compared by (serving.engine_facts), B in its first place, A second.
            for found in confounds(before, now, self.this.engine):
                if found.fact not in BUILD_OWN_FACTS:
                    changes.append((side, found.fact, found.reference, found.speculative))
        return changes

    def describe(self, result) -> str:
        """The lines a gate failure and the summary show: both builds, the order, what changed besides SD."""
        this = _with_served_version(self.this, result)
        base = _with_served_version(self.baseline, self.baseline_result)
        letters = " ".join("A" if side == THIS else "B" for side in self.order)
        lines = [
            f"builds A/B in this session: A = this build, {this.describe()}; B = the baseline build, "
            f"{base.describe()}; same prompts and arrivals, sides in the order {letters}"
        ]
        for side, fact, before, now in self.fact_changes(result):
            lines.append(f"the builds differ besides SD ({side} server): {fact} {before} (B) -> {now} (A)")
        for side, why in self.flagged.items():
            lines.append(f"{'this build' if side == THIS else 'the baseline build'}: {'; '.join(why)}")
        return "\n".join(lines)


def _facts(runs) -> dict:
    return dict((runs[0].engine_facts or {}) if runs else {})


def _with_served_version(build: Build, result) -> Build:
    """The version the servers reported where the path could not say."""
    served = getattr(result, "engine_version", None)
    return build if build.version or not served else Build(build.engine, build.path, served)


class BuildRuns:
    """The builds A/B side of `Measurements` (`measurements.builds`), which holds the pool, the prompts and
    `measure`."""

    def __init__(self, measurements: Measurements):
        self.measurements = measurements

    def run_builds(
        self,
        spec: ServerSpec,
        this: Build,
        baseline: Build,
        workload: Workload,
        pattern: AccessPattern,
        *,
        seed: int = 0,
        logprobs: int | None = None,
        slo: dict | None = None,
    ):
        """This build's `SpecDecResult` with ``builds``: the baseline build's result on the same traffic,
        every repeat of both measured in one session (see the module's doc for the order)."""
        specs = {THIS: spec.on_build(this.path), BASELINE: spec.on_build(baseline.path)}
        prompts = self.measurements.prompts(spec.model, workload, pattern, seed)
        runs: dict[str, tuple[list, list]] = {THIS: ([], []), BASELINE: ([], [])}
        order: list[str] = []
        for repeat in range(self.measurements.repeats):
            self._build_repeat(specs, repeat, runs, order, workload, pattern, prompts, seed, logprobs)
        results = {
            side: self.measurements.result_of(specs[side], workload, pattern, prompts, *runs[side], seed, logprobs, slo)
            for side in (THIS, BASELINE)
        }
        flagged, kinds = {}, {}
        for side, result in results.items():
            cold = cold_flags(result)
            why, kinds[side] = [flag.describe() for flag in cold], [flag.kind for flag in cold]
            if held_back := result.client_bound():
                why.append(held_back)
                kinds[side].append("client-bound")
            if why:  # their speedups are not compared (the gate's rule for a flagged comparison)
                flagged[side] = why
                self.measurements.on_event(f"{spec.label()} ({side} build): " + "; ".join(why))
        result = results[THIS]
        result.builds = BuildComparison(this, baseline, results[BASELINE], order, flagged, kinds)
        self.measurements.on_event(result.builds.describe(result))
        return result

    def _build_repeat(self, specs, repeat, runs, order, workload, pattern, prompts, seed, logprobs) -> None:
        """Repeat `repeat` (a draw of the workload) on both builds, reference and SD, in A B B A order."""
        sides = (THIS, BASELINE) if repeat % 2 == 0 else (BASELINE, THIS)
        for position, side in enumerate(sides):
            side_spec = specs[side]
            name = "this build" if side == THIS else "baseline build"
            steps = [(0, side_spec.reference(), "reference"), (1, side_spec, "SD")]
            for slot, step_spec, what in steps if position == 0 else reversed(steps):
                runs[side][slot].extend(
                    self.measurements.measure(
                        step_spec,
                        workload,
                        pattern,
                        prompts,
                        seed=seed,
                        logprobs=logprobs,
                        what=f"{name} {what}",
                        only_repeat=repeat,
                    )
                )
            order.append(side)

    def more_build_draws(self, result, workload, pattern, prompts, draws: int, *, seed: int = 0, logprobs=None):
        """`draws` more draws of the workload on both builds (--specdec-repeats auto, a gate still undecided):
        new prompts on every side, in the same A B B A order, appended to both results with their outputs.
        New draws, not the same ones sent again: both builds' reference and SD are timed on each, and the
        pairs' spread is what the gate decides on, with no drift between sessions to cancel."""
        comparison = result.builds
        specs = {THIS: result.spec, BASELINE: comparison.baseline_result.spec}
        side_results = {THIS: result, BASELINE: comparison.baseline_result}
        start = len(result.speculative_runs)
        for repeat in range(start, start + draws):
            runs: dict[str, tuple[list, list]] = {THIS: ([], []), BASELINE: ([], [])}
            self._build_repeat(specs, repeat, runs, comparison.order, workload, pattern, prompts, seed, logprobs)
            for side, side_result in side_results.items():
                (reference,), (speculative,) = runs[side]
                side_result.reference_runs.append(reference)
                side_result.speculative_runs.append(speculative)
                side_result.outputs_per_repeat.append(
                    compare_outputs(
                        reference.records,
                        speculative.records,
                        decode=self.measurements.tokenizer(result.spec.model).decode,
                        sampling=workload.sampling,
                    )
                )
                side_result._analyses.clear()
