import math

import numpy as np
import pytest

from pytest_specdec.verdict.stats import compare_samples, ratio_of_medians_ci
from pytest_specdec.verdict.tolerances import DEFAULT_TOLERANCES, default_tolerance, resolve_tolerance

BASE = [100.0, 101.0, 99.0]


# --- direction ---------------------------------------------------------------


def test_throughput_drop_is_a_negative_change():
    verdict = compare_samples("output_throughput", BASE, [75.0, 76.0, 74.0])
    assert verdict.higher_is_better
    assert verdict.change == pytest.approx(75 / 100 - 1)
    assert verdict.ci_high < 0 and verdict.regression


def test_tpot_rise_is_a_negative_change():
    verdict = compare_samples("median_tpot_ms", [32.0, 31.5, 32.4], [36.1, 36.5, 35.8])
    assert not verdict.higher_is_better
    assert verdict.change == pytest.approx(32.0 / 36.1 - 1)
    assert verdict.regression


@pytest.mark.parametrize(
    "metric, current", [("output_throughput", [130.0, 131.0, 129.0]), ("median_tpot_ms", [70.0, 71.0, 69.0])]
)
def test_improvements_are_positive_and_never_regress(metric, current):
    verdict = compare_samples(metric, BASE, current)
    assert verdict.change > 0 and not verdict.regression


def test_explicit_direction_overrides_the_name():
    verdict = compare_samples("my_cost", BASE, [130.0, 131.0, 129.0], higher_is_better=False)
    assert verdict.change == pytest.approx(100 / 130 - 1) and verdict.regression


# --- medians, noise and the tolerance band -----------------------------------


def test_one_bad_repeat_does_not_flip_the_verdict():
    # The mean of the current repeats is 13% down; the median has not moved.
    verdict = compare_samples("output_throughput", [100.0, 100.0, 100.0], [100.0, 101.0, 60.0])
    assert verdict.current == 100.0 and verdict.change == 0.0 and not verdict.regression


def test_one_bad_repeat_in_a_real_regression_does_not_change_its_size():
    verdict = compare_samples("output_throughput", BASE, [75.0, 76.0, 40.0])
    assert verdict.change == pytest.approx(-0.25) and verdict.regression


def test_drop_inside_tolerance_is_not_a_regression_even_if_certain():
    verdict = compare_samples("output_throughput", BASE, [95.0, 95.5, 94.5])
    assert verdict.ci_high < 0 and not verdict.regression


def test_drop_beyond_tolerance_but_overlapping_noise_is_not_a_regression():
    # Median down 20%, but one current repeat is as good as the baseline.
    verdict = compare_samples("output_throughput", BASE, [80.0, 79.0, 102.0])
    assert verdict.change < -verdict.tolerance
    assert verdict.ci_high >= 0 and not verdict.regression


def test_single_samples_use_the_tolerance_band_only():
    bad = compare_samples("output_throughput", [100.0], [85.0, 86.0, 84.0])
    assert bad.regression and bad.ci_low is None and bad.ci_high is None
    assert "tolerance band only" in bad.method
    assert not compare_samples("output_throughput", [100.0], [95.0]).regression


def test_missing_samples_are_dropped_and_an_empty_side_is_never_a_pass():
    verdict = compare_samples("output_throughput", [100.0, None, math.nan, 101.0, 99.0], [75.0, 76.0, 74.0])
    assert verdict.baseline == 100.0 and verdict.regression
    empty = compare_samples("output_throughput", [math.nan, None], [75.0])
    assert empty.regression and math.isnan(empty.change) and "no valid baseline samples" in empty.method
    assert "not compared" in empty.describe() and empty.describe().endswith("REGRESSION")
    unmeasured = compare_samples("speedup_median_tpot", [1.47, 1.50, 1.53], [math.nan, math.nan, math.nan])
    assert unmeasured.regression and "no valid current samples" in unmeasured.method


def test_bootstrap_is_deterministic_for_a_seed():
    args = ("output_throughput", [100.0, 97.0, 104.0, 99.0], [90.0, 93.0, 88.0, 95.0])
    assert compare_samples(*args, seed=3) == compare_samples(*args, seed=3)
    verdict = compare_samples(*args)
    assert verdict.method == "bootstrap 95% CI of the ratio of medians (2000 resamples)"
    assert verdict.ci_low <= verdict.change <= verdict.ci_high


