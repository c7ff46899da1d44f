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

What goes into the interval (content spread against timing spread, sends again, a disturbed draw set aside,
a builds A/B's references read apart, the drift against a stored baseline) is `verdict.sequential.evidence`'s: this
module is the rule over it.  When the drift alone covers the zone, the check is undecided at once, and
says what would decide it.  When SD's first sends are what is left (sending them again only adds degrees of
freedom), a check against the reference asks for new draws of the workload on both sides where the caller
can measure them (`decide_until`'s `new_draws`: measure.more_draws).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Callable

from .evidence import Evidence, read, reference_disturbed
from .student_t import t_quantile

PASSED, FAILED, UNDECIDED = "passed", "failed", "undecided"
FALSE_FAIL = 0.05  # at the good edge, per check
FALSE_PASS = 0.05  # at the bad edge, per check
INDIFFERENCE = 0.05  # a bound check's zone: from its bound to 5% beyond it
MIN_RUNS = 2  # draws of the workload every run() measures on each side
MAX_RUNS = 8  # runs per side a check may take (draws and draws sent again)
CHI2_1_LOW = NormalDist().inv_cdf(0.525) ** 2  # the 5% quantile of a chi-square with one degree of freedom


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
    # The reference's draws sent again after SD's would decide it: the machine's move is what is left.
    again_reference: bool = field(default=False)
    # New draws of the workload on both sides would narrow it: SD's first sends are what is left, which no send
    # again narrows (a server that remembers what it served, a first send a neighbour slowed).
    new_draws: bool = field(default=False)
    move: float = 0.0  # the bias bound the machine's move left in the interval (log; verdict.sequential.evidence)
    move_measured: float | None = None  # the move the reference's two sends read (log); None: not measured
    false_fail: float = FALSE_FAIL  # the rate it was decided at (a session budget's share: verdict.alarm_budget)

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


def decide(
    evidence: Evidence,
    bad: float,
    good: float,
    rule: Rule = Rule(),
    *,
    at_cap: bool | None = None,
    can_draw: bool = False,
) -> Decision:
    """One look of the rule (module docstring) at `evidence`; `bad` < `good` are the zone's edges (log).
    `can_draw`: new draws of the workload can be measured on both sides (`decide_until`'s `new_draws`)."""
    if not bad < good:
        raise ValueError(f"the zone needs bad < good, got {bad} and {good}")
    draws = len([s for s in evidence.sends if s])
    runs_per_side = sum(len(s) for s in evidence.sends)
    at_cap = runs_per_side >= rule.max_runs if at_cap is None else at_cap
    estimate, variance, df, interval, content, timing, fixed, move, moved = read(evidence)
    if moved is not None:
        interval += f"; the reference sent again after SD read the machine {math.expm1(moved):+.1%}"
    common = dict(
        estimate=estimate,
        runs=runs_per_side,
        draws=draws,
        content_spread=None if content is None else math.expm1(content),
        timing_spread=None if timing is None else math.expm1(timing),
        interval=interval,
        move=move,
        move_measured=moved,
        false_fail=rule.false_fail,
    )
    if variance is None and rule.max_runs == 1 and draws == 1:  # --specdec-repeats 1: asked for one run
        return Decision(
            PASSED if estimate >= bad else FAILED,
            low=estimate,
            high=estimate,
            stopped="one run (--specdec-repeats 1): the point estimate decides, with no error rate",
            **{**common, "false_fail": math.nan},  # no rate to state or to budget
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
        share = variance / CHI2_1_LOW if df < 2 else variance
        df = (share + evidence.known_var) ** 2 / (share**2 / df)
    else:  # nothing estimated: all of the spread is the known drift
        df = math.inf
    # The machine's move between the reference and SD biases the estimate by up to `move` either way: a bound
    # on the bias, so the interval's edges move out by it rather than its spread growing (verdict.sequential.evidence).
    fail_high = estimate + t_quantile(rule.false_fail / looks, df) * spread + move
    pass_low = estimate - t_quantile(rule.false_pass / looks, df) * spread - move
    can_fail, can_pass = fail_high < good, pass_low > bad

    def undecided(why: str, more: bool, again_reference: bool = False, new_draws: bool = False) -> Decision:
        stopped = _stopped(runs_per_side, rule, at_cap, decided=False)
        return Decision(
            UNDECIDED,
            low=pass_low,
            high=fail_high,
            stopped=stopped,
            why=why,
            more=more,
            again_reference=again_reference,
            new_draws=new_draws,
            **common,
        )

    # Where the move alone (no spread left at all) still leaves the zone outside the interval, more runs of SD's
    # draws decide with the move allowed for: only a move that covers the zone on its own asks for the
    # reference's draws again (a server start) or, measured, stops the measuring, whatever the spread also
    # leaves (no number of runs removes a bias bound).
    move_covers = not (estimate - move > bad or estimate + move < good)
    if not (can_fail or can_pass) and move_covers and move > 0:
        if moved is None:
            why = (
                f"the machine may have moved up to {-math.expm1(-move):.0%} since the reference's runs, unseen (a "
                "neighbour, a clock): the reference's draws sent again after SD's measure the move and decide it"
            )
        else:
            why = (
                f"the machine moved {math.expm1(moved):+.1%} between the reference's runs and SD's (the reference "
                "sent again after SD read it), which alone leaves the zone inside the interval: a quieter box, or "
                "a baseline build measured beside this one (--specdec-baseline-from build:PATH), decides it"
            )
        return undecided(why, more=moved is None, again_reference=moved is None)
    if can_fail or can_pass:
        outcome = PASSED if (can_pass and not can_fail) or (can_pass and estimate >= (bad + good) / 2) else FAILED
        return Decision(
            outcome, low=pass_low, high=fail_high, stopped=_stopped(runs_per_side, rule, at_cap, decided=True), **common
        )
    if evidence.unmeasured_move and (disturbed := reference_disturbed(evidence)):  # a hiccup: send it again
        return undecided(disturbed + ": the reference's draws sent again after SD's name it and decide", True, True)
    # More runs shrink only part of the interval: the drift between sessions never, and the reference's and a
    # baseline's runs not by sending SD's draws again.  When what is left alone would leave both edges inside
    # it, no more runs decide, and none is asked for.
    remains = math.sqrt(evidence.known_var + fixed)
    drift_covers = bool(remains) and not (
        estimate + t_quantile(rule.false_fail / looks, math.inf) * remains + move < good
        or estimate - t_quantile(rule.false_pass / looks, math.inf) * remains - move > bad
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
            "remembers)"
        )
        if moved is None and move > 0:  # the reference can still be sent again
            # Each draw's reference is then the mean of two sends: that halves its share and reads the move.
            return undecided(why + ": the reference's draws sent again after SD's halve its share", True, True)
        if can_draw and evidence.baseline is None and not at_cap:
            # Each new draw is one more first send on both sides for the estimate to rest on.  Against a
            # baseline the new draws would have no pair: its draws were the ones it measured.
            return undecided(why + ": new draws of the workload on both sides narrow it", True, new_draws=True)
        why += ": more draws (--specdec-repeats N) or a quieter box would decide it"
    elif at_cap:
        why = _what_decides(None if evidence.baseline is not None else content, timing, interval)
    else:
        why = "more runs of the same draws narrow the timing interval"
    return undecided(why, more=not at_cap and not drift_covers)


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
    evidence: Callable[[], Evidence],
    more: Callable[[], bool] | None,
    bad: float,
    good: float,
    rule: Rule = Rule(),
    again_reference: Callable[[], bool] | None = None,
    new_draws: Callable[[], bool] | None = None,
) -> Decision:
    """Look, and while undecided with runs left, ask `more()` for one more send of every draw (False: none
    could be had) and look again; where the machine's unseen move is what is left, ask `again_reference()`
    to send the reference's draws again after SD's (once); where SD's first sends are what is left, ask
    `new_draws()` for new draws of the workload on both sides (None: none can be had): the loop the plugin
    runs on live servers and the calibration on simulated sessions (benchmarks/sequential_calibration.py)."""
    can_draw = new_draws is not None
    decision = decide(evidence(), bad, good, rule, can_draw=can_draw)
    while decision.outcome == UNDECIDED and decision.more:
        ask = again_reference if decision.again_reference else new_draws if decision.new_draws else more
        if ask is None:
            return decision
        if not ask():
            return decide(evidence(), bad, good, rule, at_cap=True, can_draw=can_draw)
        decision = decide(evidence(), bad, good, rule, can_draw=can_draw)
    return decision
