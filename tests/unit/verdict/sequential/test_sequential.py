"""verdict.sequential: the t quantiles it rests on, when it stops, what it says undecided, and its false-fail rate."""

import math

import numpy as np
import pytest

from pytest_specdec.verdict.sequential.rule import (
    FAILED,
    PASSED,
    UNDECIDED,
    Evidence,
    Rule,
    bound_zone,
    decide,
    decide_until,
    tolerance_zone,
)
from pytest_specdec.verdict.sequential.student_t import t_quantile

BOUND = bound_zone(1.15)  # (log 1.15, log 1.2075)


@pytest.mark.parametrize(
    "df, expected", [(1, 12.706), (2, 4.303), (3, 3.182), (10, 2.228), (30, 2.042), (math.inf, 1.960)]
)
def test_t_quantile_matches_the_tables(df, expected):
    assert t_quantile(0.025, df) == pytest.approx(expected, abs=1e-3)


def test_t_quantile_floors_a_fractional_df_to_the_wider_one():
    assert t_quantile(0.05, 2.9) == t_quantile(0.05, 2) > t_quantile(0.05, 3)


class Draws:
    """A check's evidence that grows by one send of every draw on each `more()`, counting the calls."""

    def __init__(self, sends_per_draw, reference, baseline=None, known_var=0.0):
        self.pending = [list(s) for s in sends_per_draw]  # each draw's sends, in order
        self.sends = [[s.pop(0)] for s in self.pending]
        self.reference, self.baseline, self.known_var, self.calls = tuple(reference), baseline, known_var, 0

    def evidence(self):
        return Evidence(tuple(map(tuple, self.sends)), self.reference, self.baseline, self.known_var)

    def more(self):
        self.calls += 1
        if not all(self.pending):
            return False
        for sends, pending in zip(self.sends, self.pending):
            sends.append(pending.pop(0))
        return True


def test_a_wide_margin_is_decided_on_the_first_two_draws():
    draws = Draws([[math.log(2.0)], [math.log(2.02)]], reference=[0.0, 0.0])
    decision = decide_until(draws.evidence, draws.more, *BOUND)
    assert (decision.outcome, decision.runs, decision.draws) == (PASSED, 2, 2)
    assert decision.stopped == "decided at the minimum" and draws.calls == 0
    assert decision.interval == "between draws (content and timing)"


def test_draws_that_disagree_are_sent_again_once_and_then_decided_on_timing():
    # 1.6x and 2.2x: the draws' own spread leaves the bound inside the interval; the same prompts sent again
    # land within 0.5%, so the timing-only interval clears the bound after one more send of each.
    sends = [[math.log(1.6 * f) for f in (1.0, 1.005, 0.998)], [math.log(2.2 * f) for f in (1.0, 0.995, 1.003)]]
    draws = Draws(sends, reference=[0.0, 0.005])
    first = decide(draws.evidence(), *BOUND)
    assert first.outcome == UNDECIDED and first.more
    decision = decide_until(draws.evidence, draws.more, *BOUND)
    # One send again of each draw is enough: how far each first send lies from its send again, around what the
    # two share, tells the timing spread (one degree of freedom), with the reference's across draws (another).
    assert draws.calls == 1
    assert (decision.outcome, decision.runs, decision.stopped) == (PASSED, 4, "decided after 4 runs a side")
    assert decision.interval == "timing from draws sent again"


def test_a_first_send_a_neighbour_slowed_does_not_fail_a_good_speedup():
    # 1.30x on both draws, well above the good edge (1.2075x), but draw 1's first send ran 1.5x slow: the
    # estimate falls to 1.06x.  Its sends again are steady, so the sends again alone would say "timing 0.5%"
    # and fail it; the first send's distance from its own sends again, unlike draw 2's, widens the interval.
    good = 1.30
    sends = [
        [math.log(good / 1.5), math.log(good * 1.01), math.log(good * 0.99), math.log(good)],
        [math.log(good), math.log(good * 0.995), math.log(good * 1.004), math.log(good)],
    ]
    draws = Draws(sends, reference=[0.0, 0.01])
    decision = decide_until(draws.evidence, draws.more, *BOUND)
    assert decision.ratio == pytest.approx(good / math.sqrt(1.5), rel=0.01)  # the slow send is in the estimate
    assert decision.outcome == UNDECIDED and decision.low < BOUND[0] and decision.high > BOUND[1], decision
    assert "a first send far from its sends again" in decision.why and "more draws" in decision.why
    # Without the slow first send the same evidence passes.
    sends[0][0] = math.log(good)
    steady = Draws(sends, reference=[0.0, 0.01])
    assert decide_until(steady.evidence, steady.more, *BOUND).outcome == PASSED


