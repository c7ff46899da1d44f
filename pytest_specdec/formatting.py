"""How the package writes a figure: one formatter, and one spelling each of a figure that is missing.

A figure that nothing measured (None) reads "–"; one that was measured but could not be had (NaN: lost
counters, a side with no token ids) reads "unavailable", as the report's cells say it.  Every layer
writes numbers, so this sits below them all.
"""

from __future__ import annotations

import math
from typing import Any

NOTHING = "–"
UNAVAILABLE = "unavailable"


def figure(value: Any, spec: str | None = None, suffix: str = "", missing: str = NOTHING) -> str:
    """`value` written with format `spec` and `suffix`; without a spec an int as it is, a float of 10 or more
    to one decimal, a smaller one to three significant digits."""
    if value is None:
        return missing
    if isinstance(value, float) and math.isnan(value):
        return UNAVAILABLE
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if spec is not None:
        return format(value, spec) + suffix
    if isinstance(value, int):
        return f"{value}{suffix}"
    return (f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}") + suffix


def quantity(value: float | None) -> str:
    """A load or a concurrency as a search or a sweep names it: a whole number as one ("2", not "2.0"),
    another to three significant digits below 100 ("0.707")."""
    whole = value is not None and math.isfinite(value) and float(value).is_integer()
    return figure(int(value) if whole else value, None if whole or value is None or abs(value) >= 100 else ".3g")
