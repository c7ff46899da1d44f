"""Where a concurrency sweep's speedup drops below 1: the concurrency at which SD stops paying.

Re-exported by measure/capacity/search.py (it lived in the capacity search first).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from numbers import Real
from typing import Any
from ..formatting import quantity

__all__ = ["Crossover", "crossover"]


def _concurrency(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"concurrency must be a finite number > 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Crossover:
    """Where a concurrency sweep's speedup drops below 1.

    ``status``: ``crosses`` (``value``: the concurrency at which speedup is 1,
    interpolated linearly in concurrency between the two measured points in
    ``between``), ``never`` (SD pays up to ``highest``), ``below_from_start``
    (speedup < 1 already at ``lowest``), ``unavailable`` (fewer than two
    finite points; see ``reason``). ``skipped``: concurrencies whose speedup
    was NaN and was left out. ``note``: a caveat, e.g. the speedup came back
    above 1 at a higher concurrency.
    """

    status: str
    value: float | None
    lowest: float | None
    highest: float | None
    between: tuple[float, float] | None = None
    skipped: tuple[float, ...] = ()
    reason: str | None = None
    note: str | None = None

    def describe(self) -> str:
        if self.status == "crosses":
            a, b = self.between
            text = (
                f"SD stops paying at ≈ {quantity(self.value)} concurrent requests "
                f"(linear between {quantity(a)} and {quantity(b)})"
            )
        elif self.status == "never":
            text = f"SD pays up to the highest measured concurrency {quantity(self.highest)}"
        elif self.status == "below_from_start":
            text = f"SD never paid, even at the lowest measured concurrency {quantity(self.lowest)}"
        else:
            text = f"unavailable: {self.reason}"
        extras = [self.note] if self.note else []
        if self.skipped:
            extras.append(f"NaN speedup skipped at {', '.join(quantity(c) for c in self.skipped)}")
        return text + "".join(f"; {x}" for x in extras)

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe summary for reports."""
        return {**asdict(self), "describe": self.describe()}


def crossover(points: Sequence[tuple[float, float]]) -> Crossover:
    """The first concurrency at which the speedup goes from >= 1 to < 1.

    ``points`` are ``(concurrency, speedup)``, sorted here by concurrency.
    The crossing is interpolated linearly in concurrency between the last
    point >= 1 and the next point < 1. Points whose speedup is NaN (or
    otherwise not a finite number) are skipped and listed in ``skipped``.
    """
    finite, skipped = [], []
    for concurrency, value in sorted(points, key=lambda p: p[0]):
        level = _concurrency(concurrency)
        if (finite and finite[-1][0] == level) or level in skipped:
            raise ValueError(f"concurrency levels must be distinct, got {concurrency!r} twice")
        if isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value):
            finite.append((level, float(value)))
        else:
            skipped.append(level)
    if len(finite) < 2:
        return Crossover(
            "unavailable",
            None,
            None,
            None,
            skipped=tuple(skipped),
            reason=f"{len(finite)} point(s) with a finite speedup; a crossover needs two",
        )
    args = dict(lowest=finite[0][0], highest=finite[-1][0], skipped=tuple(skipped))
    first_below = next((i for i, (_, s) in enumerate(finite) if s < 1), None)
    if first_below is None:
        return Crossover("never", None, **args)
    back = [c for c, s in finite[first_below:] if s >= 1]
    args["note"] = f"speedup >= 1 again at {', '.join(quantity(c) for c in back)}" if back else None
    if first_below == 0:
        return Crossover("below_from_start", None, **args)
    (c0, s0), (c1, s1) = finite[first_below - 1], finite[first_below]
    return Crossover("crosses", c0 + (s0 - 1) * (c1 - c0) / (s0 - s1), between=(c0, c1), **args)
