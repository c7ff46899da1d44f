"""How much load a server takes within an SLO, and where SD stops paying.

:func:`search_capacity` finds the highest request rate (or concurrency) at
which an SLO holds, in few runs: each probe is a whole load run, minutes on a
GPU, so the search is bounded by ``max_probes`` and never runs a load twice.
:func:`crossover` reads a concurrency sweep's speedups for the concurrency at
which SD stops being faster than no SD.

Neither runs anything: the caller's ``probe`` does, and decides (e.g. with
``measure.goodput.SLOPercentiles.holds``) whether the SLO held. A probe that
could not be judged must come back as not holding: it is never a pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from numbers import Integral, Real
from typing import Any

__all__ = ["Capacity", "CapacitySearch", "Crossover", "Probe", "capacity_ratio", "crossover", "search_capacity"]

OVER = ("request_rate", "max_concurrency")
_UNIT = {"request_rate": "req/s", "max_concurrency": "concurrent requests"}


@dataclass(frozen=True)
class Probe:
    """One load run: the load, whether the SLO held, and what was measured (percentiles, reason)."""

    load: float
    holds: bool
    detail: dict = field(default_factory=dict)


def _number(name: str, value: Any, *, integer: bool = False, above: float | None = None,
            at_least: float | None = None) -> float:
    ok = not isinstance(value, bool) and isinstance(value, Real) and math.isfinite(value)
    ok = ok and (not integer or float(value).is_integer())
    if not ok or (above is not None and value <= above) or (at_least is not None and value < at_least):
        bound = f" > {above:g}" if above is not None else f" >= {at_least:g}" if at_least is not None else ""
        raise ValueError(f"{name} must be {'a whole' if integer else 'a finite'} number{bound}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class CapacitySearch:
    """The bounds of one capacity search.

    Loads go ``start, start*growth, ...`` while the SLO holds (or
    ``start/growth, ...`` down to ``min_load`` while it fails), then bisect
    between the highest load that held and the lowest that failed: at the
    geometric midpoint for rates, until ``hi/lo - 1 <= resolution``; at the
    integer midpoint for concurrency, until ``hi - lo <= 1``. ``min_load``
    defaults to 0.25 req/s for rates and 1 for concurrency.
    """

    over: str
    start: float
    max_probes: int
    growth: float = 2.0
    resolution: float = 0.1
    min_load: float | None = None

    def __post_init__(self) -> None:
        if self.over not in OVER:
            raise ValueError(f"over must be one of {', '.join(OVER)}, got {self.over!r}")
        if self.min_load is None:
            object.__setattr__(self, "min_load", 1.0 if self.whole else 0.25)
        # Whole numbers > 0 are >= 1: one check serves rates and concurrency.
        min_load = _number("min_load", self.min_load, integer=self.whole, above=0)
        _number("start", self.start, integer=self.whole, at_least=min_load)
        probes = self.max_probes
        if isinstance(probes, bool) or not isinstance(probes, Integral) or probes < 2:
            raise ValueError(f"max_probes must be an int >= 2, got {probes!r}")
        _number("growth", self.growth, above=1)
        _number("resolution", self.resolution, above=0)

    @property
    def whole(self) -> bool:
        return self.over == "max_concurrency"

    def up(self, load: float) -> float:
        """The next load while bracketing upward (at least one more for concurrency)."""
        return float(max(load + 1, math.ceil(load * self.growth - 1e-9))) if self.whole else load * self.growth

    def down(self, load: float) -> float:
        """The next load while bracketing downward, never below ``min_load``."""
        lower = min(load - 1, math.floor(load / self.growth + 1e-9)) if self.whole else load / self.growth
        return max(self.min_load, float(lower))

    def converged(self, lo: float, hi: float) -> bool:
        return hi - lo <= 1 if self.whole else hi / lo - 1 <= self.resolution

    def midpoint(self, lo: float, hi: float) -> float:
        return float((int(lo) + int(hi)) // 2) if self.whole else math.sqrt(lo * hi)


@dataclass(frozen=True)
class Capacity:
    """The outcome of a capacity search.

    ``capacity`` is the highest load probed that held *below the lowest load
    that failed*: under noise a higher load can hold after a lower one failed
    (``non_monotone``); that hold is not believed, so the capacity is never
    above a failed probe. One search never sees this (each probe lies inside the
    bracket the earlier ones leave); probes pooled through :meth:`from_probes`
    (repeats, merged searches) can. ``status``: ``found`` (a held load with a failed one
    above it; the true capacity is in ``bracket``), ``above_highest_probe``
    (every probe held: capacity is a lower bound), ``not_reached`` (the lowest
    load probed failed: capacity None). ``stopped``: ``converged``,
    ``max_probes`` or ``min_load``, why the search ended.
    """

    over: str
    capacity: float | None
    status: str
    probes: tuple[Probe, ...]
    bracket: tuple[float | None, float | None]
    non_monotone: bool = False
    stopped: str = "converged"

    @classmethod
    def from_probes(cls, over: str, probes: Sequence[Probe], stopped: str = "converged") -> Capacity:
        """The capacity the rule above reads from probes, in probe order (any set of probes)."""
        if over not in OVER:
            raise ValueError(f"over must be one of {', '.join(OVER)}, got {over!r}")
        if not probes:
            raise ValueError("a capacity needs at least one probe")
        held = [p.load for p in probes if p.holds]
        failed = [p.load for p in probes if not p.holds]
        lowest_failed = min(failed, default=None)
        below = [x for x in held if lowest_failed is None or x < lowest_failed]
        capacity = max(below, default=None)
        status = ("not_reached" if capacity is None
                  else "above_highest_probe" if lowest_failed is None else "found")
        non_monotone = bool(held and failed and max(held) > lowest_failed)
        return cls(over, capacity, status, tuple(probes), (capacity, lowest_failed), non_monotone, stopped)

    def describe(self) -> str:
        """The outcome in words, e.g. ``≥ 8 req/s (every probe up to 8 held)``."""
        lo, hi = self.bracket
        if self.status == "above_highest_probe":
            text = f"≥ {_fmt(lo)} {_UNIT[self.over]} (every probe up to {_fmt(lo)} held)"
        elif self.status == "found":
            text = f"{_fmt(lo)} {_UNIT[self.over]} (held at {_fmt(lo)}, failed at {_fmt(hi)})"
        else:
            lowest = min(p.load for p in self.probes)
            text = f"not reached: the SLO failed at {_fmt(lowest)} {_UNIT[self.over]}, the lowest load probed"
        if self.non_monotone:
            text += ("; non-monotone: a higher load held after a lower one failed,"
                     " and only holds below the lowest failure count")
        if self.stopped == "max_probes" and self.status != "above_highest_probe":
            text += "; the probe budget ran out first"
        return text

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe summary for reports."""
        return {**asdict(self), "describe": self.describe()}


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return str(int(value)) if float(value).is_integer() else f"{value:.3g}"


