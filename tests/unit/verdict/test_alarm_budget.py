"""A session's false alarms budgeted as a whole: each test's share over its checks never adds up to more than the
budget, and the statement is the sum of the rates the checks used."""

import math
import pickle

import pytest

from pytest_specdec.verdict.alarm_budget import AlarmBudget, RatesForTest, any_false_fail
from pytest_specdec.verdict.sequential.rule import FALSE_FAIL


def test_without_a_budget_every_check_gets_the_rules_rate():
    budget = AlarmBudget()
    assert [budget.claim("t::a", f"c{i}") for i in range(3)] == [FALSE_FAIL] * 3
    assert budget.rule_rates("t::b", "c") == {"false_fail": FALSE_FAIL, "false_pass": 0.05}


def test_a_budget_split_over_the_tests_and_each_tests_checks_never_adds_up_to_more():
    budget = AlarmBudget(session=0.05, tests=20)
    first = budget.claim("t::0", "speedup >= 1.15")
    assert first == pytest.approx(0.05 / 20 * 6 / math.pi**2)
    assert budget.claim("t::0", "speedup against the baseline") == pytest.approx(first / 4)  # j = 2
    # However many checks every test makes, the sum of what they claimed stays within the budget.
    for test in range(20):
        for check in range(50):
            budget.claim(f"t::{test}", f"check {check}")
    assert sum(rate for _, _, rate in budget.claims) < 0.05
    # A budget wider than one check's own rate never gives a check more than that rate.
    generous = AlarmBudget(session=0.4, tests=1)
    assert generous.claim("t::a", "c") == FALSE_FAIL


def test_rates_outside_zero_to_a_half_are_refused():
    for bad in (dict(session=0.0), dict(false_fail=0.5), dict(false_pass=-0.1)):
        with pytest.raises(ValueError, match="rate in"):
            AlarmBudget(**bad)


def test_the_statement_is_the_sum_of_the_rates_used_and_names_checks_without_one():
    budget = AlarmBudget(session=0.05, tests=3)
    rates = [0.01, 0.01, 0.005]
    assert any_false_fail(rates) == pytest.approx(0.025)
    text = budget.statement(rates, unrated=2)
    assert text.startswith(
        "3 timing checks at 0.50%-1.00% false fails each, the session budget 5.0% split over 3 tests"
    )
    assert "at most 2.50%" in text and "2 checks decided on one run (--specdec-repeats 1), with no error rate" in text
    twenty = AlarmBudget().statement([0.05] * 20)
    assert "20 timing checks at 5.00% false fails each, no session budget" in twenty and "at most 100.00%" in twenty
    assert AlarmBudget().statement([]) is None
    summary = budget.as_dict(rates, 2)
    assert summary["checks"] == 3 and summary["checks_without_rate"] == 2 and summary["session"] == 0.05


def test_a_tests_rates_travel_with_its_result_when_pickled():
    # A result holds its test's rates (the main job's results and xdist's reports are pickled): no closure.
    rates = RatesForTest(AlarmBudget(session=0.05, tests=2), "t::a")
    first = rates("speedup >= 1.15")["false_fail"]
    again = pickle.loads(pickle.dumps(rates))
    assert again.test == "t::a" and again.budget.claims == rates.budget.claims
    # The copy goes on spending the same test's share: its next check gets the second check's rate.
    assert again("speedup against the baseline")["false_fail"] == pytest.approx(first / 4)
