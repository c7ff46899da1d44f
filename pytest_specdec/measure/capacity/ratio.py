"""SD's capacity over the reference's: an estimate where both sides were bracketed, a bound otherwise.

A ratio of two capacities where either side is a bound is a bound too; a
check it cannot decide is ``undecidable``, never a pass.  The capacities are
`load.capacity.Capacity` objects (read through ``over``, ``limits``,
``interval``, ``bound``, ``non_monotone``, ``describe``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol


class Capacity(Protocol):
    """What a ratio reads of `load.capacity.Capacity` (which imports this module, so it is not imported here)."""

    over: str
    limits: tuple
    noise_interval: tuple | None


__all__ = ["CapacityRatio", "capacity_ratio", "ratio_of"]


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
    ``low`` and ``high`` bound the true ratio from both capacities' noise
    intervals (each bracket widened by half its search's resolution, for
    probes that hold or fail by chance near the capacity); a check decides
    on them, never on ``value``. ``notes``: why it is a bound, and any side
    that was non-monotone.
    """

    value: float
    kind: str
    low: float
    high: float
    notes: tuple[str, ...] = ()

    def decide(self, min_ratio: float) -> tuple[str, str]:
        """``("pass" | "fail" | "undecidable", why)`` for "the ratio is at least ``min_ratio``", on the
        interval: pass when its low end clears ``min_ratio``, fail when its high end is below it."""
        span = f"{self.low:.3g}-{'inf' if math.isinf(self.high) else f'{self.high:.3g}'}x"
        if self.low >= min_ratio:
            return "pass", f"ratio in {span}, all of it >= {min_ratio:g}"
        if self.high < min_ratio:
            return "fail", f"ratio in {span}, all of it < {min_ratio:g}"
        known = {
            "estimate": f"{self.value:.3g}x as a point, but anywhere in {span} with probe noise",
            "lower_bound": f"only known to be >= {self.low:.3g}x",
            "upper_bound": f"only known to be <= {self.high:.3g}x",
            "unknown": "not bounded on either side",
        }[self.kind]
        notes = f" ({'; '.join(self.notes)})" if self.notes else ""
        return "undecidable", (
            f"undecidable: the ratio is {known}, which cannot say whether it reaches {min_ratio:g}{notes}"
        )

    def describe(self) -> str:
        text = {
            "estimate": f"{self.value:.2f}x",
            "lower_bound": f">= {self.value:.2f}x",
            "upper_bound": f"<= {self.value:.2f}x",
            "unknown": "unknown",
        }[self.kind]
        notes = list(self.notes)
        if self.kind == "estimate":  # what the two brackets allow, for a reader weighing a near miss
            notes.insert(0, f"{self.low:.2f}-{self.high:.2f}x with probe noise")
        return text + (f" ({'; '.join(notes)})" if notes else "")


def ratio_of(reference: Capacity, speculative: Capacity) -> CapacityRatio:
    """SD's capacity over the reference's, as an estimate, a bound, or unknown (see :class:`CapacityRatio`)."""
    if reference.over != speculative.over:
        raise ValueError(f"capacities over different loads: {reference.over} and {speculative.over}")
    (ref_low, ref_high), (sd_low, sd_high) = reference.limits, speculative.limits
    low, high = _div(sd_low, ref_high), _div(sd_high, ref_low)
    (ref_in, ref_out), (sd_in, sd_out) = reference.noise_interval, speculative.noise_interval
    notes = [
        f"{name} {cap.describe()}"
        for name, cap in (("SD", speculative), ("reference", reference))
        if cap.bound or cap.not_offered()
    ]
    notes += [
        f"{name} capacity curve is non-monotone"
        for name, cap in (("reference", reference), ("SD", speculative))
        if cap.non_monotone
    ]
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