def search_capacity(probe: Callable[[float], Probe], search: CapacitySearch, *,
                    shared_loads: Sequence[float] = ()) -> Capacity:
    """The highest load at which ``probe`` says the SLO holds, in at most ``search.max_probes`` calls.

    Assumes latency grows with load (see :class:`Capacity` for what happens
    under noise). ``shared_loads`` are loads the other side (reference or SD)
    already probed: when a bisection midpoint is within ``resolution``
    (relative) of one of them that lies strictly inside the bracket, that load
    is probed instead, so both sides are measured at the same loads where they
    can be and their runs compare point for point. The bracketing steps need
    no such help: with the same ``start`` and ``growth`` they coincide anyway.
    """
    shared = [_number("shared_loads", x, integer=search.whole, above=0) for x in shared_loads]
    probes: list[Probe] = []

    def run(load: float) -> bool:
        result = probe(load)
        if not isinstance(result, Probe) or result.load != load:
            raise ValueError(f"probe({load!r}) must return a Probe for load {load!r}, got {result!r}")
        probes.append(result)
        return result.holds

    def budget() -> bool:
        return len(probes) < search.max_probes

    load = float(search.start)
    if run(load):
        while budget() and run(load := search.up(load)):
            pass
    else:
        while budget() and load > search.min_load and not run(load := search.down(load)):
            pass
    while budget():
        lo, hi = Capacity.from_probes(search.over, probes).bracket
        if lo is None or hi is None or search.converged(lo, hi):
            break
        run(_pick(search, lo, hi, shared))
    result = Capacity.from_probes(search.over, probes)
    lo, hi = result.bracket
    if result.status == "found" and search.converged(lo, hi):
        return replace(result, stopped="converged")
    if result.status == "not_reached" and min(p.load for p in probes) <= search.min_load:
        return replace(result, stopped="min_load")
    return replace(result, stopped="max_probes")