def test_a_disturbed_draw_against_a_baseline_build_is_set_aside_and_said():
    # A 10% drop against an in-session baseline build, paired by draw (the prompts cancel): one draw's change
    # is +35% (a run a neighbour slowed), which alone would leave the interval over the whole zone.
    changes = [-0.10, -0.11, -0.095, -0.105, math.log(1.35), -0.10]
    zone = tolerance_zone(0.10)

    def paired(values):
        return Evidence(tuple((v,) for v in values), reference=(0.0,) * len(values), baseline=(0.0,) * len(values))

    decision = decide(paired(changes), *zone)
    assert decision.outcome == FAILED and decision.ratio == pytest.approx(math.exp(-0.102), rel=1e-3)
    assert "1 of 6 draws set aside as disturbed (+49% off the median)" in decision.interval
    # Three draws cannot tell which one is off: nothing is set aside, and the spread leaves it undecided.
    few = decide(paired([-0.10, math.log(1.35), -0.11]), *zone)
    assert few.outcome == UNDECIDED and "set aside" not in few.interval
    # Draws that merely spread are kept: no draw is five robust sds from the median.
    spread = decide(paired([-0.02, 0.03, -0.05, 0.01, 0.04, -0.03]), *zone)
    assert "set aside" not in spread.interval
    # Unpaired draws (no baseline) carry the prompts' own spread, which is the figure's: never set aside.
    unpaired = Evidence(tuple((v,) for v in changes), reference=(0.0,) * 6)
    assert "set aside" not in decide(unpaired, *zone).interval


def test_undecided_at_the_cap_is_its_own_outcome_and_says_what_decides_it():
    on_the_bound = [[math.log(1.17 * f) for f in (1.0, 1.08, 0.93)], [math.log(1.18 * f) for f in (0.95, 1.06, 1.0)]]
    draws = Draws(on_the_bound, reference=[0.0, 0.06])
    decision = decide_until(draws.evidence, draws.more, *BOUND)
    # Once the sends again tell the timing spread, the rule sees that the draws' first sends, one a draw on each
    # side, leave the bound inside the interval however often the draws are sent: undecided, and it says so.
    assert (decision.outcome, decision.runs, decision.more) == (UNDECIDED, 6, False)
    assert "undecided" in decision.stopped and draws.calls == 2
    assert "more draws (--specdec-repeats N) or a quieter box would decide it" in decision.why
    # Without that early stop (no runs left to ask for) it is undecided at the cap, and says what decides it.
    capped = decide(draws.evidence(), *BOUND, at_cap=True)
    assert capped.outcome == UNDECIDED and capped.stopped == "undecided at the cap (6 runs a side)"


def test_no_more_runs_to_be_had_ends_undecided_at_the_cap():
    draws = Draws([[math.log(1.17)], [math.log(1.22)]], reference=[0.0, 0.05])
    decision = decide_until(draws.evidence, lambda: False, *BOUND)
    assert decision.outcome == UNDECIDED and not decision.more and "at the cap" in decision.stopped


def test_drift_that_covers_the_zone_is_undecided_at_once_and_names_the_in_session_build():
    # An 8% drop against a 15% tolerance: inside the zone, where two sessions' drift alone (detection.SESSION_DRIFT,
    # 4.2% a side) leaves both edges inside the interval, so no number of runs decides it.
    draws = Draws(
        [[math.log(1.5)], [math.log(1.4)]],
        reference=[0.0, 0.01],
        baseline=(math.log(1.5 / 0.92), math.log(1.4 / 0.92)),
        known_var=2 * 0.042**2,
    )
    decision = decide_until(draws.evidence, draws.more, *tolerance_zone(0.15))
    assert (decision.outcome, decision.more, draws.calls) == (UNDECIDED, False, 0)
    assert "in-session baseline build" in decision.why and "--specdec-baseline-from build:PATH" in decision.why
    # A halved speedup is outside what the drift covers: decided, failed.
    halved = Draws(
        [[math.log(0.75 * f) for f in (1.0, 1.02, 0.98)], [math.log(0.7 * f) for f in (1.0, 0.98, 1.02)]],
        reference=[0.0, 0.01],
        baseline=(math.log(1.5), math.log(1.4)),
        known_var=2 * 0.042**2,
    )
    decision = decide_until(halved.evidence, halved.more, *tolerance_zone(0.15))
    assert decision.outcome == FAILED


