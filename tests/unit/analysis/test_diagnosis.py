"""The diagnosis rules: Leviathan's break-evens with the run's c, decode against decode theory, one shortfall test.

Every expected value is worked out in the comments from the formulas, not
read back from the code.
"""

import math

import pytest

from pytest_specdec.analysis.diagnosis import Cause, describe, diagnose
from pytest_specdec.analysis.theory import falls_short
from pytest_specdec.report.tables import below_theory

NAN = math.nan


def names(figures):
    return [cause.name for cause in diagnose(figures)]


def figure_of(figures, name):
    return {cause.name: cause.figure for cause in diagnose(figures)}[name]


# --- the counter-examples of issue 19 -------------------------------------------------------------


def test_a_draft_expected_to_lose_is_named():
    # Qwen3-8B with a 0.6B draft (c = 0.375, the study's Sec. 3.2), k = 3, L = 1.9:
    # break-even 1 + 3 * 0.375 = 2.125 > 1.9, expected 1.9 / 2.125 = 0.894x.  The old
    # rule (L under 1.5) named nothing here.
    figures = {"acceptance_length": 1.9, "k": 3, "cost_ratio": 0.375, "cost_ratio_source": "measured"}
    assert diagnose(figures) == [
        Cause(
            "low_acceptance",
            "acceptance length 1.90 tokens per drafted step, not above the break-even 1 + k·c = 2.125 "
            "(k=3, c 0.375 measured): expected 0.894x",
        )
    ]
    assert 1.9 / (1 + 3 * 0.375) == pytest.approx(0.894, abs=5e-4)


def test_a_free_draft_expected_to_win_is_not_low_acceptance():
    # n-gram at L = 1.4, c = 0: break-even 1.0, expected 1.4 / 1 = 1.4x: a win, whatever the old 1.5 said.
    assert (
        diagnose(
            {
                "acceptance_length": 1.4,
                "acceptance_rate": 0.1,
                "k": 4,
                "cost_ratio": 0.0,
                "cost_ratio_source": "method default",
            }
        )
        == []
    )


def test_a_position_that_costs_more_than_it_accepts_is_named_with_both_speedups():
    # Rates 0.7, 0.5, 0.3 at c = 0.375: E_2 = 2.2, E_3 = 2.5; k=3: 2.5 / 2.125 = 1.176x,
    # k=2: 2.2 / 1.75 = 1.257x.  Position 3's break-even c * E_2 / (1 + 2c) = 0.825 / 1.75 = 47%.
    figures = {"k": 3, "per_position_acceptance": [0.7, 0.5, 0.3], "cost_ratio": 0.375, "cost_ratio_source": "measured"}
    assert 2.5 / 2.125 == pytest.approx(1.176, abs=5e-4) and 2.2 / 1.75 == pytest.approx(1.257, abs=5e-4)
    assert diagnose(figures) == [
        Cause(
            "acceptance_collapse",
            "position 3 accepts 30%, under its break-even 47% (c·E_(j-1) / (1 + (j-1)·c), "
            "c 0.375 measured): k=2 raises the expected speedup from 1.176x to 1.257x",
        )
    ]


def test_decode_on_theory_with_most_time_in_prefill_is_not_verification_cost():
    # Decode exactly on theory (2.0x) while prefill takes 70% of the reference's time and SD does
    # not shorten it: throughput speedup 1 / (0.7 + 0.3 / 2) = 1.176x, 59% of 2.0x, which the old
    # rule (throughput under 60% of expected) blamed on verification.  Decode against decode: 100%.
    throughput = 1 / (0.7 + 0.3 / 2.0)
    assert throughput / 2.0 < 0.6
    figures = {
        "speedup": throughput,
        "decode_speedup": 2.0,
        "expected_speedup": 2.0,
        "cost_ratio": 0.0,
        "cost_ratio_source": "method default",
        "shortfall_margin": 0.05,
    }
    assert diagnose(figures) == []