def test_ratio_of_medians_ci_brackets_the_ratio():
    low, high = ratio_of_medians_ci([130.0, 128.0, 133.0], [100.0, 101.0, 99.0])
    assert low <= 130 / 100 <= high and low > 1
    assert ratio_of_medians_ci([1.0], [1.0, 2.0]) is None


# --- simulation: 3 vs 3 repeats with 3% relative noise ------------------------


def _detection_rate(metric, drop, tolerance=None, pairs=500, repeats=3, noise=0.03, seed=2024):
    rng = np.random.default_rng(seed)
    # A drop of d means change = -d in the module's convention for either direction.
    true = 100 * (1 - drop) if not metric.endswith("_ms") else 100 / (1 - drop)
    base = 100 * (1 + noise * rng.standard_normal((pairs, repeats)))
    cur = true * (1 + noise * rng.standard_normal((pairs, repeats)))
    hits = sum(compare_samples(metric, b, c, tolerance=tolerance, resamples=500).regression for b, c in zip(base, cur))
    return hits / pairs


# Measured (500 pairs, seed 2024): unchanged 0.0% false alarms; 25% drop
# 100% detected; 10% drop at tolerance 0.10: 50.8% (throughput) and 46.8%
# (TPOT) -- a coin flip, as it should be for a drop sitting on the tolerance.
@pytest.mark.parametrize("metric", ["output_throughput", "median_tpot_ms"])
def test_simulated_noise_rarely_false_alarms(metric):
    assert _detection_rate(metric, 0.0) < 0.02


@pytest.mark.parametrize("metric", ["output_throughput", "median_tpot_ms"])
def test_simulated_25_percent_drop_is_detected(metric):
    assert _detection_rate(metric, 0.25) > 0.95


@pytest.mark.parametrize("metric", ["output_throughput", "median_tpot_ms"])
def test_simulated_drop_at_the_tolerance_is_a_coin_flip(metric):
    assert 0.2 < _detection_rate(metric, 0.10, tolerance=0.10) < 0.8


# --- tolerances ------------------------------------------------------------------


@pytest.mark.parametrize(
    "metric, expected",
    [
        ("output_throughput", 0.10),
        ("median_tpot_ms", 0.10),
        ("mean_itl_ms", 0.10),
        ("median_ttft_ms", 0.15),
        ("mean_e2el_ms", 0.15),
        ("p95_tpot_ms", 0.25),
        ("p99_ttft_ms", 0.25),
        ("speedup_output_throughput", 0.15),
        ("speedup_p99_ttft_ms", 0.15),
        ("acceptance_rate", 0.05),
        ("acceptance_length", 0.05),
        ("match_rate", 0.10),
    ],
)
def test_default_tolerances(metric, expected):
    assert default_tolerance(metric) == expected


def test_defaults_are_valid_fractions():
    assert all(0 < value < 1 for value in DEFAULT_TOLERANCES.values())


def test_tolerance_precedence_call_marker_ini_default():
    marker, ini = {"median_tpot_ms": 0.2}, {"median_tpot_ms": 0.3, "output_throughput": 0.4}
    assert resolve_tolerance("median_tpot_ms", call=0.05, marker=marker, ini=ini) == 0.05
    assert resolve_tolerance("median_tpot_ms", call={"other": 0.05}, marker=marker, ini=ini) == 0.2
    assert resolve_tolerance("median_tpot_ms", ini=ini) == 0.3
    assert resolve_tolerance("output_throughput", marker=marker, ini=ini) == 0.4
    assert resolve_tolerance("output_throughput", marker=0.12, ini=ini) == 0.12
    assert resolve_tolerance("p99_ttft_ms") == 0.25
    assert resolve_tolerance("p99_ttft_ms", call=0) == 0.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"call": 10}, r"'median_tpot_ms' from the assert_no_regression.*0\.10 for 10%.*got 10"),
        ({"marker": {"p99_ttft_ms": 1.0}}, r"'p99_ttft_ms' from the test's marker"),
        ({"ini": {"median_tpot_ms": -0.1}}, r"'median_tpot_ms' from the project's ini"),
        ({"call": True}, r"got True"),
        ({"marker": "0.1"}, r"got '0.1'"),
        ({"call": math.nan}, r"got nan"),
    ],
)
def test_invalid_tolerances_name_metric_and_source(kwargs, match):
    with pytest.raises(ValueError, match=match):
        resolve_tolerance("median_tpot_ms", **kwargs)


