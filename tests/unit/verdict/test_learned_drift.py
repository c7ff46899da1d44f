"""The drift a verdict allows for, learned from a machine's own sessions: an upper bound where they are few, never
below this session's own spread, and the built-in figure only as a labelled fallback."""

import math
import random

import pytest

from pytest_specdec.verdict.learned_drift import CONFIDENCE, MIN_SESSIONS, built_in_drift, learn_drift, upper_sd


def test_the_bound_is_the_chi_square_upper_confidence_bound_on_the_sd():
    values = [0.0, 0.02, -0.01, 0.015, -0.02]
    s, bound = upper_sd(values)
    # n = 5: 4 degrees of freedom; chi-square(4)'s lower 10% point is 1.0636.
    assert bound == pytest.approx(s * math.sqrt(4 / 1.0636), rel=1e-3)
    with pytest.raises(ValueError, match="at least two"):
        upper_sd([0.1])


def test_few_sessions_give_the_bound_never_a_smaller_drift_than_the_data_allow():
    rng = random.Random(0)
    true_sd = 0.02
    understated = 0
    trials = 2000
    for _ in range(trials):
        values = [math.exp(rng.gauss(0.0, true_sd)) for _ in range(5)]
        figure = learn_drift(values)
        assert figure.value >= figure.estimate  # the bound, never the bare estimate
        understated += math.log1p(figure.value) < true_sd
    # The bound falls below the machine's true drift in about 1 - CONFIDENCE of histories of five sessions.
    assert abs(understated / trials - (1 - CONFIDENCE)) < 0.02, understated / trials
    # More sessions: a tighter bound on the same spread.
    steady = [math.exp(0.02 * math.sin(i)) for i in range(20)]
    assert learn_drift(steady).value < learn_drift(steady[:5]).value


def test_too_few_sessions_learn_nothing_and_the_fallback_says_whose_figure_it_is():
    assert learn_drift([1.0, 1.01][: MIN_SESSIONS - 1]) is None
    assert learn_drift([1.0, math.nan, 0.0, -1.0, 1.02]) is None  # unusable values are not sessions
    cpu = built_in_drift(0.042)
    assert cpu.describe() == "drift: the CPU build's figure, not this machine's (4.2%)"
    assert "not measured on any GPU" in built_in_drift(0.042, device="gpu").describe()


def test_the_statement_names_its_source_and_a_floor_from_this_sessions_runs():
    figure = learn_drift([1.0, 1.01, 0.995, 1.005, 0.99, 1.0], since="2026-11-20")
    text = figure.describe()
    assert text.startswith(f"drift {figure.value:.1%} (history: 6 sessions since the change point of 2026-11-20")
    assert "upper 90% bound" in text
    floored = learn_drift([1.0, 1.001, 0.999, 1.0], floor=0.05)
    assert floored.value == 0.05 and "raised to this session's own spread between runs, 5.0%" in floored.describe()