def test_decode_short_of_theory_at_an_estimated_c_is_verification_cost():
    # TPOT speedup 1.1x against 2.5x expected at c = 0 (the n-gram default): 44%, short by far more than 15%.
    figures = {
        "decode_speedup": 1.1,
        "expected_speedup": 2.5,
        "cost_ratio": 0.0,
        "cost_ratio_source": "method default",
        "shortfall_margin": 0.15,
    }
    assert diagnose(figures) == [
        Cause(
            "verification_cost",
            "decode speedup 1.10x (median TPOT) is 44% of the 2.50x expected at this acceptance "
            "with c 0 method default, short by more than the 15% noise margin: drafting or "
            "verifying costs more than that c",
        )
    ]


def test_with_c_measured_the_cost_is_in_c_not_in_a_verification_shortfall():
    # The expected speedup reproduces the decode measurement when c comes from the same step times.
    figures = {
        "decode_speedup": 1.1,
        "expected_speedup": 2.5,
        "cost_ratio": 0.2,
        "cost_ratio_source": "measured",
        "shortfall_margin": 0.15,
    }
    assert "verification_cost" not in names(figures)


def test_tables_and_diagnosis_share_one_shortfall_test():
    # 1.70 against 2.0 with a 15% margin: the line is 2.0 * 0.85 = 1.70, and 1.70 is not under it.
    for decode, short in ((1.70, False), (1.69, True)):
        assert falls_short(decode, 2.0, 0.15) is short
        row = {"speedup_median_tpot": decode, "expected_speedup": 2.0, "theory": {"shortfall_margin": 0.15}}
        assert below_theory(row) is short
        figures = {
            "decode_speedup": decode,
            "expected_speedup": 2.0,
            "cost_ratio": 0.0,
            "cost_ratio_source": "method default",
            "shortfall_margin": 0.15,
        }
        assert ("verification_cost" in names(figures)) is short
    assert falls_short(None, 2.0, 0.15) is None and below_theory({"expected_speedup": 2.0}) is None


# --- each rule with figures that trigger it, and the exact words it must give ---------------------

FIRES = {
    "below break-even with undrafted steps and a rate": (
        # u cancels from the break-even (1 + 4 * 0.1 = 1.4 > 1.3); expected (1.3 + 1) / (1.4 + 1) = 0.958x.
        {
            "acceptance_length": 1.3,
            "acceptance_rate": 0.075,
            "k": 4,
            "cost_ratio": 0.1,
            "cost_ratio_source": "estimated (parameter ratio)",
            "undrafted_per_drafted": 1.0,
        },
        "low_acceptance",
        "acceptance length 1.30 tokens per drafted step (8% of drafts accepted), not above the break-even "
        "1 + k·c = 1.400 (k=4, c 0.1 estimated (parameter ratio)): expected 0.958x",
    ),
    "nothing accepted at c = 0 is break-even, not a win": (
        {"acceptance_length": 1.0, "k": 2, "cost_ratio": 0.0, "cost_ratio_source": "method default"},
        "low_acceptance",
        "acceptance length 1.00 tokens per drafted step, not above the break-even 1 + k·c = 1.000 "
        "(k=2, c 0 method default): expected 1.000x",
    ),
    "positions 3..5 with the step model's best k": (
        # Rates .6 .3 .08 .04 .01 at c = 0.1: E = 1.6, 1.9, 1.98, 2.02, 2.03; speedups by j:
        # 1.6/1.1 = 1.455, 1.9/1.2 = 1.583, 1.98/1.3 = 1.523, 2.02/1.4 = 1.443, 2.03/1.5 = 1.353.
        # Break-evens: 3: 0.1 * 1.9 / 1.2 = 16%, 4: 0.1 * 1.98 / 1.3 = 15%, 5: 0.1 * 2.02 / 1.4 = 14%.
        {
            "k": 5,
            "per_position_acceptance": [0.6, 0.3, 0.08, 0.04, 0.01],
            "cost_ratio": 0.1,
            "cost_ratio_source": "measured",
            "best_k": 2,
            "predicted_best_speedup": 1.734,
        },
        "acceptance_collapse",
        "positions 3..5 accept 8%, 4%, 1%, under their break-evens 16%, 15%, 14% (c·E_(j-1) / (1 + (j-1)·c), "
        "c 0.1 measured): k=2 raises the expected speedup from 1.353x to 1.583x; the step times predict best k=2 "
        "(1.73x)",
    ),
    "client bound in the caller's words": (
        {"client_bound": "client dispatch lag p99 120 ms, 40% of the median TPOT"},
        "client_bound",
        "client dispatch lag p99 120 ms, 40% of the median TPOT",
    ),
    "warm-up beyond the far-out fence": (
        # Others 19, 20, 21, 22: Q1 19.75, median 20.5, Q3 21.25 (inclusive quartiles), IQR 1.5,
        # fence 21.25 + 3 * 1.5 = 25.75; 46 / 20.5 = 2.2x.
        {"first_request_tpot_ms": 46.0, "tpot_ms_others": [20.0, 19.0, 22.0, 21.0]},
        "warm_up",
        "first request 46.0 ms per output token, 2.2x the others' median 20.5 ms, beyond their far-out fence "
        "25.8 ms (Q3 + 3 IQR)",
    ),
    "high concurrency, unordered sweep": (
        # 0.98 < 1.45 * (1 - 0.15) = 1.2325: short of the lowest level's speedup.
        {"sweep": [(8, 1.3), (32, 0.98), (1, 1.45)], "sweep_margin": 0.15},
        "high_concurrency",
        "speedup 1.45x at concurrency 1 falls to 0.98x at concurrency 32",
    ),
    "high concurrency, beyond a tight margin from repeats": (
        # 1.8 < 2.0 * (1 - 0.05) = 1.9.
        {"sweep": [(1, 2.0), (16, 1.8)], "sweep_margin": 0.05},
        "high_concurrency",
        "speedup 2.00x at concurrency 1 falls to 1.80x at concurrency 16",
    ),
}


