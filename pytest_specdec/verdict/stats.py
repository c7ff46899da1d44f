"""Repeats, confidence intervals and regression decisions against baselines.

Decision rule
-------------
Each side (baseline, current) is a handful of repeats of one metric, one value per repeat.  Both are
summarised by their median, and ``change`` is the relative change signed so that negative means worse::

    change = current / baseline - 1    if higher is better (throughput, speedup)
    change = baseline / current - 1    if lower is better  (latencies, *_ms)

A metric **regresses** when

1. the point estimate is worse than the tolerance: ``change < -tolerance``; and
2. when both sides have at least 2 samples, the bootstrap confidence interval of ``change`` lies
   entirely below 0 (``ci_high < 0``): the drop can be told apart from no change at all.

With fewer than 2 samples on a side there is no spread to judge noise by, so
only the tolerance band decides.  Both conditions are needed: the tolerance
says how much loss the user cares about, the interval says the loss is not
one odd repeat.  The interval is tested against 0, not against -tolerance,
because with 3 repeats an interval that excludes -10% would need far more
separation than a real 10-25% drop gives; the tolerance is already enforced by
the point estimate.

Why a bootstrap of the ratio of medians
---------------------------------------
Repeats are few (1-5), latency distributions are right-skewed, and one repeat
is sometimes far off (a noisy neighbour, a late compile).  A t-test works on
means and assumes rough normality; one slow repeat drags the mean and inflates
the variance, so it both false-alarms and masks.  Medians ignore one odd repeat
out of three, and the bootstrap needs no distributional assumption and yields
an interval on the same scale as the tolerance, which the failure table can
print.  A Mann-Whitney test was the alternative, but at 3 vs 3 its smallest
two-sided p-value is 0.10, so at 95% it can never fire, and it says nothing
about size.  Note what the percentile bootstrap amounts to at n=3 vs 3: a
resampled median equals the largest value with probability 7/27 > 2.5%, so
``ci_high < 0`` holds exactly when every current repeat is worse than every
baseline repeat -- the most extreme rank outcome (one-sided p = 1/20).  The
gate is therefore conservative with few repeats: one repeat that looks
unregressed keeps it green.  More repeats narrow the interval.

Bootstrap: each side is resampled with replacement (``numpy.random.default_rng
(seed)``, so a seed gives the same interval every time), the ratio of medians
is computed per resample, and the bounds are its percentiles.  The resampled
distribution is discrete (medians of a few values), so the bounds are taken
outwards ("lower"/"higher") rather than interpolated: wider, never narrower.

NaN, None and infinite samples are dropped (a failed or empty run); a side
with nothing left gives a verdict that is not a regression and says why.

Paired repeats
--------------
Repeat i of a run sends prompts and arrivals seeded for i (so no repeat
replays another's prompts to a method that remembers them), and the baseline's
repeat i sent the very same ones.  When the seeds match, the gate compares
pairs: ``change`` is the median of the per-repeat ratios and the bootstrap
resamples pairs.  Different prompt sets can differ by tens of percent, which
would swamp an unpaired interval; pairing removes that spread, so a drop
every pair shows is caught with 3 repeats (``ci_high < 0`` then holds when
every pair got worse).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..formatting import figure
from .metric_names import higher_is_better as _higher_is_better
from .tolerances import _validate, default_tolerance


def _clean(samples: Sequence[float | None]) -> np.ndarray:
    values = np.array([math.nan if s is None else float(s) for s in samples], dtype=float)
    return values[np.isfinite(values)]


def _relative(num, den):
    """num/den - 1, with equal values (including 0/0) meaning no change and x/0 meaning +-inf."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = num / den - 1.0
    out = np.where(num == den, 0.0, out)
    return np.where((den == 0) & (num != 0), np.copysign(np.inf, num), out)


