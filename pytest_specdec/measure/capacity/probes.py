"""One probe of a capacity search, the search's bracket, and the tallies both read."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any


OVER = ("request_rate", "max_concurrency")


_UNIT = {"request_rate": "req/s", "max_concurrency": "concurrent requests"}


STOPPED = (
    "converged",
    "unconfirmed",
    "bracket_probes",
    "bisect_probes",
    "max_probes",
    "max_load",
    "min_load",
    "client_bound",
)


@dataclass(frozen=True)
class Probe:
    """One load run: the load, whether the SLO held, and what was measured (percentiles, reason)."""

    load: float
    holds: bool
    detail: dict = field(default_factory=dict)
    # False: the client could not offer this load (see the module docstring); kept for the report only.
    offered: bool = True


def _number(
    name: str, value: Any, *, integer: bool = False, above: float | None = None, at_least: float | None = None
) -> float:
    ok = not isinstance(value, bool) and isinstance(value, Real) and math.isfinite(value)
    ok = ok and (not integer or float(value).is_integer())
    if not ok or (above is not None and value <= above) or (at_least is not None and value < at_least):
        bound = f" > {above:g}" if above is not None else f" >= {at_least:g}" if at_least is not None else ""
        raise ValueError(f"{name} must be {'a whole' if integer else 'a finite'} number{bound}, got {value!r}")
    return float(value)


def _count(name: str, value: Any, least: int, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, Integral) or value < least:
        raise ValueError(f"{name} must be an int >= {least}{' or None' if allow_none else ''}, got {value!r}")


@dataclass(frozen=True)
class CapacitySearch:
    """The bounds of one capacity search (see the module docstring for its phases).

    Loads go ``start, start*growth, ...`` (capped at ``max_load``) while the
    SLO holds, or ``start/growth, ...`` down to ``min_load`` while it fails;
    bisection takes the geometric midpoint for rates, until ``hi/lo - 1 <=
    resolution``, and the integer midpoint for concurrency, until ``hi - lo
    <= 1``. ``min_load`` defaults to 0.25 req/s for rates and 1 for
    concurrency; ``max_load`` None leaves only ``bracket_probes`` as the
    ceiling. ``max_probes``, when set, caps all probes of the search together.
    """

    over: str
    start: float
    max_probes: int | None = None
    growth: float = 2.0
    resolution: float = 0.1
    min_load: float | None = None
    max_load: float | None = None
    bracket_probes: int = 8
    bisect_probes: int = 6

    def __post_init__(self) -> None:
        if self.over not in OVER:
            raise ValueError(f"over must be one of {', '.join(OVER)}, got {self.over!r}")
        if self.min_load is None:
            object.__setattr__(self, "min_load", 1.0 if self.whole else 0.25)
        # Whole numbers > 0 are >= 1: one check serves rates and concurrency.
        min_load = _number("min_load", self.min_load, integer=self.whole, above=0)
        start = _number("start", self.start, integer=self.whole, at_least=min_load)
        if self.max_load is not None:
            _number("max_load", self.max_load, integer=self.whole, at_least=start)
        _count("max_probes", self.max_probes, 2, allow_none=True)
        # The start and at least one step: one probe alone brackets nothing.
        _count("bracket_probes", self.bracket_probes, 2)
        _count("bisect_probes", self.bisect_probes, 0)
        _number("growth", self.growth, above=1)
        _number("resolution", self.resolution, above=0)

    whole = property(lambda self: self.over == "max_concurrency")

    def up(self, load: float) -> float:
        """The next load while bracketing upward (at least one more for concurrency), never above ``max_load``."""
        higher = float(max(load + 1, math.ceil(load * self.growth - 1e-9))) if self.whole else load * self.growth
        return higher if self.max_load is None else min(higher, float(self.max_load))

    def down(self, load: float) -> float:
        """The next load while bracketing downward, never below ``min_load``."""
        lower = min(load - 1, math.floor(load / self.growth + 1e-9)) if self.whole else load / self.growth
        return max(self.min_load, float(lower))

    def converged(self, lo: float, hi: float) -> bool:
        return hi - lo <= 1 if self.whole else hi / lo - 1 <= self.resolution

    def midpoint(self, lo: float, hi: float) -> float:
        return float((int(lo) + int(hi)) // 2) if self.whole else math.sqrt(lo * hi)


def _tally(probes: Sequence[Probe]) -> dict[float, tuple[int, int]]:
    """Per load the client offered: (runs that held, runs that failed)."""
    offered = [p for p in probes if p.offered]
    held = Counter(p.load for p in offered if p.holds)
    failed = Counter(p.load for p in offered if not p.holds)
    return {load: (held[load], failed[load]) for load in dict.fromkeys(p.load for p in offered)}
