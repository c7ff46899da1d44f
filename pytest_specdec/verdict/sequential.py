"""Deciding a timing check by measuring until it is decided: passed, failed, or undecided at the cap.

A check compares one figure on a log scale (a speedup, or a speedup's change against a baseline) with a
zone: the **bad edge** `bad` (a speedup of the test's `min`; a drop of the gate's tolerance) and the
**good edge** `good` (the bad edge widened by the indifference `INDIFFERENCE`; no change at all). Each look
builds a one-sided interval for the figure and

- **fails** when its upper bound is below the good edge (so a figure at the good edge or better fails at
  most `false_fail` of the time),
- **passes** when its lower bound is above the bad edge (so a figure at the bad edge or worse passes at
  most `false_pass` of the time); inside the zone either answer is right, and the estimate picks,
- is **undecided** while the interval covers the whole zone; more runs narrow it, up to the cap.

The error rates are spent over the looks (Bonferroni: each look gets ``rate / looks``), which is what keeps
re-testing after each batch from inflating false fails, the known trap of "run until significant".

What the interval's spread is matters more than the rule (issue 46 measured it on the CPU build):

- **Content spread**: each draw of the workload (a repeat seed) sends other prompts, and SD's speed depends
  on them (n-gram on code edits: 1.25-2.18x across four-prompt draws), the reference's does not.
- **Timing spread**: the same prompts sent again (a few percent).

A check's figure is the mean over the draws it measured, each draw's first send: content is fixed, so only
timing is noise.  Before any draw was sent twice more the interval is the draws' own (content and timing),
which is wider, so a decision it allows is safe.  Once draws are sent again, they tell the timing spread
(`sends_timing`: later sends among themselves, and each first send against its own sends again around the
offset all share, since a prefix cache or suffix decoding's memory makes every sends again faster), pooled
with the reference's spread across draws (its speed does not depend on the prompts); the estimate stays the
first sends'.  Paired draws (changes against a baseline on the same seeds) set a disturbed one aside
(`_set_aside`).  Against a
stored baseline, paired by draw (the same seeds), the baseline's own timing noise counts too, and so does
the drift between two sessions (`known_var`), which no number of runs in one session shrinks: when it alone
covers the zone, the check is undecided at once, and says what would decide it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Callable, Sequence

PASSED, FAILED, UNDECIDED = "passed", "failed", "undecided"
FALSE_FAIL = 0.05  # at the good edge, per check
FALSE_PASS = 0.05  # at the bad edge, per check
INDIFFERENCE = 0.05  # a bound check's zone: from its bound to 5% beyond it
MIN_RUNS = 2  # draws of the workload every run() measures on each side
MAX_RUNS = 8  # runs per side a check may take (draws and draws sent again)
CHI2_1_LOW = NormalDist().inv_cdf(0.525) ** 2  # the 5% quantile of a chi-square with one degree of freedom
OUTLIER_MADS = 5.0  # a paired draw this many robust sds from the median was disturbed (`_set_aside`)
OUTLIER_MIN_DRAWS = 4  # fewer paired draws cannot tell which one is off


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


@dataclass(frozen=True)
class Rule:
    """A check's error rates and run budget."""

    false_fail: float = FALSE_FAIL
    false_pass: float = FALSE_PASS
    min_runs: int = MIN_RUNS
    max_runs: int = MAX_RUNS

    def __post_init__(self):
        for name in ("false_fail", "false_pass"):
            if not 0 < getattr(self, name) < 0.5:
                raise ValueError(f"{name} must be in (0, 0.5), got {getattr(self, name)!r}")
        if not 1 <= self.min_runs <= self.max_runs:
            raise ValueError(f"runs per side need 1 <= min ({self.min_runs}) <= cap ({self.max_runs})")

    @property
    def looks(self) -> int:
        """Decision points: after the draws, then after each further run per draw up to the cap."""
        return 1 + max(0, self.max_runs // self.min_runs - 1)


@dataclass(frozen=True)
class Evidence:
    """What a check decides on, per draw of the workload, on a log scale (higher is better).

    `sends[r]` are the figure's values from each time draw r was sent (the first, then sent again); for a
    ratio of two sides, `reference[r]` is the reference's log value on draw r (its speed does not depend on
    the prompts, so its spread across draws is timing) and `sends` hold SD's log values.  `baseline[r]` is a
    stored baseline's log figure on the same draw (paired by seed), or None.
    """

    sends: tuple[tuple[float, ...], ...]
    reference: tuple[float, ...] | None = None
    baseline: tuple[float, ...] | None = None
    known_var: float = 0.0  # variance no run shrinks: the drift between this session and the baseline's


@dataclass(frozen=True)
class Decision:
    outcome: str  # PASSED, FAILED or UNDECIDED
    estimate: float  # log scale
    low: float  # the interval the decision used (log scale)
    high: float
    runs: int  # runs per side so far
    draws: int
    stopped: str  # "decided at the minimum", "decided after N runs", "undecided at the cap (N runs)", ...
    content_spread: float | None  # relative spread of the figure between draws
    timing_spread: float | None  # relative spread of one run, the same prompts sent again
    interval: str  # "between draws (content and timing)" or "timing from draws sent again"
    why: str = ""  # for an undecided check: what would decide it
    more: bool = field(default=False)  # more runs would help (False at the cap, or when drift alone covers the zone)
    sign: int = 1  # -1: the evidence was negated (a check that a figure is at most a bound); ratios undo it

    @property
    def ratio(self) -> float:
        return math.exp(self.sign * self.estimate)

    @property
    def ratio_interval(self) -> tuple[float, float]:
        """The interval the decision used, as ratios in the figure's own direction."""
        low, high = sorted(
            math.exp(self.sign * v) if math.isfinite(v) else (math.inf if self.sign * v > 0 else 0.0)
            for v in (self.low, self.high)
        )
        return low, high

    def describe(self) -> str:
        low, high = self.ratio_interval
        head = f"{self.outcome} ({self.ratio:.3g}, interval {low:.3g}-{high:.3g}, {self.stopped}; {self.interval})"
        return head + (f": {self.why}" if self.why else "")


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _var(values: Sequence[float]) -> float:
    mean = _mean(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def _set_aside(values: list[float]) -> tuple[list[float], str]:
    """`values` without the draws a disturbed run moved: those beyond `OUTLIER_MADS` robust sds (1.4826 MAD)
    from the median, at most one in four, once there are `OUTLIER_MIN_DRAWS`; and what was set aside, said.

    Only paired figures come here (a change against a baseline on the same draw), where the prompts cancel and
    what is left is timing: a run 1.5x slower than its neighbours (a busy neighbour) is then tens of sds off,
    and one such draw among eight would widen the interval past any decision."""
    if len(values) < OUTLIER_MIN_DRAWS:
        return values, ""
    middle = statistics.median(values)
    scale = 1.4826 * statistics.median(abs(v - middle) for v in values)
    if scale <= 0:
        return values, ""
    far = sorted(values, key=lambda v: -abs(v - middle))[: len(values) // 4]
    far = [v for v in far if abs(v - middle) > OUTLIER_MADS * scale]
    if not far:
        return values, ""
    kept = list(values)
    for v in far:
        kept.remove(v)
    off = ", ".join(f"{math.expm1(v - middle):+.0%}" for v in far)
    return kept, f"; {len(far)} of {len(values)} draws set aside as disturbed ({off} off the median)"


def sends_timing(sends: Sequence[Sequence[float]]) -> tuple[float, int, float | None]:
    """(sum of squares, degrees of freedom, shared offset) of one run's timing, from draws sent again.

    The sends after a draw's first, around their own mean, are timing alone.  And how far each first send
    lies from its sends again, around the offset the draws share (a server that remembers, a prefix cache or
    suffix decoding's outputs, makes every draw's sends again faster), is the first sends' timing: a first
    send a neighbour slowed shows there, where the sends again cannot show it.  d = first - mean(again) has
    (1 + 1/k) of one run's variance, so the weight k / (k + 1) puts every draw's on one run's scale."""
    again = [tuple(s[1:]) for s in sends if len(s) > 1]
    df = sum(len(a) - 1 for a in again)
    squares = sum((v - _mean(a)) ** 2 for a in again if len(a) > 1 for v in a)
    offsets = [(s[0] - _mean(s[1:]), (len(s) - 1) / len(s)) for s in sends if len(s) > 1]
    shared = sum(d * w for d, w in offsets) / sum(w for _, w in offsets) if offsets else None
    if len(offsets) >= 2:
        squares += sum(w * (d - shared) ** 2 for d, w in offsets)
        df += len(offsets) - 1
    return squares, df, shared


def _estimate(evidence: Evidence) -> tuple:
    """(estimate, variance of it or None, df, which interval, content spread, timing spread, the part of the
    variance that sending the draws again does not narrow).

    The estimate is each draw's first send: a draw sent again is no longer new to the server (vLLM's prefix
    cache holds its prompts; suffix decoding drafts from the outputs it already gave), so later sends can be
    faster for a reason that is not the clock.  The sends again tell the timing spread (`sends_timing`)."""
    sends = [tuple(s) for s in evidence.sends if s]
    draws = len(sends)
    ref = list(evidence.reference) if evidence.reference is not None else None
    base = list(evidence.baseline) if evidence.baseline is not None else None
    first = [s[0] - (ref[r] if ref else 0.0) - (base[r] if base else 0.0) for r, s in enumerate(sends)]
    estimate = _mean(first)
    content = math.sqrt(_var(first)) if draws >= 2 else None
    squares, within_df, _ = sends_timing(sends)
    if within_df == 0:
        if draws < 2:
            return estimate, None, 0, "one draw sent once", content, None, 0.0
        interval = "between draws (content and timing)"
        if base is not None:  # paired on the same draws: the prompts cancel, a disturbed run stands out
            kept, said = _set_aside(first)
            estimate, interval = _mean(kept), interval + said
            # A draw set aside still spent its degree of freedom: what is kept was chosen for being close.
            df = len(kept) - 1 - (draws - len(kept))
            return estimate, _var(kept) / len(kept), max(1, df), interval, math.sqrt(_var(kept)), None, 0.0
        return estimate, _var(first) / draws, draws - 1, interval, content, None, 0.0
    df = within_df
    if ref is not None:
        if draws < 2:
            return estimate, None, 0, "one draw: the reference's timing spread is unknown", content, None, 0.0
        squares, df = squares + _var(ref[:draws]) * (draws - 1), df + draws - 1
    # One run's timing variance of a side's log figure, pooled over SD's sends again of each draw, the first
    # sends against them, and the reference's draws (its speed does not depend on the prompts): the same
    # machine and engine time both.
    run_var = squares / df
    sides = (1 + (1 if ref is not None else 0)) + ((2 if ref is not None else 1) if base is not None else 0)
    variance = run_var * sides / draws  # every run the estimate rests on is a draw's first: sends narrow df only
    if base is not None and draws >= 2:  # a baseline run this model cannot see (a neighbour then): the pairs'
        variance = max(variance, _var(first) / draws)  # own spread, where wider
    timing = run_var * (2 if ref is not None else 1)  # one run's variance of the figure (both sides of a ratio)
    return estimate, variance, df, "timing from draws sent again", content, math.sqrt(timing), variance


def decide(evidence: Evidence, bad: float, good: float, rule: Rule = Rule(), *, at_cap: bool | None = None) -> Decision:
    """One look of the rule (module docstring) at `evidence`; `bad` < `good` are the zone's edges (log)."""
    if not bad < good:
        raise ValueError(f"the zone needs bad < good, got {bad} and {good}")
    draws = len([s for s in evidence.sends if s])
    runs_per_side = sum(len(s) for s in evidence.sends)
    at_cap = runs_per_side >= rule.max_runs if at_cap is None else at_cap
    estimate, variance, df, interval, content, timing, fixed = _estimate(evidence)
    common = dict(
        estimate=estimate,
        runs=runs_per_side,
        draws=draws,
        content_spread=None if content is None else math.expm1(content),
        timing_spread=None if timing is None else math.expm1(timing),
        interval=interval,
    )
    if variance is None and rule.max_runs == 1 and draws == 1:  # --specdec-repeats 1: asked for one run
        return Decision(
            PASSED if estimate >= bad else FAILED,
            low=estimate,
            high=estimate,
            stopped="one run (--specdec-repeats 1): the point estimate decides, with no error rate",
            **common,
        )
    if variance is None:
        return Decision(
            UNDECIDED,
            low=-math.inf,
            high=math.inf,
            stopped=_stopped(runs_per_side, rule, at_cap, decided=False),
            why="one run has no spread to judge noise by: a second run decides",
            more=not at_cap,
            **common,
        )
    looks = rule.looks
    floor = math.sqrt(evidence.known_var)
    spread = math.sqrt(variance + evidence.known_var)
    # The drift's variance is known, not estimated: Welch-Satterthwaite gives it infinite degrees of freedom.
    # With a single estimated degree of freedom (two pairs, the first look against a stored baseline) the
    # estimate is often far below the truth, and so is the share it gets: at 20-30% noise that false-failed
    # 5.5-6.1% (docs/deciding.md).  There the share is taken at the variance's 95% upper bound (a chi-square
    # of one degree of freedom is below 0.00393 one time in twenty): a tiny spread beside the drift still
    # earns the drift's degrees of freedom, a spread that may be as large as the drift does not.
    if variance > 0:
        share = variance / CHI2_1_LOW if df == 1 else variance
        df = (share + evidence.known_var) ** 2 / (share**2 / df)
    else:  # nothing estimated: all of the spread is the known drift
        df = math.inf
    fail_high = estimate + t_quantile(rule.false_fail / looks, df) * spread
    pass_low = estimate - t_quantile(rule.false_pass / looks, df) * spread
    can_fail, can_pass = fail_high < good, pass_low > bad
    if can_fail or can_pass:
        outcome = PASSED if (can_pass and not can_fail) or (can_pass and estimate >= (bad + good) / 2) else FAILED
        return Decision(
            outcome, low=pass_low, high=fail_high, stopped=_stopped(runs_per_side, rule, at_cap, decided=True), **common
        )
    # More runs shrink only part of the interval: the drift between sessions never, and the reference's and a
    # baseline's runs not by sending SD's draws again.  When what is left alone would leave both edges inside
    # it, no more runs decide, and none is asked for.
    remains = math.sqrt(evidence.known_var + fixed)
    drift_covers = bool(remains) and not (
        estimate + t_quantile(rule.false_fail / looks, math.inf) * remains < good
        or estimate - t_quantile(rule.false_pass / looks, math.inf) * remains > bad
    )
    if drift_covers and floor >= math.sqrt(fixed):
        why = (
            f"the drift between two sessions (±{math.expm1(floor):.1%} on this figure) alone covers the zone, and "
            "no number of runs in one session narrows it: an in-session baseline build (--specdec-baseline-from "
            "build:PATH) decides it"
        )
    elif drift_covers:
        why = (
            "the runs the estimate rests on, one a draw (SD's first sends, the reference's, a baseline's), leave "
            "the zone inside the interval however often SD's draws are sent again (a first send far from its "
            "sends again, beyond what the other draws show, widens it: a disturbed run, or a server that "
            "remembers): more draws (--specdec-repeats N) or a quieter box would decide it"
        )
    elif at_cap:
        why = _what_decides(None if evidence.baseline is not None else content, timing, interval)
    else:
        why = "more runs of the same draws narrow the timing interval"
    return Decision(
        UNDECIDED,
        low=pass_low,
        high=fail_high,
        stopped=_stopped(runs_per_side, rule, at_cap, decided=False),
        why=why,
        more=not at_cap and not drift_covers,
        **common,
    )


def _stopped(runs: int, rule: Rule, at_cap: bool, decided: bool) -> str:
    if decided:
        return "decided at the minimum" if runs <= rule.min_runs else f"decided after {runs} runs a side"
    return f"undecided at the cap ({runs} runs a side)" if at_cap else f"undecided after {runs} runs a side"


def _what_decides(content: float | None, timing: float | None, interval: str) -> str:
    """`content` None where the draws' spread cancels (paired with a baseline on the same draws): then the
    spread is timing, and more prompts per draw would not narrow it."""
    parts = ["a higher --specdec-max-repeats (more runs)"]
    if timing is not None and timing > 0.05:
        parts.append(f"a quieter box (one run's timing spread is {math.expm1(timing):.0%})")
    if content is not None and "between draws" in interval:
        parts.append(f"more prompts per draw (the draws differ by {math.expm1(content):.0%} on their own)")
    return "still undecided: " + ", or ".join(parts) + " would decide it"


def bound_zone(bound: float, higher: bool = True, indifference: float = INDIFFERENCE) -> tuple[float, float]:
    """The zone (bad, good) of a check that the figure is at least (`higher`) or at most `bound`, on the
    signed log scale where higher is better: the bound is honoured, so passing below it is the false pass."""
    if bound <= 0:
        raise ValueError(f"a ratio bound must be positive, got {bound}")
    edge = math.log(bound) if higher else -math.log(bound)
    return edge, edge + math.log1p(indifference)


def tolerance_zone(tolerance: float) -> tuple[float, float]:
    """The gate's zone: a drop of the tolerance is the bad edge, no change the good edge."""
    if not 0 < tolerance < 1:
        raise ValueError(f"a tolerance in (0, 1) is needed, got {tolerance}")
    return math.log1p(-tolerance), 0.0


def decide_until(
    evidence: Callable[[], Evidence], more: Callable[[], bool] | None, bad: float, good: float, rule: Rule = Rule()
) -> Decision:
    """Look, and while undecided with runs left, ask `more()` for one more send of every draw (False: none
    could be had) and look again: the loop the plugin runs on live servers and the calibration on simulated
    sessions (benchmarks/sequential_calibration.py)."""
    decision = decide(evidence(), bad, good, rule)
    while decision.outcome == UNDECIDED and decision.more and more is not None:
        if not more():
            return decide(evidence(), bad, good, rule, at_cap=True)
        decision = decide(evidence(), bad, good, rule)
    return decision
