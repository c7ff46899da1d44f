import math

import pytest

from pytest_specdec.measure.diagnosis import Cause, describe, diagnose

NAN = math.nan


def names(figures):
    return [cause.name for cause in diagnose(figures)]


# Each rule with figures that trigger it, and the exact words it must give.
FIRES = {
    "low acceptance with its rate": (
        {"acceptance_length": 1.12, "acceptance_rate": 0.03}, "low_acceptance",
        "acceptance length 1.12 tokens per step, under 1.5 (3% of drafts accepted)"),
    "low acceptance without a rate": (
        {"acceptance_length": 1.3}, "low_acceptance", "acceptance length 1.30 tokens per step, under 1.5"),
    "collapse with a smaller best k": (
        {"k": 5, "per_position_acceptance": [0.6, 0.3, 0.08, 0.04, 0.01], "best_k": 2,
         "predicted_best_speedup": 1.734}, "acceptance_collapse",
        "positions 3..5 accept under 10% (8%, 4%, 1%): k=5 is too high; predicted best k=2 (1.73x)"),
    "collapse at the last position, best k is k": (
        {"k": 3, "per_position_acceptance": [0.5, 0.2, 0.05], "best_k": 3, "predicted_best_speedup": 1.4},
        "acceptance_collapse", "position 3 accepts under 10% (5%): k=3 is too high"),
    "verification cost": (
        {"speedup": 1.1, "expected_speedup": 2.5}, "verification_cost",
        "measured speedup 1.10x is 44% of the 2.50x expected at this acceptance"),
    "client bound in the caller's words": (
        {"client_bound": "client dispatch lag p99 120 ms, 40% of the median TPOT"}, "client_bound",
        "client dispatch lag p99 120 ms, 40% of the median TPOT"),
    "warm-up": (
        {"first_request_tpot_ms": 46.0, "median_tpot_ms_others": 20.0}, "warm_up",
        "first request 46.0 ms per output token, 2.3x the others' median 20.0 ms"),
    "high concurrency, unordered sweep": (
        {"sweep": [(8, 1.3), (32, 0.98), (1, 1.45)]}, "high_concurrency",
        "speedup 1.45x at concurrency 1 falls to 0.98x at concurrency 32"),
    "high concurrency, exactly 10% below": (
        {"sweep": [(1, 2.0), (16, 1.8)]}, "high_concurrency",
        "speedup 2.00x at concurrency 1 falls to 1.80x at concurrency 16"),
}


@pytest.mark.parametrize("figures, name, figure", FIRES.values(), ids=FIRES.keys())
def test_rule_fires_with_its_numbers(figures, name, figure):
    assert diagnose(figures) == [Cause(name, figure)]