def test_compare_samples_validates_its_arguments():
    with pytest.raises(ValueError, match="output_throughput"):
        compare_samples("output_throughput", BASE, BASE, tolerance=1.5)
    with pytest.raises(ValueError, match="confidence"):
        compare_samples("output_throughput", BASE, BASE, confidence=95)


# --- describe() -----------------------------------------------------------------


def test_describe_a_regression_with_interval():
    line = compare_samples("median_tpot_ms", [32.0, 31.5, 32.4], [36.1, 36.5, 35.8]).describe()
    assert line.startswith("median_tpot_ms: 32.0 -> 36.1 (-11.4%, tolerance 10%, 95% CI [")
    assert line.endswith("]) REGRESSION")


def test_describe_without_interval():
    line = compare_samples("acceptance_rate", [0.7], [0.69]).describe()
    assert line == "acceptance_rate: 0.7 -> 0.69 (-1.4%, tolerance 5%, no CI: fewer than 2 repeats on a side) ok"


def test_describe_names_a_sequential_decision_where_one_decided():
    from dataclasses import replace

    plain = compare_samples("speedup_output_throughput", [1.5, 1.6], [1.2, 1.3])
    assert "sequential" not in plain.describe()
    decided = replace(plain, method="sequential, paired by draw", decided_by="failed (0.8, interval 0.7-0.9, ...)")
    assert decided.describe().endswith("; sequential, paired by draw: failed (0.8, interval 0.7-0.9, ...)) REGRESSION")


# --- paired repeats ---------------------------------------------------------------

# Three prompt sets whose speedups differ a lot (as code_edit's do on the CPU
# build: 1.21x, 1.92x, 1.45x), then the same sets 20% slower each.
PROMPT_SETS = [1.21, 1.92, 1.45]
DROPPED = [v * 0.8 for v in PROMPT_SETS]


def test_pairs_catch_a_drop_that_the_spread_between_prompt_sets_hides():
    unpaired = compare_samples("speedup_output_throughput", PROMPT_SETS, DROPPED)
    paired = compare_samples("speedup_output_throughput", PROMPT_SETS, DROPPED, paired=True)
    assert not unpaired.regression  # 1.54 (set 2, dropped) beats 1.21 (set 1): the interval spans 0
    assert paired.regression and paired.change == pytest.approx(-0.2)
    assert paired.ci_high < 0 and "paired bootstrap" in paired.method


def test_pairs_with_noise_inside_the_tolerance_pass():
    noisy = [v * f for v, f in zip(PROMPT_SETS, (0.97, 1.02, 0.95))]
    verdict = compare_samples("speedup_output_throughput", PROMPT_SETS, noisy, paired=True)
    assert not verdict.regression and verdict.change == pytest.approx(-0.03)


def test_one_pair_that_held_keeps_the_gate_green():
    mixed = [PROMPT_SETS[0] * 0.7, PROMPT_SETS[1] * 1.01, PROMPT_SETS[2] * 0.7]
    verdict = compare_samples("speedup_output_throughput", PROMPT_SETS, mixed, paired=True)
    assert verdict.change == pytest.approx(-0.3) and not verdict.regression  # not every pair got worse


def test_pairs_skip_missing_values_and_need_equal_counts():
    verdict = compare_samples("median_tpot_ms", [30.0, None, 32.0], [36.0, 31.0, 38.4], paired=True)
    # Latency: baseline / current - 1 per pair: 30/36 - 1 = -16.7%, 32/38.4 - 1 = -16.7%.
    assert verdict.change == pytest.approx(-1 / 6) and verdict.regression
    with pytest.raises(ValueError, match="as many current repeats as baseline repeats"):
        compare_samples("median_tpot_ms", [30.0, 31.0], [30.0], paired=True)
