"""The two-sample distribution test (verdict.distribution): its numerics, its false-alarm rate and its power,
each checked against values computed another way or against simulated samples of known distributions."""

import math
import re

import numpy as np
import pytest

from pytest_specdec.verdict.distribution import (
    MIN_EXPECTED,
    OTHER,
    check_same_distribution,
    chi2_critical,
    chi2_sf,
    effect_size,
    noncentral_chi2_sf,
    power_of,
    same_distribution,
    samples_needed,
    two_sample_table,
)


@pytest.mark.parametrize(
    "x, df, expected",
    # Critical values of the chi-square table (any statistics textbook): P(X > x) = expected.
    [(3.841, 1, 0.05), (6.635, 1, 0.01), (11.070, 5, 0.05), (15.086, 5, 0.01), (18.475, 7, 0.01), (0.0, 3, 1.0)],
)
def test_chi_square_survival_matches_the_table(x, df, expected):
    assert chi2_sf(x, df) == pytest.approx(expected, abs=2e-4)


def test_chi_square_survival_of_two_degrees_is_the_exponential():
    # With 2 degrees of freedom the chi-square is exponential with mean 2: P(X > x) = exp(-x/2).
    for x in (0.1, 1.0, 5.0, 30.0, 120.0):
        assert chi2_sf(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-9)


def test_critical_value_inverts_the_survival():
    for df in (1, 3, 7):
        for alpha in (0.05, 0.01, 0.01 / 16):
            assert chi2_sf(chi2_critical(alpha, df), df) == pytest.approx(alpha, rel=1e-6)


def test_noncentral_power_matches_the_classic_sample_size_table():
    # Cohen's tables: at alpha 0.05 and one degree of freedom, noncentrality 10.51 gives power 0.90,
    # and 7.85 gives 0.80.
    critical = chi2_critical(0.05, 1)
    assert noncentral_chi2_sf(critical, 1, 10.51) == pytest.approx(0.90, abs=0.002)
    assert noncentral_chi2_sf(critical, 1, 7.85) == pytest.approx(0.80, abs=0.002)


def test_samples_needed_is_the_smallest_that_reaches_the_power():
    for w in (0.2, 0.3, 0.5):
        n = samples_needed(w, 7, 0.01 / 16, 0.9)
        assert power_of(n, w, 7, 0.01 / 16) >= 0.9 > power_of(n - 1, w, 7, 0.01 / 16)
    assert samples_needed(0.2, 7, 0.01 / 16, 0.9) > samples_needed(0.3, 7, 0.01 / 16, 0.9)
    with pytest.raises(ValueError, match="power"):
        samples_needed(0.3, 7, 0.01, 1.5)


def test_effect_size_is_the_noncentrality_per_sample():
    p, q = [0.5, 0.3, 0.2], [0.4, 0.3, 0.3]
    n = 1000  # expected statistic of a 2 x K table with n per side ~ df + 2 n w^2
    w = effect_size(p, q)
    rng = np.random.default_rng(7)
    stats = []
    for _ in range(400):
        a = rng.multinomial(n, p)
        b = rng.multinomial(n, q)
        expected = (a + b) / 2
        stats.append(float(((a - expected) ** 2 / expected + (b - expected) ** 2 / expected).sum()))
    assert np.mean(stats) == pytest.approx(2 + 2 * n * w * w, rel=0.08)


def test_rare_tokens_are_pooled_until_every_expected_count_holds():
    reference = ["a"] * 60 + ["b"] * 30 + ["c"] * 6 + ["d"] * 2 + ["e"] * 2
    speculative = ["a"] * 58 + ["b"] * 33 + ["c"] * 5 + ["d"] * 1 + ["f"] * 3
    categories, ref, sd = two_sample_table(reference, speculative)
    assert categories[:2] == ("a", "b") and categories[-1] == OTHER
    assert sum(ref) == len(reference) and sum(sd) == len(speculative)
    for a, b in zip(ref, sd):
        assert (a + b) * len(reference) / (len(reference) + len(speculative)) >= MIN_EXPECTED


def _samples(rng, probabilities, n, positions=4):
    drawn = rng.choice(len(probabilities), size=(n, positions), p=probabilities)
    return [tuple(row) for row in drawn.tolist()]


def test_the_false_alarm_rate_stays_below_alpha_when_both_sides_sample_one_distribution():
    rng = np.random.default_rng(11)
    p = [0.45, 0.25, 0.12, 0.08, 0.05, 0.03, 0.02]
    trials, alarms = 300, 0
    for _ in range(trials):
        reference = [_samples(rng, p, 120) for _ in range(4)]
        speculative = [_samples(rng, p, 120) for _ in range(4)]
        alarms += not same_distribution(reference, speculative, alpha=0.05).passed
    # Bonferroni bounds it by alpha; 300 trials at alpha 0.05 give at most ~26 alarms (binomial 99.9%).
    assert alarms <= 26, alarms


def test_the_stated_power_holds_for_an_effect_of_the_stated_size():
    rng = np.random.default_rng(12)
    p = np.array([0.4, 0.3, 0.2, 0.1])
    q = np.array([0.31, 0.26, 0.25, 0.18])  # w ~ 0.16 at every position
    w = effect_size(p, q)
    n = samples_needed(w, 3, 0.01 / 8, 0.9)  # 2 prompts x 4 positions
    trials, detected = 200, 0
    for _ in range(trials):
        reference = [_samples(rng, p, n) for _ in range(2)]
        speculative = [_samples(rng, q, n) for _ in range(2)]
        detected += not same_distribution(reference, speculative, alpha=0.01, max_categories=4).passed
    # Power per table is >= 0.9, over 8 tables more: far above 0.9 (one table alone would be 0.9 +- 0.05).
    assert detected / trials >= 0.9, (detected, n, w)


def test_one_token_on_both_sides_everywhere_compares_nothing_and_fails():
    reference = [[(5, 6)] * 50]
    speculative = [[(5, 6)] * 50]
    test = same_distribution(reference, speculative)
    assert not test.passed and test.untestable == 2 and "nothing to compare" in test.problem
    with pytest.raises(AssertionError, match="nothing to compare"):
        check_same_distribution(test)


def test_a_failure_shows_the_rejecting_tables_counts_side_by_side():
    reference = [[("x",)] * 80 + [("y",)] * 20]
    speculative = [[("x",)] * 30 + [("y",)] * 70]
    test = same_distribution(reference, speculative)
    assert test.rejected and test.tables[0].position is None  # one item per sample: whole continuations
    with pytest.raises(AssertionError) as failed:
        check_same_distribution(test)
    text = str(failed.value)
    assert "differ" in text and "prompt 1 continuation" in text
    assert re.search(r"x\s+80\s+30", text) and re.search(r"y\s+20\s+70", text)
