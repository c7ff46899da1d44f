"""The speedup against a forced acceptance length: the acceptance at which SD starts to pay here.

At a forced acceptance the engine accepts drafts at a set mean length L whatever they say
(engines/forced_acceptance.py), so every drafted step costs the same at every L: the drafter still proposes
k tokens and the target still verifies k+1 positions.  With that cost C in plain decode steps, a step yields
L tokens and the decode speedup is L / C; SD pays where L > C.  Leviathan et al.'s model puts C at 1 + k*c,
c the draft's cost per drafted token in target forwards (analysis.theory), which one operating point
measures (analysis.step_figures); a sweep over L measures C itself, and the break-even where the speedup
crosses 1.

Pure functions over the sweep's points; measure/forced_sweep.py measures them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..verdict.sequential.student_t import t_quantile
from .theory import break_even_length


@dataclass(frozen=True)
class ForcedPoint:
    """One forced length's figures: the output-throughput speedup with its interval (`pooled_intervals`), the
    decode (median TPOT) speedup, the acceptance length the server measured, and c measured at this point
    (None where the run could not solve it)."""

    length: float
    speedup: float
    low: float
    high: float
    decode_speedup: float
    measured_length: float
    cost_ratio: float | None = None


def pooled_intervals(draws_by_length: Sequence[Sequence[float]], level: float = 0.95) -> list[tuple[float, float]]:
    """Each length's interval for its speedup, from its draws' speedups (`draws_by_length`, one list a length).

    At a forced acceptance a draw's speedup does not depend on its prompts, so draws of one length differ
    by timing alone, and timing spreads alike at every length of one sweep on one machine: the variance of the
    log speedup is pooled over all lengths (each length's draws around their own mean), and each length's
    interval is its draws' geometric mean times exp(+-t * sd / sqrt(draws)), t on the pooled degrees of
    freedom.  Two draws a length leave one degree of freedom each, which alone would give a t of 12.7; four
    lengths pooled give four.  (0, inf) where nothing is left to pool.
    """
    logs = [[math.log(v) for v in draws if math.isfinite(v) and v > 0] for draws in draws_by_length]
    squares = sum(sum((x - statistics.fmean(xs)) ** 2 for x in xs) for xs in logs if len(xs) > 1)
    df = sum(len(xs) - 1 for xs in logs if len(xs) > 1)
    intervals = []
    for xs in logs:
        if not xs or df == 0:
            intervals.append((0.0, math.inf))
            continue
        half = t_quantile((1 - level) / 2, df) * math.sqrt(squares / df / len(xs))
        centre = statistics.fmean(xs)
        intervals.append((math.exp(centre - half), math.exp(centre + half)))
    return intervals


def crossing(points: Sequence[tuple[float, float]]) -> float | None:
    """The length where a speedup rising with acceptance first reaches 1, interpolated linearly between the
    two measured lengths around it; None when every finite point is on one side of 1."""
    finite = sorted((x, y) for x, y in points if math.isfinite(y))
    for (x1, y1), (x2, y2) in zip(finite, finite[1:]):
        if y1 < 1 <= y2:
            return x1 + (1 - y1) * (x2 - x1) / (y2 - y1)
    return None


def fitted_step_cost(points: Sequence[tuple[float, float]]) -> float | None:
    """C in speedup = L / C, least squares through the origin (C = sum(L^2) / sum(L * S)); None without a
    finite positive point."""
    finite = [(x, y) for x, y in points if math.isfinite(y) and y > 0]
    if not finite:
        return None
    return sum(x * x for x, _ in finite) / sum(x * y for x, y in finite)


@dataclass(frozen=True)
class BreakEven:
    """Where the output-throughput speedup crosses 1, as measured.

    `value`: interpolated through the speedups (None when they do not cross).  The range it lies in, the same
    interpolation through the intervals' ends (the speedup rises with acceptance):
    `earliest`, where the upper ends reach 1 (None: SD may pay at the shortest length measured already;
    with `surely_beyond`, even the upper ends stay below 1 and the break-even is beyond the longest);
    `latest`, where the lower ends reach 1 (None: SD may not pay even at the longest).
    """

    value: float | None
    earliest: float | None
    latest: float | None
    shortest: float
    longest: float
    surely_beyond: bool = False
    paid_throughout: bool = False  # every speedup measured at or above 1

    def describe(self) -> str:
        if self.surely_beyond:
            low = f"beyond {self.longest:g}"
        else:
            low = f"{self.earliest:.2f}" if self.earliest is not None else f"at or below {self.shortest:g}"
        high = f"{self.latest:.2f}" if self.latest is not None else f"beyond {self.longest:g}"
        if self.value is not None:
            return f"break-even at forced acceptance {self.value:.2f} (from {low} to {high})"
        if self.surely_beyond:
            return f"SD does not pay at any forced acceptance measured, up to {self.longest:g}"
        if self.paid_throughout:
            return (
                f"SD pays at every forced acceptance measured, from {self.shortest:g} (break-even from {low} to {high})"
            )
        return f"the speedup does not cross 1 between forced acceptance {self.shortest:g} and {self.longest:g} (break-even from {low} to {high})"


@dataclass(frozen=True)
class ForcedCurve:
    """A forced-acceptance sweep of one configuration: its points, the break-even, the fitted step cost (on
    the decode speedup, where the model holds) and the theory's, from the median c measured."""

    k: int
    points: tuple[ForcedPoint, ...]
    break_even: BreakEven
    step_cost: float | None  # fitted: plain decode steps per drafted step
    cost_ratio: float | None  # the median c measured over the points

    @property
    def theory_step_cost(self) -> float | None:
        """1 + k*c at the median c measured: the step cost the theory column infers from one operating point."""
        return None if self.cost_ratio is None else break_even_length(self.k, self.cost_ratio)

    def theory_speedup(self, length: float) -> float | None:
        """The theory's decode speedup at forced length `length`: L / (1 + k*c)."""
        cost = self.theory_step_cost
        return None if cost is None else length / cost

    def describe(self) -> str:
        fitted = f"{self.step_cost:.2f}" if self.step_cost is not None else "unavailable (no decode speedup)"
        theory = f"{self.theory_step_cost:.2f}" if self.theory_step_cost is not None else "unavailable (c unmeasured)"
        return f"{self.break_even.describe()}; step cost fitted {fitted}, the theory's 1 + k*c {theory} plain steps"

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe, for the row and the reports."""
        return {
            "k": self.k,
            "points": [asdict(point) for point in self.points],
            "break_even": {**asdict(self.break_even), "describe": self.break_even.describe()},
            "step_cost": self.step_cost,
            "cost_ratio": self.cost_ratio,
            "theory_step_cost": self.theory_step_cost,
            "describe": self.describe(),
        }


def forced_curve(k: int, points: Sequence[ForcedPoint]) -> ForcedCurve:
    """The curve of `points` (any order) at draft length `k`."""
    if not points:
        raise ValueError("a forced-acceptance curve needs at least one measured length")
    ordered = tuple(sorted(points, key=lambda p: p.length))
    lengths = [p.length for p in ordered]
    costs = [p.cost_ratio for p in ordered if p.cost_ratio is not None and math.isfinite(p.cost_ratio)]
    earliest, beyond = _earliest(ordered)
    return ForcedCurve(
        k,
        ordered,
        BreakEven(
            crossing([(p.length, p.speedup) for p in ordered]),
            earliest,
            _latest(ordered),
            lengths[0],
            lengths[-1],
            beyond,
            all(p.speedup >= 1 for p in ordered),
        ),
        fitted_step_cost([(p.length, p.decode_speedup) for p in ordered]),
        statistics.median(costs) if costs else None,
    )


def _earliest(points: Sequence[ForcedPoint]) -> tuple[float | None, bool]:
    """Where the intervals' upper ends reach 1 (None: at 1 from the shortest length), and whether they never
    do (the break-even surely beyond the longest)."""
    if points[0].high >= 1:
        return None, False
    found = crossing([(p.length, p.high) for p in points])
    return (points[-1].length, True) if found is None else (found, False)


def _latest(points: Sequence[ForcedPoint]) -> float | None:
    """Where the intervals' lower ends reach 1 (None: not within the lengths measured)."""
    if points[0].low >= 1:
        return points[0].length
    return crossing([(p.length, p.low) for p in points])
