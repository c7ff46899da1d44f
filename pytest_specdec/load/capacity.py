"""How much load a server takes within an SLO, and where SD stops paying.

:func:`search_capacity` finds the highest request rate (or concurrency) at
which an SLO holds. Each probe is a whole load run (minutes on a GPU), so the
search has budgets, one per phase, because each phase fails differently:

1. bracket: grow from ``start`` until a probe fails (or shrink until one
   holds), never above ``max_load``, within ``bracket_probes``. A side that
   held everywhere is reported as a bound with its direction (``>= 16
   req/s``), never as a capacity;
2. bisect: narrow the bracket to ``resolution`` within ``bisect_probes``,
   then probe both ends of the final bracket again. One run can be noise: a
   boundary load whose runs disagree is run a third time and the majority
   counts (a tie counts as a failure), and the result says so.

A ratio of two capacities where either side is a bound is a bound too
(:class:`CapacityRatio`); a check it cannot decide is ``undecidable``, never a
pass. :func:`crossover` (load/crossover.py) reads a concurrency sweep's
speedups for where SD stops paying.

Nothing here runs a load: the caller's ``probe`` does, and decides whether the
SLO held (a probe that could not be judged, or whose queue kept growing, see
load/saturation.py, must come back as not holding).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from numbers import Integral, Real
from typing import Any

from .crossover import Crossover, crossover

__all__ = ["STOPPED", "Capacity", "CapacityRatio", "CapacitySearch", "Crossover", "Probe", "capacity_ratio",
           "crossover", "ratio_of", "search_capacity"]

OVER = ("request_rate", "max_concurrency")
_UNIT = {"request_rate": "req/s", "max_concurrency": "concurrent requests"}
STOPPED = ("converged", "unconfirmed", "bracket_probes", "bisect_probes", "max_probes", "max_load", "min_load")


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
    """Per load: (runs that held, runs that failed)."""
    held = Counter(p.load for p in probes if p.holds)
    failed = Counter(p.load for p in probes if not p.holds)
    return {load: (held[load], failed[load]) for load in dict.fromkeys(p.load for p in probes)}


@dataclass(frozen=True)
class Capacity:
    """The outcome of a capacity search.

    A load probed more than once counts by majority; a tie counts as failed
    (a load that held only half the time is not one the server carries).
    ``capacity`` is the highest load that held *below the lowest load that
    failed*: under noise a higher load can hold after a lower one failed
    (``non_monotone``); that hold is not believed, so the capacity is never
    above a failure. ``status``: ``found`` (the true capacity is in
    ``bracket``), ``above_highest_probe`` (every load held: a lower bound,
    ``>=``), ``not_reached`` (the lowest load probed failed: an upper bound,
    ``<``; capacity None). ``stopped``: why the search ended, one of
    :data:`STOPPED` (``unconfirmed``: converged, but the budget ran out
    before the boundary was probed again).
    """

    over: str
    capacity: float | None
    status: str
    probes: tuple[Probe, ...]
    bracket: tuple[float | None, float | None]
    non_monotone: bool = False
    stopped: str = "converged"
    max_load: float | None = None

    @classmethod
    def from_probes(cls, over: str, probes: Sequence[Probe], stopped: str = "converged",
                    max_load: float | None = None) -> Capacity:
        """The capacity the rule above reads from probes, in probe order (any set of probes)."""
        if over not in OVER:
            raise ValueError(f"over must be one of {', '.join(OVER)}, got {over!r}")
        if not probes:
            raise ValueError("a capacity needs at least one probe")
        tally = _tally(probes)
        held = [load for load, (h, f) in tally.items() if h > f]
        failed = [load for load, (h, f) in tally.items() if h <= f]
        lowest_failed = min(failed, default=None)
        capacity = max((x for x in held if lowest_failed is None or x < lowest_failed), default=None)
        status = ("not_reached" if capacity is None
                  else "above_highest_probe" if lowest_failed is None else "found")
        non_monotone = bool(held and failed and max(held) > lowest_failed)
        return cls(over, capacity, status, tuple(probes), (capacity, lowest_failed), non_monotone, stopped, max_load)

    @property
    def bound(self) -> str | None:
        """``">="`` (every load held), ``"<"`` (the lowest load failed), or None (bracketed)."""
        return {"above_highest_probe": ">=", "not_reached": "<"}.get(self.status)

    @property
    def interval(self) -> tuple[float, float]:
        """Where the true capacity lies: the bracket, (c, inf) for ``>=``, (0, lowest failed) for ``<``."""
        lo, hi = self.bracket
        return (0.0 if lo is None else lo), (math.inf if hi is None else hi)

    @property
    def limits(self) -> tuple[float, float]:
        """The capacity as a ratio uses it: (c, c) when found (the estimate), else :attr:`interval`."""
        return (self.capacity, self.capacity) if self.status == "found" else self.interval

    def reprobed(self) -> dict[float, tuple[int, int]]:
        """Loads run more than once: (held, failed) runs each."""
        return {load: runs for load, runs in _tally(self.probes).items() if sum(runs) > 1}

    def describe(self) -> str:
        """The outcome in words, e.g. ``>= 16 req/s (held at every load up to 16, the ceiling max_load=16)``."""
        lo, hi = self.bracket
        unit = _UNIT[self.over]
        if self.status == "above_highest_probe":
            why = {"max_load": f", the ceiling max_load={_fmt(self.max_load)}",
                   "bracket_probes": "; bracket_probes ran out before a load failed",
                   "max_probes": "; max_probes ran out before a load failed"}.get(self.stopped, "")
            text = f">= {_fmt(lo)} {unit} (held at every load up to {_fmt(lo)}{why})"
        elif self.status == "found":
            text = f"{_fmt(lo)} {unit} (held at {_fmt(lo)}, failed at {_fmt(hi)})"
        else:
            text = f"< {_fmt(hi)} {unit} (not reached: the SLO failed at {_fmt(hi)} {unit}, the lowest load probed)"
        if self.non_monotone:
            text += ("; non-monotone: a higher load held after a lower one failed,"
                     " and only holds below the lowest failure count")
        for load, (held, failed) in self.reprobed().items():
            text += f"; re-probed {_fmt(load)}: held {held} of {held + failed}"
            if held and failed:
                verdict = "held" if held > failed else "failed" if failed > held else "a tie, counted as failed"
                text += f" (runs disagreed, noise: the majority counts, {verdict})"
        saturated = list(dict.fromkeys(p.load for p in self.probes if p.detail.get("over_saturated")))
        if saturated:
            text += f"; over-saturated at {', '.join(_fmt(x) for x in saturated)}"
        if self.status == "found" and self.stopped in ("bisect_probes", "max_probes"):
            text += f"; the probe budget ran out first ({self.stopped}), bracket {_fmt(lo)}-{_fmt(hi)}"
        elif self.stopped == "unconfirmed":
            text += "; the boundary rests on single runs (the budget ran out before probing it again)"
        elif self.status == "not_reached" and self.stopped != "min_load":
            text += f"; the probe budget ran out first ({self.stopped})"
        return text

    def as_dict(self) -> dict[str, Any]:  # for reports (rows make it JSON-safe)
        return {**asdict(self), "bound": self.bound, "describe": self.describe(),
                "reprobed": {_fmt(load): {"held": h, "failed": f} for load, (h, f) in self.reprobed().items()}}


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return str(int(value)) if float(value).is_integer() else f"{value:.3g}"


def search_capacity(probe: Callable[[float], Probe], search: CapacitySearch, *,
                    shared_loads: Sequence[float] = ()) -> Capacity:
    """The highest load at which ``probe`` says the SLO holds (see the module docstring for the phases).

    Assumes latency grows with load. ``shared_loads`` are loads the other side
    (reference or SD) already probed: when a bisection midpoint is within
    ``resolution`` (relative) of one of them that lies strictly inside the
    bracket, that load is probed instead, so both sides are measured at the
    same loads where they can be and their runs compare point for point. The
    bracketing steps need no such help: with the same ``start`` and
    ``growth`` they coincide anyway.
    """
    shared = [_number("shared_loads", x, integer=search.whole, above=0) for x in shared_loads]
    probes: list[Probe] = []
    spent = {"bracket": 0, "bisect": 0}
    budget = {"bracket": search.bracket_probes, "bisect": search.bisect_probes}

    def out_of(phase: str) -> str | None:
        if search.max_probes is not None and len(probes) >= search.max_probes:
            return "max_probes"
        return f"{phase}_probes" if spent[phase] >= budget[phase] else None

    def run(load: float, phase: str) -> None:
        result = probe(load)
        if not isinstance(result, Probe) or result.load != load:
            raise ValueError(f"probe({load!r}) must return a Probe for load {load!r}, got {result!r}")
        probes.append(result)
        spent[phase] += 1

    run(float(search.start), "bracket")
    while True:
        lo, hi = Capacity.from_probes(search.over, probes).bracket
        if hi is None or lo is None:
            if hi is None and search.max_load is not None and lo >= search.max_load:
                stopped = "max_load"
                break
            if lo is None and hi <= search.min_load:
                stopped = "min_load"
                break
            if stopped := out_of("bracket"):
                break
            run(search.up(lo) if hi is None else search.down(hi), "bracket")
            continue
        if not search.converged(lo, hi):
            if stopped := out_of("bisect"):
                break
            run(_pick(search, lo, hi, shared), "bisect")
            continue
        again = _unconfirmed(probes, lo, hi)
        if again is None:
            stopped = "converged"
            break
        if out_of("bisect"):
            stopped = "unconfirmed"
            break
        run(again, "bisect")
    return Capacity.from_probes(search.over, probes, stopped, search.max_load)


def _unconfirmed(probes: Sequence[Probe], lo: float, hi: float) -> float | None:
    # One run decides nothing at the boundary, where a machine's drift flips a probe
    # most easily: run each end again, and a third time where the two runs disagree.
    tally = _tally(probes)
    for load in (hi, lo):
        held, failed = tally[load]
        if held + failed == 1 or held == failed:
            return load
    return None


def _pick(search: CapacitySearch, lo: float, hi: float, shared: list[float]) -> float:
    # Nothing was probed strictly inside (lo, hi): a load there is always new.
    middle = search.midpoint(lo, hi)
    near = [x for x in shared if lo < x < hi and abs(x / middle - 1) <= search.resolution]
    return min(near, key=lambda x: abs(math.log(x / middle)), default=middle)


def _div(a: float, b: float) -> float:
    return 0.0 if math.isinf(b) else math.inf if b == 0 else a / b


@dataclass(frozen=True)
class CapacityRatio:
    """SD capacity / reference capacity, and what kind of figure it is.

    ``kind``: ``estimate`` (both sides bracketed: the ratio of the highest
    loads that held), ``lower_bound`` / ``upper_bound`` (a side was not
    bracketed, so the ratio is only known on one side: ``value`` is the
    bound, taking the bracketed side at its estimate, as a bracketed pair
    would be read), ``unknown`` (bounded on neither side: ``value`` NaN).
    ``low`` and ``high`` bound the true ratio from both capacities' brackets
    (an estimate's spread within the search resolution). ``notes``: why it
    is a bound, and any side that was non-monotone.
    """

    value: float
    kind: str
    low: float
    high: float
    notes: tuple[str, ...] = ()

    def decide(self, min_ratio: float) -> tuple[str, str]:
        """``("pass" | "fail" | "undecidable", why)`` for "the ratio is at least ``min_ratio``"."""
        if self.kind == "estimate":
            ok = self.value >= min_ratio
            return ("pass" if ok else "fail"), f"ratio {self.value:.3g} {'>=' if ok else '<'} {min_ratio:g}"
        if self.kind == "lower_bound" and self.value >= min_ratio:
            return "pass", f"ratio >= {self.value:.3g} >= {min_ratio:g}"
        if self.kind == "upper_bound" and self.value < min_ratio:
            return "fail", f"ratio < {self.value:.3g} < {min_ratio:g}"
        known = {"lower_bound": f"only known to be >= {self.value:.3g}",
                 "upper_bound": f"only known to be <= {self.value:.3g}",
                 "unknown": "not bounded on either side"}[self.kind]
        return "undecidable", (f"undecidable: the ratio is {known}, which cannot say whether it reaches "
                               f"{min_ratio:g} ({'; '.join(self.notes)})")

    def describe(self) -> str:
        text = {"estimate": f"{self.value:.2f}x", "lower_bound": f">= {self.value:.2f}x",
                "upper_bound": f"<= {self.value:.2f}x", "unknown": "unknown"}[self.kind]
        notes = list(self.notes)
        if self.kind == "estimate":  # what the two brackets allow, for a reader weighing a near miss
            notes.insert(0, f"{self.low:.2f}-{self.high:.2f}x within the brackets")
        return text + (f" ({'; '.join(notes)})" if notes else "")


def ratio_of(reference: Capacity, speculative: Capacity) -> CapacityRatio:
    """SD's capacity over the reference's, as an estimate, a bound, or unknown (see :class:`CapacityRatio`)."""
    if reference.over != speculative.over:
        raise ValueError(f"capacities over different loads: {reference.over} and {speculative.over}")
    (ref_low, ref_high), (sd_low, sd_high) = reference.limits, speculative.limits
    low, high = _div(sd_low, ref_high), _div(sd_high, ref_low)
    (ref_in, ref_out), (sd_in, sd_out) = reference.interval, speculative.interval
    notes = [f"{name} {cap.describe()}" for name, cap in (("SD", speculative), ("reference", reference))
             if cap.bound]
    notes += [f"{name} capacity curve is non-monotone" for name, cap in
              (("reference", reference), ("SD", speculative)) if cap.non_monotone]
    if low == high:
        kind, value = "estimate", low
    elif high == math.inf and low > 0:
        kind, value = "lower_bound", low
    elif low == 0 and high < math.inf:
        kind, value = "upper_bound", high
    else:
        kind, value = "unknown", math.nan
    if kind != "estimate":
        notes.insert(0, kind.replace("_", " "))
    return CapacityRatio(value, kind, _div(sd_in, ref_out), _div(sd_out, ref_in), tuple(notes))


def capacity_ratio(reference: Capacity, speculative: Capacity) -> tuple[float, str | None]:
    """``(value, note)`` of :func:`ratio_of`: the note is None for a plain estimate, and starts with
    ``lower bound``, ``upper bound`` or ``unknown`` otherwise (value NaN when unknown)."""
    ratio = ratio_of(reference, speculative)
    return ratio.value, "; ".join(ratio.notes) or None