# Figures each rule must stay quiet on: under its threshold, or missing / NaN inputs.
QUIET = {
    "acceptance length at 1.5": {"acceptance_length": 1.5, "acceptance_rate": 0.03},
    "acceptance length 2.4": {"acceptance_length": 2.4},
    "acceptance length NaN": {"acceptance_length": NAN, "acceptance_rate": 0.03},
    "acceptance length None": {"acceptance_length": None},
    "acceptance length a string": {"acceptance_length": "1.1"},
    "10% is not under 10%": {"k": 3, "per_position_acceptance": [0.5, 0.2, 0.1]},
    "low rate past k": {"k": 2, "per_position_acceptance": [0.5, 0.3, 0.05]},
    "rates without k": {"per_position_acceptance": [0.5, 0.05]},
    "rates with k NaN": {"k": NAN, "per_position_acceptance": [0.5, 0.05]},
    "rate NaN": {"k": 2, "per_position_acceptance": [0.5, NAN]},
    "no rates": {"k": 2, "per_position_acceptance": None},
    "64% of expected": {"speedup": 1.6, "expected_speedup": 2.5},
    "60% of expected": {"speedup": 1.5, "expected_speedup": 2.5},
    "expected NaN": {"speedup": 1.1, "expected_speedup": NAN},
    "speedup None": {"speedup": None, "expected_speedup": 2.5},
    "expected 0": {"speedup": 1.1, "expected_speedup": 0.0},
    "client bound None": {"client_bound": None},
    "client bound empty": {"client_bound": ""},
    "client bound blank": {"client_bound": "  "},
    "client bound a number": {"client_bound": 1.0},
    "first request 1.5x": {"first_request_tpot_ms": 30.0, "median_tpot_ms_others": 20.0},
    "first request 1.45x": {"first_request_tpot_ms": 29.0, "median_tpot_ms_others": 20.0},
    "others NaN": {"first_request_tpot_ms": 46.0, "median_tpot_ms_others": NAN},
    "first None": {"first_request_tpot_ms": None, "median_tpot_ms_others": 20.0},
    "others 0": {"first_request_tpot_ms": 46.0, "median_tpot_ms_others": 0.0},
    "7% below": {"sweep": [(1, 1.45), (32, 1.35)]},
    "better at high concurrency": {"sweep": [(1, 1.0), (32, 1.5)]},
    "one point": {"sweep": [(1, 1.45)]},
    "one concurrency": {"sweep": [(4, 1.45), (4, 0.9)]},
    "speedup NaN at the high end": {"sweep": [(1, 1.45), (32, NAN)]},
    "no sweep": {"sweep": None},
    "empty sweep": {"sweep": []},
    "nothing": {},
}


@pytest.mark.parametrize("figures", QUIET.values(), ids=QUIET.keys())
def test_rule_quiet(figures):
    assert diagnose(figures) == []


def test_several_causes_in_rule_order():
    figures = {"speedup": 0.9, "expected_speedup": 1.8, "acceptance_length": 1.2, "acceptance_rate": 0.05,
               "k": 4, "per_position_acceptance": [0.15, 0.04, 0.01, 0.0], "sweep": [(1, 1.0), (8, 0.8)]}
    assert names(figures) == ["low_acceptance", "acceptance_collapse", "verification_cost", "high_concurrency"]


def test_all_nan_figures_name_nothing():
    keys = ("speedup", "expected_speedup", "acceptance_rate", "acceptance_length", "k", "best_k",
            "predicted_best_speedup", "first_request_tpot_ms", "median_tpot_ms_others")
    figures = dict.fromkeys(keys, NAN) | {"client_bound": None, "sweep": None, "per_position_acceptance": [NAN, NAN]}
    assert diagnose(figures) == []


def test_describe():
    causes = [Cause("low_acceptance", "acceptance length 1.12 tokens per step"), Cause("warm_up", "first 2.3x")]
    assert describe(causes) == "- low_acceptance: acceptance length 1.12 tokens per step\n- warm_up: first 2.3x"
    assert describe([]) == "no cause found among the measured figures"


def test_figures_from_the_chunk_estimate_say_so():
    base = {"k": 4, "per_position_acceptance": [0.5, 0.05, 0.0, 0.0], "best_k": 1, "predicted_best_speedup": 1.4}
    exact = {c.name: c.figure for c in diagnose(base)}["acceptance_collapse"]
    assert "estimated" not in exact
    # Rates from the counters are exact; the predicted k rests on the estimate.
    partly = {c.name: c.figure for c in diagnose({**base, "estimated": True})}["acceptance_collapse"]
    assert partly == ("positions 2..4 accept under 10% (5%, 0%, 0%): k=4 is too high; predicted best k=1 (1.40x) "
                      "(estimated from streamed chunks)")
    wholly = {c.name: c.figure for c in diagnose({**base, "estimated": True, "rates_estimated": True})}
    assert wholly["acceptance_collapse"].startswith("positions 2..4 accept under 10% (5%, 0%, 0%) (estimated from "
                                                    "streamed chunks): k=4 is too high")
