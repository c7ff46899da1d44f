"""What the regression gate can detect, stated per gated metric.

A gate that cannot see a 10% drop is worth knowing about before it is
trusted to block a release.  From the noise of the values compared and the
number of repeats, this module simulates the gate's own rule (see
`stats`: the median change beyond the tolerance and, with two or more
repeats, a bootstrap interval entirely on the worse side) on Gaussian noise
of that spread, and reports

- the **false-alarm rate**: how often an unchanged metric is flagged, and
- the **smallest drop** flagged in at least `power` (90%) of runs.

The noise depends on how the gate compares:

- **paired** (repeat i of the baseline and of the run sent the same prompts):
  the spread of the ratios run_i / baseline_i, divided by sqrt(2) to give one
  side's noise.  Those ratios hold everything that moves a pair apart (noise
  within a session and drift from one server start to the next) and nothing
  the pairing cancels (one prompt set being easier than another).  The
  spread of the baseline's own repeats would count that prompt-set variation
  as noise and understate what the gate can see several times over.
- **unpaired**: the spread of the baseline's repeats, recorded in one
  session.

Neither spread holds what moves a whole session against another: the servers
of a CI run are other instances than the baseline's, and every repeat of a
session shares their drift, which the ratios' spread cannot show.  So the
simulation adds a **session drift** per side (`SESSION_DRIFT`, measured
between server starts by ``benchmarks/gate_calibration.py``); a statement
without it said "false alarms 0.0%" where sessions with drift false-alarmed
2.5-7.5%, and its "detects" drop was caught 64-75% of the time.
``benchmarks/decision_calibration.py`` checks the statement against the
rule on simulated sessions.

Simulations use a fixed seed: the same values give the same statement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

POWER = 0.9
SIMULATIONS = 1000
RESAMPLES = 200
MAX_DROP = 0.95
# One session's drift against another, relative, per side: the spread of per-start medians between server
# starts of vLLM's CPU build, as benchmarks/gate_calibration.py measures it (docs/benchmarks.md, "Figures the
# code once quoted", has the starts and figures); greedy acceptance does not drift, since the same prompts accept
# the same drafts.  A GPU server's own drift is its own.
SESSION_DRIFT = {"speedup": 0.042, "acceptance": 0.0, "absolute": 0.027}


def session_drift(metric: str) -> float:
    """The measured session-to-session drift of one side's `metric` (see SESSION_DRIFT)."""
    if metric.startswith("speedup_"):
        return SESSION_DRIFT["speedup"]
    if "acceptance" in metric or metric in ("match_rate", "best_k"):
        return SESSION_DRIFT["acceptance"]
    return SESSION_DRIFT["absolute"]


@dataclass(frozen=True)
class Detection:
    """What the gate can detect on one metric, with `repeats` repeats a side."""

    metric: str
    repeats: int
    tolerance: float
    spread: float | None  # relative noise of one side's value (see the module docstring); None if unknown
    false_alarm_rate: float | None  # an unchanged metric flagged this often (None: spread unknown)
    smallest_drop: float | None  # flagged in `power` of runs (None: spread unknown; 1.0: never)
    power: float = POWER
    noise_from: str = "baseline repeats"  # or "paired ratios"
    drift: float = 0.0  # session-to-session drift per side the statement includes (SESSION_DRIFT)

    def describe(self) -> str:
        if self.spread is None:
            return (
                f"{self.metric}: a drop beyond the {self.tolerance:.0%} tolerance in the one value compared "
                "is flagged; repeat noise unknown (record and run with --specdec-repeats 3 to know what is "
                "detectable)"
            )
        if self.smallest_drop is None or self.smallest_drop >= MAX_DROP:
            drop = "no drop up to 95% is flagged reliably"
        else:
            drop = f"drops of {self.smallest_drop:.1%} or more are flagged in {self.power:.0%} of runs"
        noise = "noise per side" + (
            " from the paired repeats' ratios" if self.noise_from == "paired ratios" else " from the baseline's repeats"
        )
        return (
            f"{self.metric}: {drop}; an unchanged value is flagged {self.false_alarm_rate:.1%} of the time "
            f"({noise} {self.spread:.1%}, session drift {self.drift:.1%} a side, {self.repeats} repeats, "
            f"tolerance {self.tolerance:.0%})"
        )

    def as_dict(self) -> dict:
        return {
            "repeats": self.repeats,
            "tolerance": self.tolerance,
            "spread": self.spread,
            "false_alarm_rate": self.false_alarm_rate,
            "smallest_drop": self.smallest_drop,
            "power": self.power,
            "noise_from": self.noise_from,
            "drift": self.drift,
        }


