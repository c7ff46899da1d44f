"""Student's t, for the sequential rule's intervals: the quantiles it tests each look at.

Closed forms (Abramowitz & Stegun 26.7.3-4) rather than scipy: the core stays importable from a script
with numpy alone, and integer degrees of freedom are all the rule asks for (a fractional df is floored,
which is wider, never narrower).
"""

from __future__ import annotations

import math
from statistics import NormalDist


def t_two_sided_mass(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer `df` (the closed forms of Abramowitz & Stegun 26.7.3-4)."""
    if t <= 0:
        return 0.0
    theta = math.atan(t / math.sqrt(df))
    cos2, term, total = math.cos(theta) ** 2, 1.0, 1.0
    if df % 2:  # odd
        if df == 1:
            return 2 * theta / math.pi
        term = 1.0
        for j in range(1, (df - 1) // 2):
            term *= cos2 * (2 * j) / (2 * j + 1)
            total += term
        return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    for j in range(1, df // 2):
        term *= cos2 * (2 * j - 1) / (2 * j)
        total += term
    return math.sin(theta) * total


def t_quantile(upper_tail: float, df: float) -> float:
    """The t with P(T > t) = `upper_tail`; `df` is floored (a smaller df is wider, never narrower)."""
    if not 0 < upper_tail < 0.5:
        raise ValueError(f"an upper tail in (0, 0.5) is needed, got {upper_tail}")
    df = max(1, int(df)) if math.isfinite(df) else math.inf
    if df > 60:  # the Cornish-Fisher expansion about the normal: within 1e-4 here, and the series below is slow
        z = NormalDist().inv_cdf(1 - upper_tail)
        return z if df == math.inf else z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
    target = 1 - 2 * upper_tail
    low, high = 0.0, 1.0
    while t_two_sided_mass(high, df) < target:
        high *= 2
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if t_two_sided_mass(middle, df) < target else (low, middle)
    return high