@pytest.mark.parametrize("figures, name, figure", FIRES.values(), ids=FIRES.keys())
def test_rule_fires_with_its_numbers(figures, name, figure):
    assert diagnose(figures) == [Cause(name, figure)]


# Figures each rule must stay quiet on: on the paying side of its break-even, or missing / NaN inputs.
QUIET = {
    "just above break-even": {"acceptance_length": 2.13, "k": 3, "cost_ratio": 0.375},
    "acceptance length without c": {"acceptance_length": 1.1, "k": 3},
    "acceptance length without k": {"acceptance_length": 1.1, "cost_ratio": 0.0},
    "acceptance length NaN": {"acceptance_length": NAN, "k": 3, "cost_ratio": 0.0},
    "acceptance length a string": {"acceptance_length": "1.1", "k": 3, "cost_ratio": 0.0},
    "negative c": {"acceptance_length": 1.1, "k": 3, "cost_ratio": -0.1},
    "every position pays": {"k": 3, "per_position_acceptance": [0.7, 0.5, 0.5], "cost_ratio": 0.375},
    "zero rates cost nothing at c = 0": {"k": 3, "per_position_acceptance": [0.5, 0.0, 0.0], "cost_ratio": 0.0},
    "low rate past k": {"k": 2, "per_position_acceptance": [0.5, 0.3, 0.01], "cost_ratio": 0.1},
    "rates without k": {"per_position_acceptance": [0.5, 0.05], "cost_ratio": 0.1},
    "rates with k NaN": {"k": NAN, "per_position_acceptance": [0.5, 0.05], "cost_ratio": 0.1},
    "rate NaN": {"k": 2, "per_position_acceptance": [0.5, NAN], "cost_ratio": 0.1},
    "fewer rates than k": {"k": 3, "per_position_acceptance": [0.5, 0.01], "cost_ratio": 0.1},
    "no rates": {"k": 2, "per_position_acceptance": None, "cost_ratio": 0.1},
    "decode within the margin": {
        "decode_speedup": 1.8,
        "expected_speedup": 2.0,
        "cost_ratio": 0.0,
        "shortfall_margin": 0.15,
    },
    "expected NaN": {"decode_speedup": 1.1, "expected_speedup": NAN, "cost_ratio": 0.0},
    "decode speedup None": {"decode_speedup": None, "expected_speedup": 2.5, "cost_ratio": 0.0},
    "expected 0": {"decode_speedup": 1.1, "expected_speedup": 0.0, "cost_ratio": 0.0},
    "only the throughput is short": {"speedup": 1.1, "expected_speedup": 2.5, "cost_ratio": 0.0},
    "client bound None": {"client_bound": None},
    "client bound blank": {"client_bound": "  "},
    "client bound a number": {"client_bound": 1.0},
    "first request inside the fence": {"first_request_tpot_ms": 25.0, "tpot_ms_others": [20.0, 19.0, 22.0, 21.0]},
    "two others only": {"first_request_tpot_ms": 46.0, "tpot_ms_others": [20.0, 21.0]},
    "first None": {"first_request_tpot_ms": None, "tpot_ms_others": [20.0, 19.0, 22.0, 21.0]},
    "10% below within the default 15% margin": {"sweep": [(1, 2.0), (16, 1.8)]},
    "better at high concurrency": {"sweep": [(1, 1.0), (32, 1.5)]},
    "one point": {"sweep": [(1, 1.45)]},
    "one concurrency": {"sweep": [(4, 1.45), (4, 0.9)]},
    "speedup NaN at the high end": {"sweep": [(1, 1.45), (32, NAN)]},
    "no sweep": {"sweep": None},
    "nothing": {},
}


