"""A concurrency sweep of one SD configuration: a result per level, and where SD stops paying.

The studies disagree on how far SD pays as load grows (one saw a k=21 tree
fall below 1x by batch 64, another saw gains persist to 200 concurrent
requests on a mixture-of-experts model), so the crossover is worth a gate:
`SweepResult.crossover()` interpolates the concurrency at which the
throughput speedup crosses 1 between measured levels (`load.crossover`),
with "never, up to the highest measured" a valid answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..analysis.frontier import (
    FrontierReport,
    PER_GPU,
    PER_USER,
    Frontier,
    WorthAtTarget,
    frontier_at_or_above,
    operating_point,
    worth_at,
)
from ..formatting import figure
from ..load.crossover import Crossover, crossover
from ..verdict.metric_names import geometric_mean, speedup_name
from ..verdict.sequential.rule import FAILED, PASSED, Decision
from .frontier_figures import FrontierFigures
from .result import SpecDecResult


@dataclass
class SweepResult:
    """One `SpecDecResult` per concurrency level, lowest first."""

    results: list[SpecDecResult] = field(default_factory=list)
    # Both frontiers and the per-user speeds the checks read, for the report rows (set by specdec.sweep()).
    report: FrontierReport | None = field(default=None, repr=False)

    @property
    def levels(self) -> list[int]:
        return [result.pattern.get("max_concurrency") for result in self.results]

    def speedups(self, metric: str = "output_throughput") -> list[tuple[int, float]]:
        """(concurrency, speedup) per level; NaN where the speedup is unavailable (a client-bound level),
        so the crossover skips it and says so."""
        return [
            (level, math.nan if result.unavailable(speedup_name(metric)) else result.speedup(metric))
            for level, result in zip(self.levels, self.results)
        ]

    def geometric_mean_speedup(self, metric: str = "output_throughput") -> float:
        """The published studies' one-number summary of a sweep (NaN when no level has a speedup)."""
        return geometric_mean(value for _, value in self.speedups(metric))

    def crossover(self) -> Crossover:
        return crossover(self.speedups())

    def assert_crossover(self, min_concurrency: float) -> "SweepResult":
        """SD must keep paying (throughput speedup >= 1) up to at least `min_concurrency`.

        Passes when the speedup crosses 1 at or above it, or never crosses up to
        a measured level at or above it; fails when it crosses earlier, never
        paid, or the sweep stopped below `min_concurrency` (nothing measured there).
        """
        from ..verdict.assertions import failure_message

        if isinstance(min_concurrency, bool) or not isinstance(min_concurrency, (int, float)) or min_concurrency <= 0:
            raise ValueError(f"assert_crossover(min_concurrency=...) must be a number > 0, got {min_concurrency!r}")
        found = self.crossover()
        if found.status == "crosses" and found.value >= min_concurrency:
            return self
        if found.status == "never" and found.highest is not None and found.highest >= min_concurrency:
            return self
        if found.status == "never":
            why = (
                f"SD paid at every level measured, but the sweep stops at concurrency {found.highest:g}, "
                f"below {min_concurrency:g}: nothing was measured there"
            )
        else:
            why = found.describe()
        levels = ", ".join(f"{level}: {value:.2f}x" for level, value in self.speedups())
        result = self.results[-1] if self.results else None
        message = (
            f"SD stops paying below concurrency {min_concurrency:g} for "
            f"{result.spec.label() if result else 'this sweep'}: {why}\nspeedup by concurrency: {levels}"
        )
        raise AssertionError(failure_message(message, [], result) if result else message)

    def attach_report(self) -> FrontierReport:
        """Both frontiers as the report's, given to every level's result (its row carries them); the per-user speeds
        the checks read join it as they are read."""
        self.report = FrontierReport(*self.frontiers())
        for result in self.results:
            result.frontier = self.report
        return self.report

    def frontiers(self, gpus: int | None = None) -> tuple[Frontier, Frontier]:
        """The reference's and SD's throughput-interactivity operating points, per draw and level (analysis.frontier:
        tok/s per user against tok/s per GPU); `gpus`: the GPUs each server uses (the marker's tensor parallel
        size unless given; a CPU server counts as one)."""
        if not self.results:
            raise ValueError("a sweep with no level measured has no frontier")
        spec = self.results[0].spec
        per_server = gpus if gpus is not None else max(1, int(getattr(spec, "tensor_parallel_size", 1) or 1))
        sides = []
        for label, runs_of in (("reference", lambda r: r.reference_runs), ("SD", lambda r: r.speculative_runs)):
            draws = min(len(runs_of(result)) for result in self.results)
            sides.append(
                Frontier(
                    label,
                    tuple(
                        tuple(
                            _point(level, runs_of(result)[draw], per_server)
                            for level, result in zip(self.levels, self.results)
                        )
                        for draw in range(draws)
                    ),
                )
            )
        return sides[0], sides[1]

    def worth_at(
        self, per_user: float, usd_per_gpu_hour: float | None = None, gpus: int | None = None
    ) -> WorthAtTarget:
        """SD's worth at `per_user` tok/s per user: each side's tok/s per GPU there on its frontier (never
        extrapolated), their ratio per draw, and the cost per 1M output tokens at `usd_per_gpu_hour`; the speed
        joins the report's frontier table and figure."""
        worth = worth_at(*self.frontiers(gpus), per_user, usd_per_gpu_hour)
        self._keep(worth)
        return worth

    def assert_pays_at(self, per_user: float, min: float = 1.0, gpus: int | None = None) -> WorthAtTarget:  # noqa: A002
        """At `per_user` tok/s per user, SD's frontier gives at least `min` times the reference's tok/s per GPU,
        decided by the sequential rule on the sweep's draws (each draw's own frontiers): passed, failed, or
        undecided where the interval straddles the zone (--specdec-strict fails it).  A target SD's frontier does
        not reach fails; one only SD's reaches passes; one outside the sweep's range is undecided."""
        if isinstance(min, bool) or not isinstance(min, (int, float)) or min <= 0:
            raise ValueError(f"assert_pays_at(min=...) must be a ratio > 0, got {min!r}")
        worth = self.worth_at(per_user, gpus=gpus)
        decision = worth.decide_at_least(min)
        self._settle(f"tok/s per GPU at {per_user:.3g} tok/s per user >= {min:g}x the reference's", decision, worth)
        return worth

    def assert_frontier_at_or_above(self, low: float, high: float, gpus: int | None = None) -> "SweepResult":
        """SD's frontier is at or above the reference's from `low` to `high` tok/s per user: decided at the range's
        ends and every frontier point inside it (the lines are straight between them), each as `assert_pays_at`
        with min=1; passed when every one passed, failed when any failed."""
        _, decided = frontier_at_or_above(*self.frontiers(gpus), low, high)
        for worth, _ in (decided[0], decided[-1]):  # the range's ends join the report
            self._keep(worth)
        # The range's outcome is the conjunction, so its worst point stands for it: a failed one, else an undecided
        # one, else the lowest ratio.
        worth, decision = min(
            decided, key=lambda pair: (pair[1].outcome != FAILED, pair[1].outcome == PASSED, pair[1].estimate)
        )
        self._settle(
            f"SD's frontier at or above the reference's from {low:g} to {high:g} tok/s per user",
            decision,
            worth,
            detail="; ".join(f"{w.per_user:.3g} tok/s per user: {d.outcome} ({d.ratio:.3g}x)" for w, d in decided),
        )
        return self

    def assert_no_regression(
        self,
        per_user: float | None = None,
        metrics: list[str] | None = None,
        tolerance: float | dict[str, float] | None = None,
        allow_unavailable=(),
        gpus: int | None = None,
    ) -> "SweepResult":
        """Compare the sweep's frontier with this test's stored baseline (recorded with --specdec-update-baselines):
        each level's operating point on both sides (``per_gpu_c<level>``, ``per_user_c<level>``) and, with
        `per_user`, SD's per-GPU throughput over the reference's at that speed (``frontier_ratio``), draw by draw
        like any gated figure (measure.frontier_figures).  The test's baseline then holds its frontier."""
        result = self.results[-1] if self.results else None
        if result is None or result.gate is None:
            raise RuntimeError("assert_no_regression needs a baseline gate and a measured sweep: use specdec.sweep()")
        figures = FrontierFigures(self.results, self.frontiers(gpus), per_user)
        if per_user is not None:
            self.worth_at(per_user, gpus=gpus)  # the target joins the report's frontier table and figure
        result.gate.check(
            figures, metrics=metrics or figures.metrics(), tolerance=tolerance, allow_unavailable=allow_unavailable
        )
        return self

    def frontier_table(self, per_user: float | None = None, usd_per_gpu_hour: float | None = None) -> str:
        """Both sides' operating points and frontiers as plain text (failure messages, scripts), with SD's worth at
        `per_user` when given."""
        reference, speculative = self.frontiers()
        lines = [f"{PER_USER}\n{PER_GPU}", "side       concurrency  tok/s per user  tok/s per GPU  on frontier"]
        for side in (reference, speculative):
            on = {(p.per_user, p.per_gpu) for p in side.frontier()}
            for p in side.points():
                lines.append(
                    f"{side.label:<10} {p.concurrency:>11g}  {p.per_user:>14.2f}  {p.per_gpu:>13.2f}  "
                    + ("yes" if (p.per_user, p.per_gpu) in on else "no")
                )
        if per_user is not None:
            worth = worth_at(reference, speculative, per_user, usd_per_gpu_hour)
            lines.append(_worth_line(worth))
        return "\n".join(lines)

    def _keep(self, worth: WorthAtTarget) -> None:
        """A per-user speed a check read joins the report's frontier (its rows, table and figure)."""
        if self.report is not None:
            self.report.targets.append(worth)

    def _settle(self, name: str, decision: Decision, worth: WorthAtTarget, detail: str = "") -> None:
        """Keep the decision with the sweep's last level (the row and the session's undecided lines read it), and
        fail on a failed one, or an undecided one under --specdec-strict."""
        result = self.results[-1]
        if decision.outcome == PASSED:
            return
        words = f"{name} for {result.spec.label()}: {decision.describe()}\n{_worth_line(worth)}" + (
            f"\n{detail}" if detail else ""
        )
        if decision.outcome == FAILED:
            raise AssertionError(f"{words}\n{self.frontier_table()}")
        result.decisions[name] = decision
        if getattr(result, "strict", False):
            raise AssertionError(f"{words}\nundecided, and --specdec-strict fails an undecided check")

    def summary(self) -> dict[str, Any]:
        return {
            "levels": self.levels,
            "speedups": [v for _, v in self.speedups()],
            "geometric_mean_speedup": self.geometric_mean_speedup(),
            "crossover": self.crossover().as_dict(),
        }

    def __repr__(self) -> str:
        return f"<SweepResult {len(self.results)} levels, crossover: {self.crossover().describe()}>"


def _point(level: float, run, gpus: int):
    """A run's operating point (None where its TPOT or throughput is missing)."""
    figures = run.metrics.as_dict()
    return operating_point(
        level, figures.get("output_throughput", math.nan), figures.get("median_tpot_ms", math.nan), gpus
    )


def _worth_line(worth: WorthAtTarget) -> str:
    if worth.ratio is None:
        return f"at {worth.per_user:.3g} tok/s per user: {worth.why or 'no ratio'}"
    costs = worth.usd_per_million()
    priced = (
        f"; USD per 1M output tokens {costs['reference']:.3g} -> {costs['speculative']:.3g} ({worth.saving():+.1%} saved)"
        if costs["reference"] is not None
        else ""
    )
    ratios = ", ".join(figure(r, ".3f") for r in worth.as_dict()["draw_ratios"])
    return (
        f"at {worth.per_user:.3g} tok/s per user: reference {worth.reference.per_gpu:.3g} tok/s per GPU, SD "
        f"{worth.speculative.per_gpu:.3g} ({worth.ratio:.3f}x; per draw {ratios}){priced}"
    )
