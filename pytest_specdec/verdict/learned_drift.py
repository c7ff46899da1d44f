"""The drift between two sessions a verdict allows for, learned from the machine's own sessions.

A comparison against a stored baseline pays for the drift between the baseline's session and this one, which no
number of runs in this session shrinks.  The plugin's built-in figure (verdict.detection.SESSION_DRIFT) was measured
from a few server starts of vLLM's CPU build on one box and is no machine's own.  A results history knows better:
between two change points (history.changepoints) a test's figure came from the same build on the same machine, so
the spread of its session values there is that machine's session drift.

`learn_drift` reads it as the sample standard deviation of the log session values, and where the sessions are few
uses a one-sided upper confidence bound on that deviation (chi-square, n - 1 degrees of freedom), never the bare
estimate: five sessions that happen to agree must not let a gate believe a machine is steadier than the data allow.
The result is never below `floor`, the spread this session's own runs show.  Without sessions enough to bound it
(fewer than `MIN_SESSIONS`) there is no learned figure; `built_in_drift` labels the fallback, and says on a GPU
machine that the figure was never measured on any GPU.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .chi_square import chi2_critical

CONFIDENCE = 0.90  # of the upper bound on the drift: a learned figure understates the machine's 10% of the time
MIN_SESSIONS = 3  # two sessions give one degree of freedom: a bound, but one no narrower than the built-in figure


@dataclass(frozen=True)
class DriftFigure:
    """The session-to-session drift (relative sd of one session's value) a verdict uses, and where it came from."""

    value: float
    source: str  # "history", "measured" or "built-in"
    sessions: int = 0  # the values it was learned from (server starts, for "measured")
    estimate: float | None = None  # the sample sd itself, before the bound
    since: str | None = None  # the change point the sessions follow, where the history has one
    note: str = ""

    def describe(self) -> str:
        if self.source == "built-in":
            return f"drift: {self.note} ({self.value:.1%})"
        what = "sessions" if self.source == "history" else "server starts"
        since = f" since the change point of {self.since}" if self.since else ""
        bound = (
            f", upper {CONFIDENCE:.0%} bound on the sd {self.estimate:.1%} read from them"
            if self.estimate is not None
            else ""
        )
        floor = f"; {self.note}" if self.note else ""
        return f"drift {self.value:.1%} ({self.source}: {self.sessions} {what}{since}{bound}{floor})"


def upper_sd(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """(sample sd, one-sided upper `confidence` bound on the sd) of `values`: s * sqrt((n - 1) / q), q the
    chi-square quantile below which 1 - `confidence` of its mass lies."""
    if len(values) < 2:
        raise ValueError(f"a spread needs at least two values, got {len(values)}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    s = statistics.stdev(values)
    df = len(values) - 1
    return s, s * math.sqrt(df / chi2_critical(confidence, df))


def learn_drift(
    session_values: Sequence[float],
    *,
    source: str = "history",
    since: str | None = None,
    floor: float = 0.0,
    confidence: float = CONFIDENCE,
) -> DriftFigure | None:
    """The drift learned from one figure's positive session values (same test, configuration, machine and build),
    or None with fewer than MIN_SESSIONS usable ones: the bound on the sd of their logs, at least `floor`."""
    logs = [math.log(v) for v in session_values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    if len(logs) < MIN_SESSIONS:
        return None
    estimate, bound = upper_sd(logs, confidence)
    value, note = math.expm1(bound), ""
    if floor > value:
        value, note = floor, f"raised to this session's own spread between runs, {floor:.1%}"
    return DriftFigure(value, source, len(logs), math.expm1(estimate), since, note)


def built_in_drift(value: float, device: str = "cpu") -> DriftFigure:
    """The plugin's fixed figure, labelled as what it is: the CPU build's, not this machine's."""
    note = "the CPU build's figure, not this machine's"
    if device == "gpu":
        note += "; it was not measured on any GPU"
    return DriftFigure(value, "built-in", note=note)