def relative_spread(values: Sequence[float | None]) -> float | None:
    """Sample standard deviation over the mean of the finite values; None with fewer than 2 or a mean of 0."""
    finite = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if finite.size < 2 or finite.mean() == 0:
        return None
    return float(finite.std(ddof=1) / abs(finite.mean()))


def paired_noise(baseline: Sequence[float | None], current: Sequence[float | None]) -> float | None:
    """One side's relative noise from the spread of current_i / baseline_i over the finite pairs: a ratio
    of two values with independent noise s varies by about sqrt(2) * s.  None with fewer than 2 pairs."""
    ratios = [
        c / b
        for b, c in zip(baseline, current)
        if b is not None and c is not None and math.isfinite(b) and math.isfinite(c) and b != 0
    ]
    spread = relative_spread(ratios)
    return None if spread is None else spread / math.sqrt(2)


def flag_rate(
    drop: float,
    spread: float,
    repeats: int,
    tolerance: float,
    *,
    paired: bool = True,
    confidence: float = 0.95,
    simulations: int = SIMULATIONS,
    resamples: int = RESAMPLES,
    seed: int = 0,
    drift: float = 0.0,
) -> float:
    """How often the gate's rule flags a true relative `drop` under noise `spread`, `repeats` per side, each
    side's session shifted as a whole by a drift of relative spread `drift`."""
    rng = np.random.default_rng(seed)
    base = 1.0 + spread * rng.standard_normal((simulations, repeats))
    current = (1.0 - drop) * (1.0 + spread * rng.standard_normal((simulations, repeats)))
    base *= 1.0 + drift * rng.standard_normal((simulations, 1))
    current *= 1.0 + drift * rng.standard_normal((simulations, 1))
    if paired:
        changes = current / base - 1.0
        point = np.median(changes, axis=1)
    else:
        point = np.median(current, axis=1) / np.median(base, axis=1) - 1.0
    flagged = point < -tolerance
    if repeats < 2:
        return float(flagged.mean())
    tail = (1.0 - confidence) / 2.0
    picks = rng.integers(0, repeats, size=(resamples, repeats))
    if paired:
        medians = np.median(changes[:, picks], axis=2)
    else:
        other = rng.integers(0, repeats, size=(resamples, repeats))
        medians = np.median(current[:, picks], axis=2) / np.median(base[:, other], axis=2) - 1.0
    ci_high = np.quantile(medians, 1.0 - tail, axis=1, method="higher")
    return float((flagged & (ci_high < 0)).mean())


def detection(
    metric: str,
    baseline_values: Sequence[float | None],
    repeats: int,
    tolerance: float,
    *,
    paired: bool = True,
    power: float = POWER,
    current_values: Sequence[float | None] | None = None,
    drift: float | None = None,
) -> Detection:
    """The false-alarm rate and smallest reliably flagged drop for `metric` (see the module docstring).

    With `paired` and the run's `current_values` (repeat i against baseline repeat i), the noise is the
    paired ratios'; otherwise the baseline repeats'."""
    from_pairs = paired and current_values is not None
    spread = paired_noise(baseline_values, current_values) if from_pairs else relative_spread(baseline_values)
    noise_from = "paired ratios" if from_pairs else "baseline repeats"
    drift = session_drift(metric) if drift is None else drift
    if spread is None or repeats < 1:
        return Detection(metric, repeats, tolerance, None, None, None, power, noise_from, drift)
    rate = lambda drop: flag_rate(drop, spread, repeats, tolerance, paired=paired, drift=drift)  # noqa: E731
    false_alarms = rate(0.0)
    if rate(MAX_DROP) < power:
        return Detection(metric, repeats, tolerance, spread, false_alarms, 1.0, power, noise_from, drift)
    low, high = 0.0, MAX_DROP
    while high - low > 0.0025:  # the flag rate grows with the drop (common random numbers keep it monotone)
        middle = (low + high) / 2
        low, high = (middle, high) if rate(middle) < power else (low, middle)
    return Detection(metric, repeats, tolerance, spread, false_alarms, high, power, noise_from, drift)