def test_a_clear_drop_against_an_in_session_build_fails():
    sends = [[math.log(1.2 * f) for f in (1.0, 1.01, 0.99)], [math.log(1.1 * f) for f in (1.0, 0.99, 1.01)]]
    draws = Draws(sends, reference=[0.0, 0.01], baseline=(math.log(1.6), math.log(1.45)))
    decision = decide_until(draws.evidence, draws.more, *tolerance_zone(0.10))
    assert decision.outcome == FAILED and decision.ratio == pytest.approx(0.75, abs=0.02)


def simulated_bound_checks(true_speedup: float, sessions: int, seed: int) -> list[str]:
    """Outcomes of `assert_speedup(min=1.15)` checks under the rule: 5% lognormal timing noise on every run,
    5% of runs 1.5x slower, and draws whose speedups differ by ~30% (the CPU build's content spread), centred
    so the draws measured average `true_speedup`: the figure the rule decides is the draws' mean."""
    rng, rule = np.random.default_rng(seed), Rule()
    sends_per_draw = rule.max_runs // rule.min_runs
    log_sd, outcomes = math.sqrt(math.log1p(0.05**2)), []
    for _ in range(sessions):
        runs = log_sd * rng.standard_normal((rule.min_runs, sends_per_draw + 1))
        runs -= math.log(1.5) * (rng.random(runs.shape) < 0.05)
        content = 0.26 * rng.standard_normal(rule.min_runs)
        content -= content.mean()
        sd = math.log(true_speedup) + content[:, None] + runs[:, :sends_per_draw]
        draws = Draws(sd.tolist(), reference=runs[:, sends_per_draw].tolist())
        outcomes.append(decide_until(draws.evidence, draws.more, *BOUND, rule).outcome)
    return outcomes


def test_false_fails_at_the_good_edge_and_false_passes_at_the_bound_stay_within_the_stated_rates():
    sessions, rule = 300, Rule()
    margin = 2 * math.sqrt(0.05 * 0.95 / sessions)  # the simulation's own error, ~2.5 points
    at_good_edge = simulated_bound_checks(1.15 * 1.05, sessions, seed=11)
    at_bound = simulated_bound_checks(1.15, sessions, seed=12)
    assert at_good_edge.count(FAILED) / sessions <= rule.false_fail + margin
    assert at_bound.count(PASSED) / sessions <= rule.false_pass + margin
    clear = simulated_bound_checks(1.15 * 1.3, sessions, seed=13)  # and it does decide where the margin is clear
    assert clear.count(PASSED) / sessions > 0.5 and clear.count(FAILED) / sessions <= rule.false_fail + margin


@pytest.mark.parametrize(
    "call",
    [
        lambda: decide(Evidence(((0.1,), (0.2,))), 0.2, 0.1),
        lambda: decide(Evidence(((0.1,), (0.2,))), 0.1, 0.1),
        lambda: Rule(min_runs=4, max_runs=2),
        lambda: Rule(min_runs=0),
        lambda: Rule(false_fail=0.5),
        lambda: Rule(false_pass=0.0),
        lambda: bound_zone(0.0),
        lambda: tolerance_zone(1.0),
        lambda: tolerance_zone(0.0),
        lambda: t_quantile(0.5, 3),
    ],
)
def test_invalid_inputs_raise(call):
    with pytest.raises(ValueError):
        call()


def test_two_pairs_beside_a_known_drift_count_the_drift_only_where_their_own_spread_is_surely_small():
    # The first look against a stored baseline: two pairs (one estimated degree of freedom) and the drift.
    # Welch-Satterthwaite on the estimate itself would give the sum more degrees of freedom than the one
    # estimated, and at high noise that false-failed 5.5-6.1% of simulated sessions: pairs 10% apart keep t
    # at one degree of freedom.
    known = 2 * 0.042**2

    def first_look(half_gap, tolerance=0.10):
        evidence = Evidence(((-half_gap,), (half_gap,)), reference=(0.0, 0.0), baseline=(0.0, 0.0), known_var=known)
        decision = decide(evidence, *tolerance_zone(tolerance))
        return decision, (decision.high - decision.estimate) / math.sqrt(half_gap**2 + known)

    decision, t = first_look(0.05)
    assert t == pytest.approx(t_quantile(0.05 / Rule().looks, 1)) and decision.outcome == UNDECIDED
    # Pairs 0.2% apart: even at its 95% upper bound their variance is small beside the drift's, which is known,
    # so the interval is the drift's (t near the normal's) and the unchanged speedup passes at once (at 15%: at
    # 10% the drift alone covers the zone).
    decision, t = first_look(0.001, tolerance=0.15)
    assert t < t_quantile(0.05 / Rule().looks, 10) and decision.outcome == PASSED
