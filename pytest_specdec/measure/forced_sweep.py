"""A forced-acceptance sweep of one SD configuration: a result per forced length, and where SD starts to pay.

`SpecDecTest.sweep_acceptance` measures it: the reference once, then one SD server start per forced length
(it is a server setting), each result checked for the length its server honoured.  The curve (break-even,
fitted step cost, the theory's, each length's interval from the timing spread pooled over the lengths) is
analysis/forced_sweep.py's; the checks here are decided by the sequential rule at the lengths measured, as
`assert_speedup(min=1.0)` decides one, sending draws again while undecided.
"""

from __future__ import annotations

import math
from typing import Any

from ..analysis.forced_sweep import ForcedCurve, ForcedPoint, forced_curve, pooled_intervals
from ..analysis.step_figures import cost_ratio_of
from ..analysis.cost_ratio import MEASURED
from .result import SpecDecResult

PAYS = 1.0  # SD pays where its output-throughput speedup is above 1


class AcceptanceSweep:
    """One `SpecDecResult` per forced acceptance length, shortest first."""

    def __init__(self, results: list[SpecDecResult]):
        self.results = sorted(results, key=lambda result: result.forced.length)
        self._publish()

    def _publish(self) -> ForcedCurve:
        """The curve, given to every result (its report row)."""
        curve = self.curve()
        for result in self.results:
            result.forced_sweep = curve
        return curve

    @property
    def lengths(self) -> list[float]:
        return [result.forced.length for result in self.results]

    def at(self, length: float) -> SpecDecResult:
        """The result at forced length `length` (one the sweep measured)."""
        for result in self.results:
            if math.isclose(result.forced.length, length, abs_tol=1e-9):
                return result
        raise ValueError(
            f"forced acceptance {length!r} was not measured; the sweep measured {', '.join(f'{x:g}' for x in self.lengths)}"
        )

    def curve(self) -> ForcedCurve:
        """Break-even, fitted step cost and the theory's, over every length (analysis.forced_sweep): each
        length's first sends of its draws, as the row's speedup reads them."""
        k = self.results[0].spec.speculative_config["num_speculative_tokens"]
        intervals = pooled_intervals([result.repeat_speedups() for result in self.results])
        return forced_curve(k, [_point(result, *interval) for result, interval in zip(self.results, intervals)])

    def assert_break_even(
        self, *, max_length: float | None = None, min_length: float | None = None
    ) -> "AcceptanceSweep":
        """The break-even is at or below `max_length` (SD pays there) and at or above `min_length` (SD does not
        pay there), each a length the sweep measured.  Each bound is decided by the sequential rule at that
        length, as `assert_speedup(min=1.0)` or `assert_speedup(max=1.0)` decides it (the speedup rises with
        acceptance); undecided is its own outcome, which --specdec-strict fails."""
        if max_length is None and min_length is None:
            raise ValueError("assert_break_even() takes max_length=, min_length= or both")
        for length, pays in ((max_length, True), (min_length, False)):
            if length is None:
                continue
            result = self.at(length)
            try:
                result.assert_speedup(**({"min": PAYS} if pays else {"max": PAYS}))
            except AssertionError as error:
                side = "above" if pays else "below"
                raise AssertionError(
                    f"break-even {side} forced acceptance {length:g} for {result.spec.label()}: "
                    f"{self.curve().describe()}\n{self.table()}\n{error}"
                ) from None
        return self

    def assert_pays_from(self, min_length: float) -> "AcceptanceSweep":
        """SD pays at every forced acceptance measured from `min_length` up, each decided as
        `assert_speedup(min=1.0)`; `min_length` must be one the sweep measured."""
        self.at(min_length)
        for result in self.results:
            if result.forced.length >= min_length - 1e-9:
                try:
                    result.assert_speedup(min=PAYS)
                except AssertionError as error:
                    raise AssertionError(
                        f"SD does not pay at forced acceptance {result.forced.length:g} (asked from "
                        f"{min_length:g} up) for {result.spec.label()}: {self.curve().describe()}\n"
                        f"{self.table()}\n{error}"
                    ) from None
        return self

    def table(self) -> str:
        """The points as a plain-text table (failure messages, scripts)."""
        curve = self.curve()
        lines = ["forced  measured  speedup (interval)      decode speedup  theory"]
        for point in curve.points:
            theory = curve.theory_speedup(point.length)
            lines.append(
                f"{point.length:>6.2f}  {point.measured_length:>8.2f}  {point.speedup:.3f}x "
                f"({point.low:.3f}-{point.high:.3f})  {point.decode_speedup:>13.3f}x  "
                + (f"{theory:.3f}x" if theory is not None else "-")
            )
        return "\n".join(lines)

    def summary(self) -> dict[str, Any]:
        return self.curve().as_dict()

    def __repr__(self) -> str:
        return f"<AcceptanceSweep {len(self.results)} lengths: {self.curve().describe()}>"


def _point(result: SpecDecResult, low: float, high: float) -> ForcedPoint:
    """A length's figures, with its speedup's interval (analysis.forced_sweep.pooled_intervals)."""
    cost = cost_ratio_of(result)
    return ForcedPoint(
        result.forced.length,
        result.speedup(),
        low,
        high,
        result.speedup("median_tpot_ms"),
        result.acceptance_length,
        cost.value if cost.source == MEASURED else None,
    )
