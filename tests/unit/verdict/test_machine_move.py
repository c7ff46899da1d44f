"""verdict.sequential.evidence and verdict.sequential: the machine's move between the reference's runs and SD's, and the
degrees of freedom of a variance read from the draws alone."""

import math

from pytest_specdec.verdict.sequential.evidence import UNMEASURED_MOVE, Evidence, read
from pytest_specdec.verdict.sequential.rule import PASSED, UNDECIDED, Rule, bound_zone, decide, decide_until

BOUND = bound_zone(1.15)
L = math.log


def near_the_bound(ratio=1.26, again=None, move=UNMEASURED_MOVE):
    """A speedup 10% above the bound, read tightly: two draws, each sent twice, the reference steady."""
    sends = ((L(ratio), L(ratio) + 0.004), (L(ratio) + 0.006, L(ratio) + 0.002))
    return Evidence(sends, reference=(0.0, 0.003), reference_again=again, unmeasured_move=move)


def test_without_the_move_a_tight_reading_decides_at_once():
    assert decide(near_the_bound(move=0.0), *BOUND).outcome == PASSED


def test_an_unseen_move_is_allowed_for_and_sending_the_reference_again_is_asked_for():
    decision = decide(near_the_bound(), *BOUND)
    assert decision.outcome == UNDECIDED and decision.again_reference and decision.more
    assert "may have moved up to 10%" in decision.why and decision.move == UNMEASURED_MOVE
    assert decision.move_measured is None


def test_the_loop_sends_the_reference_again_once_then_decides_on_the_measured_move():
    sent = []
    evidence = [near_the_bound()]

    def again():
        sent.append(1)
        evidence[0] = near_the_bound(again=(0.001, 0.002))  # the machine held still
        return True

    decision = decide_until(lambda: evidence[0], lambda: False, *BOUND, again_reference=again)
    assert decision.outcome == PASSED and sent == [1]
    assert abs(decision.move_measured) < 0.01 and "read the machine" in decision.interval


def test_a_measured_move_that_covers_the_zone_is_undecided_and_says_the_machine_moved():
    # SD read 1.10x against the reference before it and 1.25x against the reference sent again after it (the
    # machine 12% slower in between): which holds depends on when it moved, and the zone lies between them.
    slow = near_the_bound(ratio=1.10, again=(L(0.88), L(0.88) + 0.003))
    decision = decide(slow, *BOUND)
    assert decision.outcome == UNDECIDED and not decision.again_reference and not decision.more
    assert "the machine moved -12.0%" in decision.why


def test_a_move_measured_between_the_sends_moves_the_estimate_to_their_midpoint():
    reading = read(near_the_bound(again=(-0.1, -0.1 + 0.003)))
    plain = read(near_the_bound(move=0.0))
    assert math.isclose(reading.estimate - plain.estimate, 0.05, abs_tol=1e-9)
    assert math.isclose(reading.move, 0.05, abs_tol=1e-9) and math.isclose(reading.move_measured, -0.1)


def test_a_baseline_comparison_carries_no_move_bound_of_its_own():
    evidence = Evidence(((0.0, 0.01), (0.02, 0.0)), reference=(0.0, 0.0), baseline=(0.0, 0.0), unmeasured_move=0.1)
    assert read(evidence).move == 0.0


def test_a_variance_read_from_the_draws_alone_keeps_their_degrees_of_freedom():
    # Sends again agree to 0.1%, so the pooled timing spread is tiny; the draws against the baseline disagree
    # by 20% (a noisier baseline session), so their own spread is taken, and with it draws - 1 = 1 degree of
    # freedom: today's line kept the sends again's 4, and a t of 4 degrees where 1 is due narrows the interval
    # by 2.4x at the 5% level.
    sends = ((0.0, 0.001, 0.0), (0.2, 0.201, 0.2))
    evidence = Evidence(sends, reference=(0.0, 0.0), baseline=(0.0, 0.0))
    reading = read(evidence)
    assert math.isclose(reading.variance, 0.01)
    assert abs(reading.df - 1) < 0.01


def test_two_draws_that_agree_only_with_each_other_decide_nothing_on_one_degree_of_freedom():
    # Both draws 26-29% below the baseline, sends again within 0.1%: today's line read the draws' spread with
    # the sends again's 4 degrees of freedom and failed it; with the 1 it has, the rule cannot tell a drop
    # from a baseline session that was off.
    sends = ((-0.3, -0.299, -0.3), (-0.34, -0.339, -0.34))
    evidence = Evidence(sends, reference=(0.0, 0.0), baseline=(0.0, 0.0))
    assert abs(read(evidence).df - 1) < 0.01
    assert decide(evidence, math.log(0.85), 0.0).outcome == UNDECIDED


def test_a_disturbed_reference_run_is_named_sent_again_and_set_aside():
    # Draw 2's reference ran 2x slow (a neighbour's burst): its spread is far beyond SD's timing, so the check
    # asks for the reference again rather than stopping undecided at the cap.
    sends = ((L(1.4), L(1.4) + 0.005, L(1.4) + 0.002), (L(1.4) + 0.003, L(1.4), L(1.4) + 0.004))
    evidence = [Evidence(sends, reference=(0.0, -0.69), unmeasured_move=UNMEASURED_MOVE)]
    first = decide(evidence[0], *BOUND)
    assert first.outcome == UNDECIDED and first.again_reference
    assert "the reference's runs differ by 99% between draws" in first.why and "disturbed" in first.why

    def again():
        evidence[0] = Evidence(
            sends, reference=(0.0, -0.69), reference_again=(0.002, 0.001), unmeasured_move=UNMEASURED_MOVE
        )
        return True

    decision = decide_until(lambda: evidence[0], lambda: False, *BOUND, again_reference=again)
    assert decision.outcome == PASSED and math.isclose(decision.ratio, 1.4, rel_tol=0.01)
    assert "1 of 4 reference runs (before and after SD's) set aside as disturbed (-50% off the median)" in (
        decision.interval
    )