def _bootstrap_ratio_changes(num: np.ndarray, den: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    # One matrix of indices per side, medians along rows: vectorised, so 2000
    # resamples cost well under a millisecond.
    rng = np.random.default_rng(seed)
    num_medians = np.median(num[rng.integers(0, num.size, size=(resamples, num.size))], axis=1)
    den_medians = np.median(den[rng.integers(0, den.size, size=(resamples, den.size))], axis=1)
    return _relative(num_medians, den_medians)


def _bounds(changes: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1.0 - confidence) / 2.0
    return (float(np.quantile(changes, tail, method="lower")), float(np.quantile(changes, 1.0 - tail, method="higher")))


def _check_settings(confidence: float, resamples: int) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if int(resamples) < 1:
        raise ValueError(f"resamples must be positive, got {resamples!r}")


def ratio_of_medians_ci(
    numerator: Sequence[float],
    denominator: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Bootstrap interval of median(numerator) / median(denominator), e.g. of a speedup.

    None when either side has fewer than 2 valid samples.
    """
    _check_settings(confidence, resamples)
    num, den = _clean(numerator), _clean(denominator)
    if num.size < 2 or den.size < 2:
        return None
    low, high = _bounds(_bootstrap_ratio_changes(num, den, int(resamples), seed), confidence)
    return 1.0 + low, 1.0 + high


def median_ci(
    values: Sequence[float], *, confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float] | None:
    """Bootstrap interval of the median of `values` (e.g. per-repeat speedups); None with fewer than 2."""
    _check_settings(confidence, resamples)
    finite = _clean(values)
    if finite.size < 2:
        return None
    rng = np.random.default_rng(seed)
    medians = np.median(finite[rng.integers(0, finite.size, size=(int(resamples), finite.size))], axis=1)
    return _bounds(medians, confidence)


@dataclass(frozen=True)
class Verdict:
    metric: str
    higher_is_better: bool
    baseline: float  # median of baseline samples (NaN if none)
    current: float  # median of current samples (NaN if none)
    change: float  # signed so that negative = worse; see the module docstring
    tolerance: float
    ci_low: float | None  # CI of `change`; None without >= 2 samples on both sides
    ci_high: float | None
    confidence: float
    regression: bool
    method: str
    decided_by: str = ""  # a sequential decision, described (verdict.sequential): where it stopped, on what spread

    def describe(self) -> str:
        """One line for a failure table or report."""
        head = f"{self.metric}: {figure(self.baseline)} -> {figure(self.current)}"
        if math.isnan(self.change):
            return f"{head} (not compared: {self.method}) {'REGRESSION' if self.regression else 'ok'}"
        if self.ci_low is not None and self.ci_high is not None:
            interval = f", {self.confidence * 100:g}% CI [{self.ci_low:+.1%}, {self.ci_high:+.1%}]"
        else:
            interval = ", no CI: fewer than 2 repeats on a side"
        how = f"; {self.method}: {self.decided_by}" if self.decided_by else ""
        status = "REGRESSION" if self.regression else "ok"
        return f"{head} ({self.change:+.1%}, tolerance {self.tolerance * 100:g}%{interval}{how}) {status}"


def _paired(baseline: Sequence[float | None], current: Sequence[float | None]) -> tuple[np.ndarray, np.ndarray]:
    """The repeat pairs where both sides have a finite value."""

    def array(samples):
        return np.array([math.nan if s is None else float(s) for s in samples], dtype=float)

    base, cur = array(baseline), array(current)
    keep = np.isfinite(base) & np.isfinite(cur)
    return base[keep], cur[keep]


def _compare_paired(
    base: np.ndarray,
    cur: np.ndarray,
    higher: bool,
    tolerance: float,
    confidence: float,
    resamples: int,
    seed: int,
    common: dict,
) -> Verdict:
    num, den = (cur, base) if higher else (base, cur)
    changes = _relative(num, den)
    change = float(np.median(changes))
    beyond_tolerance = change < -tolerance
    if changes.size < 2:
        return Verdict(
            change=change,
            ci_low=None,
            ci_high=None,
            regression=beyond_tolerance,
            method="tolerance band only (fewer than 2 paired repeats)",
            **common,
        )
    rng = np.random.default_rng(seed)
    medians = np.median(changes[rng.integers(0, changes.size, size=(resamples, changes.size))], axis=1)
    ci_low, ci_high = _bounds(medians, confidence)
    return Verdict(
        change=change,
        ci_low=ci_low,
        ci_high=ci_high,
        regression=beyond_tolerance and ci_high < 0,
        method=f"paired bootstrap {confidence * 100:g}% CI of the median per-repeat ratio ({resamples} resamples)",
        **common,
    )


def compare_samples(
    metric: str,
    baseline: Sequence[float],
    current: Sequence[float],
    *,
    tolerance: float | None = None,
    higher_is_better: bool | None = None,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    paired: bool = False,
) -> Verdict:
    """Compare current repeats of `metric` with baseline repeats (rule in the module docstring).

    ``paired=True``: repeat i of both sides ran the same prompts and arrivals
    (the same repeat seed), so each pair's ratio is judged, and the spread
    between different prompt sets does not hide a drop every pair shows.
    Both sequences then keep one entry per repeat (None for a missing value).
    """
    _check_settings(confidence, resamples)
    tolerance = (
        default_tolerance(metric)
        if tolerance is None
        else _validate(tolerance, metric, "compare_samples(tolerance=...)")
    )
    higher = _higher_is_better(metric) if higher_is_better is None else bool(higher_is_better)
    if paired:
        if len(baseline) != len(current):
            raise ValueError(
                f"paired comparison of {metric!r} needs as many current repeats as baseline "
                f"repeats, got {len(current)} and {len(baseline)}"
            )
        base, cur = _paired(baseline, current)
        if base.size:
            common = dict(
                metric=metric,
                higher_is_better=higher,
                baseline=float(np.median(base)),
                current=float(np.median(cur)),
                tolerance=tolerance,
                confidence=confidence,
            )
            return _compare_paired(base, cur, higher, tolerance, confidence, int(resamples), seed, common)
    base, cur = _clean(baseline), _clean(current)
    base_median = float(np.median(base)) if base.size else math.nan
    cur_median = float(np.median(cur)) if cur.size else math.nan
    common = dict(
        metric=metric,
        higher_is_better=higher,
        baseline=base_median,
        current=cur_median,
        tolerance=tolerance,
        confidence=confidence,
    )

    if not base.size or not cur.size:
        empty = " and ".join(side for side, values in (("baseline", base), ("current", cur)) if not values.size)
        # Unmeasured is never a pass: the gate names why before it gets here; this is the backstop.
        return Verdict(
            change=math.nan,
            ci_low=None,
            ci_high=None,
            regression=True,
            method=f"no valid {empty} samples (all missing or NaN): unavailable, so not a pass",
            **common,
        )

    # Order the ratio so that > 1 is better whatever the metric's direction.
    num, den = (cur, base) if higher else (base, cur)
    change = float(_relative(np.median(num), np.median(den)))
    beyond_tolerance = change < -tolerance
    if base.size < 2 or cur.size < 2:
        return Verdict(
            change=change,
            ci_low=None,
            ci_high=None,
            regression=beyond_tolerance,
            method="tolerance band only (fewer than 2 repeats on a side)",
            **common,
        )

    ci_low, ci_high = _bounds(_bootstrap_ratio_changes(num, den, int(resamples), seed), confidence)
    return Verdict(
        change=change,
        ci_low=ci_low,
        ci_high=ci_high,
        regression=beyond_tolerance and ci_high < 0,
        method=f"bootstrap {confidence * 100:g}% CI of the ratio of medians ({int(resamples)} resamples)",
        **common,
    )


def compare_exact(metric: str, baseline: Sequence[float | None], current: Sequence[float | None]) -> Verdict:
    """A figure that must not change at all (see derived.EXACT_METRICS): the medians must be equal."""
    base, cur = _clean(baseline), _clean(current)
    before = float(np.median(base)) if base.size else math.nan
    now = float(np.median(cur)) if cur.size else math.nan
    if before == now:
        change = 0.0
    elif before and math.isfinite(before) and math.isfinite(now):
        change = now / before - 1.0
    else:
        change = math.nan
    return Verdict(
        metric=metric,
        higher_is_better=True,
        baseline=before,
        current=now,
        change=change,
        tolerance=0.0,
        ci_low=None,
        ci_high=None,
        confidence=0.95,
        regression=not before == now,
        method="exact: any change is flagged",
    )


def compare_intervals(
    metric: str, baseline_repeats: Sequence[dict], current_repeats: Sequence[dict], tolerance: float
) -> tuple[Verdict, str | None]:
    """A figure known only within an interval (an SLO capacity ratio: each side's bracket widened by its probe
    noise, `measure.capacity.ratio`) against its baseline's interval, as ``assert_capacity`` decides on its own:

    - a regression when even the best reading now lies below the worst reading then, less the tolerance
      (``high_now < low_then * (1 - tolerance)``);
    - no regression when even the worst reading now is within the tolerance of the best reading then
      (``low_now >= high_then * (1 - tolerance)``);
    - otherwise undecided, with why (the second value; None when decided): a point estimate inside two
      intervals each ~45% wide would false-alarm at no change and miss drops inside the tolerance.

    Each side's interval is read from the derived ``<metric>_low`` / ``<metric>_high`` of its first repeat;
    a baseline recorded before those existed counts its point as its interval.
    """

    def interval(repeats: Sequence[dict]) -> tuple[float, float, float]:
        derived = (repeats[0].get("derived") or {}) if repeats else {}
        value = derived.get(metric)
        value = math.nan if value is None else float(value)
        low, high = derived.get(f"{metric}_low"), derived.get(f"{metric}_high")
        low = value if low is None else float(low)
        high = value if high is None else float(high)
        return value, low, high

    (before, before_low, before_high), (now, now_low, now_high) = interval(baseline_repeats), interval(current_repeats)
    common = dict(metric=metric, higher_is_better=True, baseline=before, current=now, tolerance=tolerance)
    if not all(math.isfinite(v) for v in (before, before_low, now, now_low)) or before_low <= 0:
        verdict = Verdict(
            change=math.nan,
            ci_low=None,
            ci_high=None,
            confidence=1.0,
            regression=False,
            method="no interval on a side",
            **common,
        )
        return verdict, "no interval to compare on a side (a bound or an unknown ratio)"
    span = lambda low, high: f"{low:.3g}-{high:.3g}"  # noqa: E731
    floor_low, floor_high = before_low * (1 - tolerance), before_high * (1 - tolerance)
    regression = now_high < floor_low
    decided_ok = now_low >= floor_high
    verdict = Verdict(
        change=now / before - 1,
        ci_low=now_low / before_high - 1,
        ci_high=now_high / before_low - 1 if math.isfinite(now_high) else math.inf,
        confidence=1.0,
        regression=regression,
        method=f"intervals: now {span(now_low, now_high)}, baseline {span(before_low, before_high)}",
        **common,
    )
    if regression or decided_ok:
        return verdict, None
    return verdict, (
        f"the interval now ({span(now_low, now_high)}) overlaps the baseline's less the {tolerance:.0%} tolerance "
        f"({span(floor_low, floor_high)}): a finer capacity search (the access pattern's resolution) decides it"
    )
