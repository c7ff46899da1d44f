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
(:class:`CapacityRatio`, measure/capacity/ratio.py); a check it cannot decide is
``undecidable``, never a pass. :func:`crossover` (load/crossover.py) reads a
concurrency sweep's speedups for where SD stops paying.

Nothing here runs a load: the caller's ``probe`` does, and decides whether the
SLO held (a probe that could not be judged, or whose queue kept growing, see
load/saturation.py, must come back as not holding).  A probe whose load the
client could not offer (``offered=False``: it sent requests late, so the run
measured the client) is neither held nor failed: it says nothing of the
server.  The lowest such load is a ceiling the search stays under, since a
higher load cannot be offered either; below it the search goes on (a client
that cannot keep pace with 1 req/s may well keep pace with 0.5), and stops
as ``client_bound`` where the next load it needs is at or above the ceiling
and the gap to it is within ``resolution``.  Retrying a client stall is the
caller's business.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ...formatting import quantity
from .ratio import CapacityRatio, capacity_ratio, ratio_of
from ...load.crossover import Crossover, crossover
from .probes import (  # re-exported: these lived here
    OVER as OVER,
    _UNIT as _UNIT,
    STOPPED as STOPPED,
    Probe as Probe,
    _number as _number,
    _count as _count,
    CapacitySearch as CapacitySearch,
    _tally as _tally,
)

__all__ = [
    "STOPPED",
    "Capacity",
    "CapacityRatio",
    "CapacitySearch",
    "Crossover",
    "Probe",
    "capacity_ratio",
    "crossover",
    "ratio_of",
    "search_capacity",
]


@dataclass(frozen=True)
class Capacity:
    """The outcome of a capacity search.

    A load probed more than once counts by majority; a tie counts as failed
    (a load that held only half the time is not one the server carries).
    ``capacity`` is the highest load that held *below the lowest load that
    failed*: under noise a higher load can hold after a lower one failed
    (``non_monotone``); that hold is not believed, so the capacity is never
    above a failure. ``status``: ``found`` (the true capacity is in
    ``bracket`` when probes do not err; :attr:`noise_interval` allows for
    those that do), ``above_highest_probe`` (every load held: a lower bound,
    ``>=``), ``not_reached`` (the lowest load probed failed: an upper bound,
    ``<``; capacity None), ``not_offered`` (the client could offer no load
    probed: nothing is known). ``stopped``: why the search ended, one
    of :data:`STOPPED` (``unconfirmed``: converged, but the budget ran out
    before the boundary was probed again; ``client_bound``: the next load the
    search needed was at or above the lowest one the client could not offer).
    """

    over: str
    capacity: float | None
    status: str
    probes: tuple[Probe, ...]
    bracket: tuple[float | None, float | None]
    non_monotone: bool = False
    stopped: str = "converged"
    max_load: float | None = None
    # The search's resolution: half of it widens the bracket for probe noise (see noise_interval).
    resolution: float = 0.0

    @classmethod
    def from_probes(
        cls,
        over: str,
        probes: Sequence[Probe],
        stopped: str = "converged",
        max_load: float | None = None,
        resolution: float = 0.0,
    ) -> Capacity:
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
        status = (
            "not_offered"
            if not tally
            else "not_reached"
            if capacity is None
            else "above_highest_probe"
            if lowest_failed is None
            else "found"
        )
        non_monotone = bool(held and failed and max(held) > lowest_failed)
        return cls(
            over,
            capacity,
            status,
            tuple(probes),
            (capacity, lowest_failed),
            non_monotone,
            stopped,
            max_load,
            resolution,
        )

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
    def noise_interval(self) -> tuple[float, float]:
        """:attr:`interval` widened by half the search's resolution on each side, for probe noise.

        A probe near the true capacity holds or fails by chance: with a hold probability falling
        smoothly over 5-10% of load around it, the bare bracket missed the truth in 23-29% of 400
        simulated searches, the widened one in 0-0.5% (tests/unit/measure/capacity/test_capacity_intervals.py).
        """
        lo, hi = self.interval
        widen = 1 + self.resolution / 2
        return lo / widen, hi * widen

    @property
    def limits(self) -> tuple[float, float]:
        """The capacity as a ratio uses it: (c, c) when found (the estimate), else :attr:`interval`."""
        return (self.capacity, self.capacity) if self.status == "found" else self.interval

    def not_offered(self) -> list[float]:
        """Loads the client could not offer (client-bound probes), in probe order."""
        return list(dict.fromkeys(p.load for p in self.probes if not p.offered))

    def reprobed(self) -> dict[float, tuple[int, int]]:
        """Loads run more than once: (held, failed) runs each."""
        return {load: runs for load, runs in _tally(self.probes).items() if sum(runs) > 1}

    def describe(self) -> str:
        """The outcome in words, e.g. ``>= 16 req/s (held at every load up to 16, the ceiling max_load=16)``."""
        lo, hi = self.bracket
        unit = _UNIT[self.over]
        unoffered = self.not_offered()
        if self.status == "not_offered":
            text = f"unknown (the client could not offer {quantity(unoffered[0])} {unit}, the first load probed"
            lowest = min(unoffered)
            text += f", nor any load down to {quantity(lowest)} {unit})" if lowest < unoffered[0] else ")"
        elif self.status == "above_highest_probe":
            why = {
                "max_load": f", the ceiling max_load={quantity(self.max_load)}",
                "bracket_probes": "; bracket_probes ran out before a load failed",
                "max_probes": "; max_probes ran out before a load failed",
                "client_bound": "; the client could not offer more",
            }.get(self.stopped, "")
            text = f">= {quantity(lo)} {unit} (held at every load up to {quantity(lo)}{why})"
        elif self.status == "found":
            text = f"{quantity(lo)} {unit} (held at {quantity(lo)}, failed at {quantity(hi)})"
        else:
            text = (
                f"< {quantity(hi)} {unit} (not reached: the SLO failed at {quantity(hi)} {unit}, "
                "the lowest load probed)"
            )
        if self.non_monotone:
            text += (
                "; non-monotone: a higher load held after a lower one failed,"
                " and only holds below the lowest failure count"
            )
        for load, (held, failed) in self.reprobed().items():
            text += f"; re-probed {quantity(load)}: held {held} of {held + failed}"
            if held and failed:
                verdict = "held" if held > failed else "failed" if failed > held else "a tie, counted as failed"
                text += f" (runs disagreed, noise: the majority counts, {verdict})"
        saturated = list(dict.fromkeys(p.load for p in self.probes if p.detail.get("over_saturated")))
        if saturated:
            text += f"; over-saturated at {', '.join(quantity(x) for x in saturated)}"
        if unoffered:
            reason = next(p.detail.get("reason", "") for p in self.probes if not p.offered)
            text += (
                f"; not offered (the client, not the server, set the pace) at "
                f"{', '.join(quantity(x) for x in unoffered)}: {reason}"
            )
        if self.status == "found" and self.stopped in ("bisect_probes", "max_probes"):
            text += f"; the probe budget ran out first ({self.stopped}), bracket {quantity(lo)}-{quantity(hi)}"
        elif self.status == "found" and self.stopped == "client_bound":
            text += f"; the search stopped there, bracket {quantity(lo)}-{quantity(hi)}"
        elif self.stopped == "unconfirmed":
            text += "; the boundary rests on single runs (the budget ran out before probing it again)"
        elif self.status == "not_reached" and self.stopped not in ("min_load", "client_bound"):
            text += f"; the probe budget ran out first ({self.stopped})"
        return text

    def as_dict(self) -> dict[str, Any]:  # for reports (rows make it JSON-safe)
        return {
            **asdict(self),
            "bound": self.bound,
            "describe": self.describe(),
            "reprobed": {quantity(load): {"held": h, "failed": f} for load, (h, f) in self.reprobed().items()},
        }