def test_a_disturbed_first_send_on_sd_is_stood_for_by_its_sends_again():
    # Against a baseline on the same draws: draw 2's first send on SD ran 2x slow, its sends again did not.
    sends = ((0.0, 0.01, 0.0, 0.004), (-0.69, 0.002, 0.005, 0.0))
    evidence = Evidence(sends, reference=(0.0, 0.001), baseline=(0.0, 0.0))
    decision = decide(evidence, math.log(0.85), 0.0)
    assert decision.outcome == PASSED
    assert "draw 2's first send on SD set aside as disturbed (-50% against its sends again" in decision.interval
    steady = Evidence(((0.0, 0.01, 0.0, 0.004), (0.002, 0.002, 0.005, 0.0)), reference=(0.0, 0.001))
    assert "set aside" not in read(steady).interval


def test_a_measured_move_that_leaves_the_zone_outside_on_its_own_asks_for_more_runs_not_a_stop():
    # A poor draft read 0.51x against a bound of 0.9 on two draws (one degree of freedom: a wide interval),
    # the machine 12% faster between the reference's sends: the move alone is far from covering the zone, so
    # the rule asks for more runs (they narrow the rest) instead of stopping, undecided, on the move.
    zone = bound_zone(0.9, higher=False)
    first_look = Evidence(
        ((-L(0.51),), (-L(0.51) - 0.02,)), reference=(0.0, 0.03), reference_again=(-L(0.88), -L(0.88) + 0.003)
    )
    decision = decide(first_look, *zone, Rule(max_runs=8))
    assert decision.move_measured is not None and decision.move > 0.05
    assert decision.outcome == UNDECIDED and decision.more and not decision.again_reference, decision
    assert "machine moved" not in decision.why, decision.why
    # Sent again, the draws narrow the interval and the rule decides, the move still allowed for.
    sent_again = Evidence(
        ((-L(0.51), -L(0.51) + 0.01), (-L(0.51) - 0.02, -L(0.51) + 0.004)),
        reference=(0.0, 0.03),
        reference_again=(-L(0.88), -L(0.88) + 0.003),
    )
    assert decide(sent_again, *zone, Rule(max_runs=8)).outcome == PASSED


def test_an_unseen_move_that_cannot_cover_the_zone_sends_sds_draws_again_not_the_reference():
    # The same poor draft before any reference was sent again: a 10% move either way cannot bring 0.51x to 0.9,
    # so the rule asks for SD's draws again (its server is up) rather than restarting the reference's.
    zone = bound_zone(0.9, higher=False)
    first_look = Evidence(((-L(0.51),), (-L(0.51) - 0.01,)), reference=(0.0, 0.03), unmeasured_move=UNMEASURED_MOVE)
    decision = decide(first_look, *zone, Rule(max_runs=8))
    assert decision.outcome == UNDECIDED and decision.more and not decision.again_reference, decision
    assert decision.move == UNMEASURED_MOVE and "moved" not in decision.why


def test_a_reference_whose_runs_alone_keep_the_check_undecided_is_sent_again_not_given_up():
    # SD's runs are noisy (6% between sends of a draw) and the reference's two first runs 12% apart, within
    # that timing (no hiccup to name): however often SD's draws are sent again, the reference's spread stays.
    # Sending the reference's draws again halves its share and reads the move, so the rule asks for it (once)
    # before it stops; the CI box ran the fake session this way and gave up.
    ratio, spread = 1.50, L(1.12)
    sends = ((L(ratio), L(ratio) + 0.06), (L(ratio) + 0.01, L(ratio) - 0.05))
    zone = bound_zone(1.59)
    unseen = Evidence(sends, reference=(0.0, spread), unmeasured_move=UNMEASURED_MOVE)
    decision = decide(unseen, *zone, Rule(max_runs=8))
    assert decision.outcome == UNDECIDED and decision.again_reference and decision.more, decision
    assert "halve its share" in decision.why
    # Sent again, the reference's spread is read across four runs; what still covers the zone stops the check.
    sent = Evidence(sends, reference=(0.0, spread), reference_again=(0.0, spread))
    after = decide(sent, *zone, Rule(max_runs=8))
    assert after.outcome == UNDECIDED and not after.again_reference and not after.more, after
    assert "more draws (--specdec-repeats N)" in after.why, after.why


def test_a_measured_move_that_covers_the_zone_is_named_even_where_the_spread_covers_it_too():
    # SD's runs noisy (6% between sends) and the machine 11% slower between the reference's sends, SD inside
    # the zone: no number of runs removes the move's bias bound, so the check stops and names the move (the CI
    # box's fake session read "more draws would decide it" here, which they would not).
    sends = ((L(1.61), L(1.61) + 0.06), (L(1.61) + 0.01, L(1.61) - 0.05))
    moved = Evidence(sends, reference=(0.0, 0.003), reference_again=(L(0.89), L(0.89) + 0.003))
    decision = decide(moved, *bound_zone(1.64), Rule(max_runs=8))
    assert decision.outcome == UNDECIDED and not decision.more and not decision.again_reference, decision
    assert "the machine moved -11.0%" in decision.why, decision.why