@pytest.mark.parametrize("figures", QUIET.values(), ids=QUIET.keys())
def test_rule_quiet(figures):
    assert diagnose(figures) == []


def test_several_causes_in_rule_order():
    figures = {
        "decode_speedup": 0.9,
        "expected_speedup": 1.8,
        "acceptance_length": 1.2,
        "acceptance_rate": 0.05,
        "k": 4,
        "cost_ratio": 0.05,
        "cost_ratio_source": "estimated (parameter ratio)",
        "per_position_acceptance": [0.15, 0.04, 0.01, 0.0],
        "sweep": [(1, 1.0), (8, 0.8)],
    }
    assert names(figures) == ["low_acceptance", "acceptance_collapse", "verification_cost", "high_concurrency"]


def test_all_nan_figures_name_nothing():
    keys = (
        "speedup",
        "decode_speedup",
        "expected_speedup",
        "acceptance_rate",
        "acceptance_length",
        "k",
        "best_k",
        "cost_ratio",
        "predicted_best_speedup",
        "first_request_tpot_ms",
        "shortfall_margin",
        "sweep_margin",
    )
    figures = dict.fromkeys(keys, NAN) | {
        "client_bound": None,
        "sweep": None,
        "per_position_acceptance": [NAN, NAN],
        "tpot_ms_others": [NAN, NAN, NAN],
    }
    assert diagnose(figures) == []


def test_describe():
    causes = [Cause("low_acceptance", "acceptance length 1.12 tokens per step"), Cause("warm_up", "first 2.3x")]
    assert describe(causes) == "- low_acceptance: acceptance length 1.12 tokens per step\n- warm_up: first 2.3x"
    assert describe([]) == "no cause found among the measured figures"


def test_figures_from_the_chunk_estimate_say_so():
    # Rates .5 .05 0 0 at c = 0.1: speedups by j: 1.5/1.1 = 1.364, 1.55/1.2 = 1.292, 1.55/1.3, 1.55/1.4 = 1.107.
    base = {
        "k": 4,
        "per_position_acceptance": [0.5, 0.05, 0.0, 0.0],
        "cost_ratio": 0.1,
        "cost_ratio_source": "measured",
        "best_k": 1,
        "predicted_best_speedup": 1.4,
    }
    exact = figure_of(base, "acceptance_collapse")
    assert "estimated" not in exact and "from 1.107x to 1.364x" in exact
    # Rates from the counters are exact; the predicted k rests on the estimate.
    partly = figure_of({**base, "estimated": True}, "acceptance_collapse")
    assert partly.startswith("positions 2..4 accept 5%, 0%, 0%, under their break-evens")
    assert partly.endswith("; the step times predict best k=1 (1.40x) (estimated from streamed chunks)")
    wholly = figure_of({**base, "estimated": True, "rates_estimated": True}, "acceptance_collapse")
    assert wholly.startswith("positions 2..4 accept 5%, 0%, 0% (estimated from streamed chunks), under their")
