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

from ..load.crossover import Crossover, crossover
from ..verdict.metric_names import geometric_mean, speedup_name
from .result import SpecDecResult


@dataclass
class SweepResult:
    """One `SpecDecResult` per concurrency level, lowest first."""

    results: list[SpecDecResult] = field(default_factory=list)

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

    def summary(self) -> dict[str, Any]:
        return {
            "levels": self.levels,
            "speedups": [v for _, v in self.speedups()],
            "geometric_mean_speedup": self.geometric_mean_speedup(),
            "crossover": self.crossover().as_dict(),
        }

    def __repr__(self) -> str:
        return f"<SweepResult {len(self.results)} levels, crossover: {self.crossover().describe()}>"
