"""Chi-square numerics for the distribution check: tail probabilities, critical values, power and the
samples a stated power needs (verdict.distribution).  Pure Python: no scipy."""

from __future__ import annotations

import math


def _log_gamma_series(a: float, x: float) -> float:
    # The lower regularized gamma P(a, x) by its series (x < a + 1).
    total = term = 1.0 / a
    n = a
    for _ in range(10_000):
        n += 1
        term *= x / n
        total += term
        if abs(term) < abs(total) * 1e-15:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _upper_continued_fraction(a: float, x: float) -> float:
    # The upper regularized gamma Q(a, x) by Lentz's continued fraction (x >= a + 1).
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def chi2_sf(x: float, df: float) -> float:
    """P(X > x) for X chi-square with `df` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if x <= 0:
        return 1.0
    a, half = df / 2.0, x / 2.0
    if half < a + 1.0:
        return max(0.0, 1.0 - _log_gamma_series(a, half))
    return min(1.0, _upper_continued_fraction(a, half))


def noncentral_chi2_sf(x: float, df: float, lam: float) -> float:
    """P(X > x) for X noncentral chi-square (`df`, noncentrality `lam`): a Poisson(lam/2) mixture of
    central chi-squares with df + 2i degrees of freedom."""
    if lam <= 0:
        return chi2_sf(x, df)
    half = lam / 2.0
    centre = int(half)
    total = 0.0
    # Sum outwards from the Poisson mode until the weights are negligible.
    for i in range(max(0, centre - 2000), centre + 2000):
        weight = math.exp(-half + i * math.log(half) - math.lgamma(i + 1))
        if weight < 1e-17 and i > centre:
            break
        if weight >= 1e-17:
            total += weight * chi2_sf(x, df + 2 * i)
    return min(1.0, total)


def chi2_critical(alpha: float, df: float) -> float:
    """The x whose chi-square(`df`) survival is `alpha`."""
    lo, hi = 0.0, max(1.0, df)
    while chi2_sf(hi, df) > alpha:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if chi2_sf(mid, df) > alpha else (lo, mid)
    return hi


def power_of(n_per_side: int, w: float, df: int, alpha: float) -> float:
    """The chance the test rejects at level `alpha` when the true effect is `w`, with n samples per side."""
    return noncentral_chi2_sf(chi2_critical(alpha, df), df, 2.0 * n_per_side * w * w)


def samples_needed(w: float, df: int, alpha: float, power: float, limit: int = 1_000_000) -> int:
    """The smallest n per side that detects effect `w` with at least `power` at level `alpha`."""
    if not (w > 0 and 0 < power < 1 and 0 < alpha < 1):
        raise ValueError(f"need w > 0, 0 < power < 1, 0 < alpha < 1; got w={w}, power={power}, alpha={alpha}")
    critical = chi2_critical(alpha, df)
    lo, hi = 1, 2
    while noncentral_chi2_sf(critical, df, 2.0 * hi * w * w) < power:
        lo, hi = hi, hi * 2
        if hi > limit:
            raise ValueError(f"effect w={w} needs more than {limit} samples per side")
    while lo < hi:
        mid = (lo + hi) // 2
        if noncentral_chi2_sf(critical, df, 2.0 * mid * w * w) >= power:
            hi = mid
        else:
            lo = mid + 1
    return lo
