"""The drift between two sessions a verdict allows for, learned from the machine's own sessions.

A comparison against a stored baseline pays for the drift between the baseline's session and this one, which no
number of runs in this session shrinks.  The plugin's built-in figure (verdict.detection.SESSION_DRIFT) was measured
from a few server starts of vLLM's CPU build on one box and is no machine's own.  A results history knows better:
between two change points (history.changepoints) a test's figure came from the same build on the same machine, so
the spread of its session values there is that machine's session drift, plus what each session's own runs put
into its value.

`learn_drift` reads the variance of the log session values through a one-sided upper confidence bound (chi-square,
n - 1 degrees of freedom), never the bare estimate: a few sessions that happen to agree must not let a gate believe
a machine is steadier than the data allow.  From that bound it takes off the variance the sessions' values carry
from their own runs: each session's own, as the history stored it beside its value (`own_variance`), or, where a
session has none stored, this session's timing spread standing in (`session_value_var`); the gate's rule counts
this session's own apart.  The result is never below `floor`: the machine's move this session's own reference measured, where it did.
Without sessions enough (fewer than `MIN_SESSIONS`) nothing is learned; `built_in_drift` labels the fallback, and
says on a GPU machine that the figure was never measured on any GPU.  `DriftBook` is the session's source of
figures; `smallest_failable_drop` what a drift lets a gate see.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .chi_square import chi2_critical
from .metric_names import SPEEDUP_PREFIX, speedup_metric
from .sequential.evidence import Evidence, read
from .sequential.rule import Rule
from .sequential.student_t import t_quantile

# Of the upper bound on a history's drift: a learned figure sometimes understates the machine's, which the rule's
# other margins (its looks, the timing spread's own bound) absorb.  The level is the lowest whose every cell of
# benchmarks/drift_calibration.py's tables keeps a margin under the stated false-fail rate (docs/deciding.md
# has the tables and the levels tried); a wider bound only widens the smallest drop a gate can fail.
CONFIDENCE = 0.65
# Of the bound on servers started anew (--specdec-measure-drift): a few changes of one session, each holding two
# runs' timing, calibrated at this level (benchmarks/drift_calibration.py --measured).
MEASURED_CONFIDENCE = 0.75
MIN_SESSIONS = 3  # two sessions give one degree of freedom: a bound, but one no narrower than the built-in figure
# Starts anew (--specdec-measure-drift): one test gives two, its reference's and its SD server's, and a bound on two
# degrees of freedom; every later test on the same engine build adds two more.
MIN_RESTARTS = 2
SIDE_PREFIXES = ("speculative_", "reference_")


@dataclass(frozen=True)
class DriftFigure:
    """The session-to-session drift (relative sd of one session's value) a verdict uses, and where it came from."""

    value: float
    source: str  # "history", "measured" or "built-in"
    sessions: int = 0  # the values it was learned from (server starts, for "measured")
    estimate: float | None = None  # the sample sd itself, before the bound
    since: str | None = None  # the change point the sessions follow, where the history has one
    note: str = ""
    confidence: float = CONFIDENCE  # of the upper bound it is

    def as_dict(self) -> dict:
        return {
            "value": self.value,
            "source": self.source,
            "sessions": self.sessions,
            "estimate": self.estimate,
            "since": self.since,
            "note": self.note,
            "smallest_failable_drop": smallest_failable_drop(self.value),
            "origin": self.origin(),
            "describe": self.describe(),
        }

    def origin(self) -> str:
        """Where the figure came from, in words (the part of `describe` after the value)."""
        if self.source == "built-in":
            return f"built-in: {self.note}"
        what = "sessions" if self.source == "history" else "servers started anew in this session"
        since = f" since the change point of {self.since}" if self.since else ""
        bound = (
            f", upper {self.confidence:.0%} bound on the sd {self.estimate:.1%} read from them"
            if self.estimate is not None
            else ""
        )
        floor = f"; {self.note}" if self.note else ""
        return f"{self.source}: {self.sessions} {what}{since}{bound}{floor}"

    def describe(self) -> str:
        if self.source == "built-in":  # note: "the CPU build's figure, not this machine's[; why]"
            whose, _, rest = self.note.partition(", ")
            return f"drift: {whose} ({self.value:.1%}), {rest}"
        return f"drift {self.value:.1%} ({self.origin()})"


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


def session_value_var(timing: float, draws: int) -> float:
    """The log variance one session's speedup carries from its own runs: the mean over its `draws` draws of one
    pair each, SD's send against the reference's.  `timing` is one such pair's log sd, both sides in it: this
    session's `Reading.timing` (a side's own run carries half its variance)."""
    if draws < 1:
        raise ValueError(f"a session value needs at least one draw, got {draws}")
    return timing**2 / draws


def own_variance(evidence: Evidence) -> float | None:
    """The log variance a session's speedup carries from its own runs, as a results history stores it beside the
    value (`history.records`): one pair's timing variance (SD's run against the reference's) over the draws.
    The timing is the rule's own reading (`Reading.timing`) where draws were sent again; before that, twice the
    reference's variance across its draws (its speed does not depend on the prompts, and SD's run times like
    it).  None with one draw, or no reference."""
    reading = read(evidence)
    draws = len([s for s in evidence.sends if s])
    if draws < 1:
        return None
    if reading.timing is not None:
        return session_value_var(reading.timing, draws)
    reference = [v for v in (evidence.reference or ())[:draws] if math.isfinite(v)]
    if len(reference) < 2 or len(reference) != draws:
        return None
    return 2 * statistics.variance(reference) / draws


def learn_drift(
    session_values: Sequence[float],
    *,
    source: str = "history",
    since: str | None = None,
    floor: float = 0.0,
    within: float = 0.0,
    own: Sequence[float | None] = (),
    confidence: float = CONFIDENCE,
) -> DriftFigure | None:
    """The drift learned from one figure's positive session values (same test, configuration, machine and build),
    or None with fewer than MIN_SESSIONS usable ones.

    Each session's value moved by that session's drift and by its own runs' timing, which the sessions' spread
    holds both of.  The drift is what is left of the upper `confidence` bound on that spread's variance once the
    runs' part is taken off (none can be negative), at least `floor`.  The runs' part is the mean of `own`, each
    session's own log variance as the history stored it beside its value (`own_variance`), where every usable
    session has one; else `within` (`session_value_var` of this session's timing spread), the nearest thing."""
    usable = [
        (math.log(v), own[i] if i < len(own) else None)
        for i, v in enumerate(session_values)
        if isinstance(v, (int, float)) and math.isfinite(v) and v > 0
    ]
    if len(usable) < MIN_SESSIONS:
        return None
    if within < 0 or not math.isfinite(within):
        raise ValueError(f"within must be a finite variance >= 0, got {within!r}")
    logs = [value for value, _ in usable]
    stored = [var for _, var in usable if isinstance(var, (int, float)) and math.isfinite(var) and var >= 0]
    whose = "read from this session's timing spread"
    if len(stored) == len(usable):
        within, whose = statistics.fmean(stored), "as each session stored it"
    estimate, bound = upper_sd(logs, confidence)
    drift_log = math.sqrt(max(bound**2 - within, 0.0))
    value, note = math.expm1(drift_log), ""
    if within:
        note = f"its runs' own timing taken off ({math.expm1(math.sqrt(within)):.1%} a session value, {whose})"
    if floor > value:
        value, note = floor, f"raised to the machine's move this session measured, {floor:.1%}"
    return DriftFigure(value, source, len(logs), math.expm1(estimate), since, note, confidence)


@dataclass(frozen=True)
class StartSpread:
    """What --specdec-measure-drift measured up to a test: per run figure (``output_throughput``,
    ``median_tpot_ms``, ...), the log change of one draw from a server's first start to a start anew, for every
    server started anew so far in the session on that engine build (both sides of each test measured); `why_none`
    says why a test has none (an endpoint, which the plugin does not start)."""

    changes: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    restarts: int = 0
    why_none: str = ""


def measured_drift(
    spread: StartSpread, figure: str, timing: float = 0.0, confidence: float = MEASURED_CONFIDENCE
) -> DriftFigure | None:
    """The drift of `figure` (a speedup, ``speedup_output_throughput``, or one side's own figure,
    ``speculative_median_tpot_ms``) from servers started anew in this session, or None with fewer than
    MIN_RESTARTS changes of its run figure.

    Each change holds two starts' effects on one draw, the first start's and the new one's, and two runs of one
    side (`timing`: one pair's log sd, SD's run against the reference's, this session's `Reading.timing`, so a
    side's run carries half its variance; 0 leaves the runs in, and the figure errs high).  A start's log variance
    is half the changes' mean square, their mean being zero (a start anew has no direction), read through the upper
    `confidence` bound as `learn_drift` reads sessions (chi-square, a degree of freedom per change), less one
    side's run variance, `timing**2 / 2` (none can be negative).  A speedup holds one start of each side, so
    its drift is two starts'; a side's own figure one start's.  Starts within one session miss what moves a
    machine over hours (its neighbours, its temperature): a results history learns that too, and is preferred."""
    if timing < 0 or not math.isfinite(timing):
        raise ValueError(f"timing must be a finite log sd >= 0, got {timing!r}")
    speedup = figure.startswith(SPEEDUP_PREFIX)
    metric = speedup_metric(figure) if speedup else figure
    for prefix in SIDE_PREFIXES:
        metric = metric.removeprefix(prefix)
    changes = [c for c in spread.changes.get(metric, ()) if isinstance(c, (int, float)) and math.isfinite(c)]
    if len(changes) < MIN_RESTARTS:
        return None
    n = len(changes)
    mean_square = sum(c * c for c in changes) / n
    bound = mean_square * n / chi2_critical(confidence, n)
    starts = 2 if speedup else 1
    run_var = timing**2 / 2  # one side's run: a pair's variance holds two such runs
    value = math.expm1(math.sqrt(starts * max(bound / 2 - run_var, 0.0)))
    estimate = math.expm1(math.sqrt(starts * mean_square / 2))
    note = (
        f"two runs' timing ({math.expm1(math.sqrt(run_var)):.1%} a run of one side) taken off each change"
        if timing
        else "the runs' own timing not taken off (the figure errs high)"
    )
    return DriftFigure(value, "measured", n, estimate, None, note, confidence)


def smallest_failable_drop(drift: float, rule: Rule = Rule()) -> float:
    """The smallest measured drop of a speedup the stored-baseline gate can fail with a per-side `drift`,
    however many runs: with every run's noise gone the interval is still the two sessions' drift wide, and its
    upper edge must fall below no change (verdict.sequential.rule.decide at infinite degrees of freedom)."""
    if drift < 0 or not math.isfinite(drift):
        raise ValueError(f"drift must be finite and >= 0, got {drift!r}")
    spread = math.sqrt(2) * drift  # the rule's known_var is 2 d^2 (verdict.gate.speedups)
    return -math.expm1(-t_quantile(rule.false_fail / rule.looks, math.inf) * spread)


def built_in_drift(value: float, device: str = "cpu") -> DriftFigure:
    """The plugin's fixed figure, labelled as what it is: the CPU build's, not this machine's."""
    note = "the CPU build's figure, not this machine's"
    if device == "gpu":
        note += "; it was not measured on any GPU"
    return DriftFigure(value, "built-in", note=note)


@dataclass(frozen=True)
class SessionSeries:
    """One figure's session values on one machine and engine build since the newest change point, as a results
    history gives them (`history.drift`): oldest first, with the change point they follow and where they live."""

    values: tuple[float, ...]
    since: str | None  # the change point's session and date; None: none in the series
    where: str  # the history's URL, without a password
    why_none: str = ""  # set when there are no values: why (no such series, a history that failed to open)
    own: tuple[float | None, ...] = ()  # each value's own log variance from its session's runs (None: not stored)


# (test id, fingerprint, history metric name) -> SessionSeries: the results history's side, injected by the session.
Lookup = Callable[[str, Mapping[str, Any], str], SessionSeries]


class DriftBook:
    """Where a session's gate gets each figure's drift: learned from the results history where it has sessions
    enough of this test on this machine and engine build, else the built-in figure, labelled as such.  A
    history's series is read once per (test, fingerprint, figure) in a session."""

    def __init__(self, lookup: Lookup | None = None, device: str = "cpu"):
        self.lookup = lookup
        self.device = device
        self._series: dict[tuple[str, str, str], SessionSeries] = {}

    def series(self, test_id: str, fingerprint: Mapping[str, Any], figure: str) -> SessionSeries | None:
        if self.lookup is None:
            return None
        key = (test_id, json.dumps(fingerprint, sort_keys=True, default=str), figure)
        if key not in self._series:
            self._series[key] = self.lookup(test_id, fingerprint, figure)
        return self._series[key]

    def figure(
        self,
        test_id: str,
        fingerprint: Mapping[str, Any],
        figure: str,
        built_in: float,
        *,
        within: float = 0.0,
        floor: float = 0.0,
        measured: StartSpread | None = None,
        timing: float = 0.0,
    ) -> DriftFigure:
        """The drift of `figure` (the history's name: ``speedup_output_throughput``, ``speculative_median_tpot_ms``)
        for this test on this machine: learned from the history (`learn_drift`, `within` and `floor` as there), else
        measured from servers started anew in this session (`measured`: `measured_drift` with one run's log sd
        `timing` taken off, at least `floor`), else
        `built_in` labelled with why neither was there."""
        series = self.series(test_id, fingerprint, figure)
        whys = []
        if series is not None and series.values:
            since = series.since
            learned = learn_drift(series.values, since=since, floor=floor, within=within, own=series.own)
            if learned is not None:
                return learned
            whys.append(
                f"the history has {len(series.values)} session(s) of this test on this machine and build"
                f"{f' since the change point of {since}' if since else ''}, {MIN_SESSIONS} needed"
            )
        elif series is not None:
            whys.append(series.why_none)
        if measured is not None:
            found = measured_drift(measured, figure, timing)
            if found is not None:
                if floor > found.value:
                    found = replace(
                        found, value=floor, note=f"raised to the machine's move this session measured, {floor:.1%}"
                    )
                return found
            whys.append(measured.why_none or f"{measured.restarts} server(s) started anew, {MIN_RESTARTS} needed")
        fallback = built_in_drift(built_in, self.device)
        if why := "; ".join(w for w in whys if w):
            fallback = replace(fallback, note=f"{fallback.note}; {why}")
        return fallback
