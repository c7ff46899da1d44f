"""verdict.sequential: a server that remembers is timed by its sends again among themselves, and a check that SD's
first sends leave undecided however often they are sent again asks for new draws of the workload."""

import math

import pytest

from pytest_specdec.verdict.sequential.evidence import Evidence, read
from pytest_specdec.verdict.sequential.rule import PASSED, UNDECIDED, bound_zone, decide, decide_until

L = math.log
ZONE = bound_zone(1.15)  # assert_speedup(min=1.15), the README's suffix check
REFERENCE, AGAIN = (0.01, -0.01), (0.0, 0.005)  # the reference's two draws, and sent again after SD's
# Suffix decoding's shape in the main job: first sends 1.35x and 1.98x, sends again about 2.6x within 3%.
SUFFIX = ((L(1.35), L(2.55), L(2.60), L(2.65)), (L(1.98), L(2.58), L(2.62), L(2.66)))


def evidence(sends, remembers=False, baseline=None):
    bracketed = baseline is None
    return Evidence(
        tuple(sends),
        reference=REFERENCE[: len(sends)] + (0.0,) * max(0, len(sends) - 2),
        reference_again=(AGAIN + (0.0,) * max(0, len(sends) - 2)) if bracketed else None,
        unmeasured_move=0.105 if bracketed else 0.0,
        baseline=baseline,
        remembers=remembers,
    )


def test_a_server_that_remembers_keeps_its_first_sends_and_is_timed_by_its_sends_again():
    # Read as any server's, draw 1's first send lies so far from its sends again, beyond draw 2's, that it is
    # set aside as disturbed and its sends again stand for it: the estimate rises to suffix's remembered speed.
    plain = read(evidence(SUFFIX))
    assert "draw 1's first send on SD set aside as disturbed" in plain.interval
    assert math.exp(plain.estimate) > 1.9
    # A server that remembers sends a draw again faster by its prompts' own amount: the first sends are the
    # figure (their geometric mean, 1.63x), and one run's timing is the sends again's among themselves.
    remembered = read(evidence(SUFFIX, remembers=True))
    references = [(r + a) / 2 for r, a in zip(REFERENCE, AGAIN)]  # each draw's two sends, around SD's
    assert remembered.estimate == pytest.approx(L(math.sqrt(1.35 * 1.98)) - sum(references) / 2)
    assert "set aside" not in remembered.interval
    assert "SD's server remembers what it served: its sends again time one another" in remembered.interval
    assert remembered.timing < 0.03
    decision = decide(evidence(SUFFIX, remembers=True), *ZONE)
    assert decision.outcome == PASSED and 1.5 < decision.ratio < 1.7


# Two draws whose first sends and sends again cross: SD's first sends are what the interval rests on, and
# sending them again only adds degrees of freedom, never narrows what is left below the zone's width.
CROSSED = ((L(1.3), L(1.9)), (L(1.9), L(1.3)))


def test_new_draws_are_asked_for_where_first_sends_are_what_is_left_and_only_against_the_reference():
    asked = decide(evidence(CROSSED), *ZONE, can_draw=True)
    assert asked.outcome == UNDECIDED and asked.more and asked.new_draws
    assert asked.why.endswith("new draws of the workload on both sides narrow it")
    # Where none can be had (fixed repeats, a calibration) the check stops as it did, and says what would decide.
    stopped = decide(evidence(CROSSED), *ZONE)
    assert not stopped.more and not stopped.new_draws
    assert stopped.why.endswith("more draws (--specdec-repeats N) or a quieter box would decide it")
    # Against a stored baseline a new draw would have no pair: its draws were the ones it measured.
    paired = decide(evidence(CROSSED, baseline=(0.4, 0.4)), *ZONE, can_draw=True)
    assert not paired.new_draws and not paired.more
    # At the cap no new draw is asked for either.
    assert not decide(evidence(CROSSED), *ZONE, can_draw=True, at_cap=True).new_draws


def test_decide_until_measures_new_draws_until_decided():
    sends = list(CROSSED)
    asked = []

    def new_draws() -> bool:
        asked.append(len(sends))
        sends.extend([(L(1.55),), (L(1.6),)])  # two new draws, one first send each, as run() measures them
        return True

    def more() -> bool:
        raise AssertionError("sending the draws again cannot narrow what is left here")

    decision = decide_until(lambda: evidence(sends), more, *ZONE, new_draws=new_draws)
    assert asked and asked[0] == 2
    assert decision.outcome == PASSED and decision.draws == len(sends) > 2
    # Without a way to new draws the same check stops undecided where it began.
    assert decide_until(lambda: evidence(CROSSED), None, *ZONE).outcome == UNDECIDED