def _pick(search: CapacitySearch, lo: float, hi: float, shared: list[float]) -> float:
    # Nothing was probed strictly inside (lo, hi): a load there is always new.
    middle = search.midpoint(lo, hi)
    near = [x for x in shared if lo < x < hi and abs(x / middle - 1) <= search.resolution]
    return min(near, key=lambda x: abs(math.log(x / middle)), default=middle)


def capacity_ratio(reference: Capacity, speculative: Capacity) -> tuple[float, str | None]:
    """SD capacity / reference capacity, and what qualifies it (the caller reports it).

    The reason is None for a plain estimate. A side that held at every load
    probed only gives a lower bound on its capacity, so the ratio is then a
    bound: ``lower bound`` when SD's side is the open one, ``upper bound``
    when the reference's is; both open, or either ``not_reached``, gives NaN.
    """
    if reference.over != speculative.over:
        raise ValueError(f"capacities over different loads: {reference.over} and {speculative.over}")
    missing = [f"{name} capacity not reached ({cap.describe()})"
               for name, cap in (("reference", reference), ("speculative", speculative))
               if cap.status == "not_reached"]
    if missing:
        return math.nan, "; ".join(missing)
    ref_open = reference.status == "above_highest_probe"
    sd_open = speculative.status == "above_highest_probe"
    if ref_open and sd_open:
        return math.nan, "both sides held at every load probed: neither capacity is bounded above"
    ratio = speculative.capacity / reference.capacity
    notes = []
    if sd_open:
        notes.append(f"lower bound: SD held at every load probed (up to {_fmt(speculative.capacity)})")
    if ref_open:
        notes.append("upper bound: the reference held at every load probed "
                     f"(up to {_fmt(reference.capacity)})")
    notes += [f"{name} capacity curve is non-monotone" for name, cap in
              (("reference", reference), ("speculative", speculative)) if cap.non_monotone]
    return ratio, "; ".join(notes) or None


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
            text = (f"SD stops paying at ≈ {_fmt(self.value)} concurrent requests"
                    f" (linear between {_fmt(a)} and {_fmt(b)})")
        elif self.status == "never":
            text = f"SD pays up to the highest measured concurrency {_fmt(self.highest)}"
        elif self.status == "below_from_start":
            text = f"SD never paid, even at the lowest measured concurrency {_fmt(self.lowest)}"
        else:
            text = f"unavailable: {self.reason}"
        extras = [self.note] if self.note else []
        if self.skipped:
            extras.append(f"NaN speedup skipped at {', '.join(_fmt(c) for c in self.skipped)}")
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
        level = _number("concurrency", concurrency, above=0)
        if (finite and finite[-1][0] == level) or level in skipped:
            raise ValueError(f"concurrency levels must be distinct, got {concurrency!r} twice")
        if isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value):
            finite.append((level, float(value)))
        else:
            skipped.append(level)
    if len(finite) < 2:
        return Crossover("unavailable", None, None, None, skipped=tuple(skipped),
                         reason=f"{len(finite)} point(s) with a finite speedup; a crossover needs two")
    args = dict(lowest=finite[0][0], highest=finite[-1][0], skipped=tuple(skipped))
    first_below = next((i for i, (_, s) in enumerate(finite) if s < 1), None)
    if first_below is None:
        return Crossover("never", None, **args)
    back = [c for c, s in finite[first_below:] if s >= 1]
    args["note"] = f"speedup >= 1 again at {', '.join(_fmt(c) for c in back)}" if back else None
    if first_below == 0:
        return Crossover("below_from_start", None, **args)
    (c0, s0), (c1, s1) = finite[first_below - 1], finite[first_below]
    return Crossover("crosses", c0 + (s0 - 1) * (c1 - c0) / (s0 - s1), between=(c0, c1), **args)