def search_capacity(
    probe: Callable[[float], Probe], search: CapacitySearch, *, shared_loads: Sequence[float] = ()
) -> Capacity:
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
        # The lowest load the client could not offer: nothing at or above it can be measured.
        ceiling = min((p.load for p in probes if not p.offered), default=None)
        lo, hi = Capacity.from_probes(search.over, probes).bracket
        if lo is None:
            # Nothing held yet: step down from the lowest load that failed or could not be offered.
            top = min(x for x in (hi, ceiling) if x is not None)
            if top <= search.min_load:
                stopped = "min_load" if top == hi else "client_bound"
                break
            if stopped := out_of("bracket"):
                break
            run(search.down(top), "bracket")
            continue
        if ceiling is not None and ceiling > lo and (hi is None or ceiling < hi):
            # The client's ceiling lies inside the bracket: narrow towards it, never probe at or above it.
            if search.converged(lo, ceiling):
                stopped = "client_bound"
                break
            if hi is None:
                if stopped := out_of("bracket"):
                    break
                upper = search.up(lo)
                run(upper if upper < ceiling else search.midpoint(lo, ceiling), "bracket")
            else:
                if stopped := out_of("bisect"):
                    break
                run(_pick(search, lo, ceiling, shared), "bisect")
            continue
        if ceiling is not None and ceiling <= lo:
            # A lower load held after a higher one could not be offered, or the ceiling came at the held
            # load itself: nothing above it can be measured.
            stopped = "client_bound"
            break
        if hi is None:
            if search.max_load is not None and lo >= search.max_load:
                stopped = "max_load"
                break
            if stopped := out_of("bracket"):
                break
            run(search.up(lo), "bracket")
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
    return Capacity.from_probes(search.over, probes, stopped, search.max_load, search.resolution)


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
