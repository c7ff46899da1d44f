"""The two-sample distribution test (verdict.distribution): its numerics, its false-alarm rate and its power,
each checked against values computed another way or against simulated samples of known distributions."""

import math
import re

import numpy as np
import pytest

from pytest_specdec.verdict.distribution import (
    DRAFTED_HINT,
    FIRST_TOKEN_HINT,
    MIN_EXPECTED,
    OTHER,
    check_same_distribution,
    chi2_critical,
    chi2_sf,
    effect_size,
    fisher_exact,
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


def _binomial_sf(k: int, n: int, p: float) -> float:
    """P(X > k) for X ~ Binomial(n, p), summed in logs (n = 3000 overflows floats otherwise)."""

    def log_pmf(j: int) -> float:
        return (
            math.lgamma(n + 1)
            - math.lgamma(j + 1)
            - math.lgamma(n - j + 1)
            + j * math.log(p)
            + (n - j) * math.log1p(-p)
        )

    return sum(math.exp(log_pmf(j)) for j in range(k + 1, n + 1))


# Trials of the false-alarm test, and the alarms allowed: ALLOWED is the one-sided 99.9% binomial upper
# quantile at alpha 0.05 (the smallest k with P(Binomial(3000, 0.05) > k) <= 0.001: 188, a rate of 6.3%).
# A check whose real rate were 1.5 alpha (0.075: 225 alarms expected) would exceed it with probability
# 0.995, so this catches an error rate 1.5x too high; 1,000 trials would allow 73 and catch it half the time.
FALSE_ALARM_TRIALS, ALLOWED = 3000, 188


def test_the_false_alarm_bound_is_the_binomial_quantile_and_catches_one_and_a_half_alpha():
    assert (
        _binomial_sf(ALLOWED, FALSE_ALARM_TRIALS, 0.05) <= 0.001 < _binomial_sf(ALLOWED - 1, FALSE_ALARM_TRIALS, 0.05)
    )
    assert _binomial_sf(ALLOWED, FALSE_ALARM_TRIALS, 0.075) > 0.99


@pytest.mark.parametrize(
    "p",
    [
        pytest.param([0.45, 0.25, 0.12, 0.08, 0.05, 0.03, 0.02], id="chi-square"),
        # Rare tokens below the expected-count rule: most of these tables are tested exactly (Fisher).
        pytest.param([0.93, 0.04, 0.03], id="mostly-fisher"),
    ],
)
def test_the_false_alarm_rate_stays_below_alpha_when_both_sides_sample_one_distribution(p):
    # Small tables (2 prompts x 2 positions, 60 samples a side) keep 3,000 trials under a second.
    rng = np.random.default_rng(11)
    alarms = exact = 0
    for _ in range(FALSE_ALARM_TRIALS):
        reference = [_samples(rng, p, 60, positions=2) for _ in range(2)]
        speculative = [_samples(rng, p, 60, positions=2) for _ in range(2)]
        test = same_distribution(reference, speculative, alpha=0.05)
        alarms += not test.passed
        exact += sum(table.exact for table in test.tables)
    assert alarms <= ALLOWED, alarms
    assert (exact > FALSE_ALARM_TRIALS) == (p[0] > 0.9), exact  # each path was the one exercised


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


def test_fisher_exact_matches_the_textbook_and_the_hypergeometric_sum():
    # Fisher's tea-tasting table: two-sided p = 17/35.
    assert fisher_exact((3, 1), (1, 3)) == pytest.approx(17 / 35, rel=1e-12)
    # 60 x A and 7 x B against 67 x A: only x = 0 and x = 7 B's in the reference are as unlikely as observed.
    assert fisher_exact((60, 7), (67, 0)) == pytest.approx(2 * math.comb(67, 7) / math.comb(134, 7), rel=1e-12)
    assert fisher_exact((5, 5), (5, 5)) == pytest.approx(1.0)


def test_a_table_merged_to_one_column_is_tested_exactly_not_called_untestable():
    # B's expected count is 3.5 < 5: merging leaves one column, yet the sides differ (p = 0.0133).
    reference = [[("A", "t")] * 60 + [("B", "t")] * 7]
    speculative = [[("A", "t")] * 67]
    exact_p = 2 * math.comb(67, 7) / math.comb(134, 7)
    for alpha, passed in ((0.01, True), (0.05, False)):
        test = same_distribution(reference, speculative, alpha=alpha)
        assert test.problem is None and test.untestable == 1  # token 2: "t" on both sides, the only such case
        (table,) = test.tables
        assert table.exact and table.position == 1 and table.categories == ("A", OTHER)
        assert table.reference == (60, 7) and table.speculative == (67, 0)
        assert table.p_value == pytest.approx(exact_p, rel=1e-12) and test.passed is passed
        assert "1 too sparse for chi-square, tested exactly" in test.describe()
    with pytest.raises(AssertionError, match="Fisher's exact test, p 0.013") as failed:
        check_same_distribution(test)
    assert "nothing to compare" not in str(failed.value)
    # More tokens in the rare tail: the most frequent one against all the rest, as exact.
    rest = same_distribution([[("A",)] * 60 + [("B",)] * 4 + [("C",)] * 3], [[("A",)] * 67], alpha=0.05)
    assert rest.tables[0].reference == (60, 7) and rest.tables[0].p_value == pytest.approx(exact_p, rel=1e-12)


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


def _at_position(position, reference_x, sd_x, n=100):
    # Token 5 everywhere except at `position`, where tokens 7 and 8 split differently on the two sides.
    def sample(token):
        return tuple(token if j == position else 5 for j in range(1, 4))

    def side(sevens):
        return [[sample(7)] * sevens + [sample(8)] * (n - sevens)]

    return side(reference_x), side(sd_x)


@pytest.mark.parametrize("position", [1, 2])
def test_a_failure_names_the_server_and_temperature_decodes_tokens_and_says_where_the_position_points(position):
    words = {5: " sub", 7: "(a", 8: " sowing"}
    reference, speculative = _at_position(position, 80, 30)
    test = same_distribution(
        reference, speculative, temperature=0.8, label="ngram-k4", decode=lambda ids: "".join(words[i] for i in ids)
    )
    assert [t.position for t in test.rejected] == [position] and test.rejected[0].texts == ("(a", " sowing")
    with pytest.raises(AssertionError) as failed:
        check_same_distribution(test)
    text = str(failed.value)
    assert text.startswith("SD's sampled outputs (ngram-k4) at temperature 0.8 against the reference's")
    assert re.search(r"7 '\(a'\s+80\s+30", text) and re.search(r"8 ' sowing'\s+20\s+70", text)
    assert (FIRST_TOKEN_HINT in text) is (position == 1) and (DRAFTED_HINT in text) is (position == 2)
    if position == 2:
        assert "vllm-project/vllm#55005" in text


def test_a_failure_without_a_tokenizer_shows_the_ids_alone():
    reference, speculative = _at_position(3, 80, 30)
    test = same_distribution(reference, speculative)
    with pytest.raises(AssertionError) as failed:
        check_same_distribution(test)
    text = str(failed.value)
    assert re.search(r"\n    7\s+80\s+30", text) and "temperature" not in text.splitlines()[0]
    assert DRAFTED_HINT in text and FIRST_TOKEN_HINT not in text
