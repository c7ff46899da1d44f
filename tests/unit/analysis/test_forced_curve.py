"""analysis.forced_sweep: the break-even of a forced-acceptance sweep, the range the intervals leave it in,
and the step cost fitted through the points beside the theory's."""

import math

import pytest

from pytest_specdec.verdict.sequential.student_t import t_quantile
from pytest_specdec.analysis.forced_sweep import ForcedPoint, crossing, fitted_step_cost, forced_curve, pooled_intervals


def point(length, speedup, low=None, high=None, decode=None, c=0.5):
    low = speedup * 0.95 if low is None else low
    high = speedup * 1.05 if high is None else high
    return ForcedPoint(length, speedup, low, high, speedup if decode is None else decode, length, c)


def test_crossing_interpolates_where_a_rising_speedup_reaches_one():
    assert crossing([(2.0, 0.5), (4.0, 1.5)]) == pytest.approx(3.0)
    assert crossing([(4.0, 1.5), (2.0, 0.5)]) == pytest.approx(3.0)  # any order
    assert crossing([(1.0, 0.4), (2.0, 0.8), (3.0, 1.0)]) == pytest.approx(3.0)  # reaching 1 counts
    assert crossing([(1.0, 0.4), (2.0, 0.8)]) is None
    assert crossing([(1.0, 1.2), (2.0, 1.4)]) is None  # paid from the shortest: nothing crossed
    assert crossing([(1.0, 0.4), (2.0, math.nan), (3.0, 1.6)]) == pytest.approx(2.0)  # a NaN is skipped


def test_a_speedup_of_l_over_c_gives_back_c():
    # With a drafted step costing 2.5 plain steps, the speedup at L is L / 2.5 exactly.
    points = [(x, x / 2.5) for x in (1.5, 2.5, 3.5, 4.5)]
    assert fitted_step_cost(points) == pytest.approx(2.5)
    assert fitted_step_cost([(1.0, math.nan)]) is None


def test_the_curve_breaks_even_at_its_step_cost_and_puts_the_theory_beside_it():
    cost, k = 2.5, 4
    points = [point(x, x / cost, c=0.4) for x in (4.5, 1.5, 3.5, 2.5)]
    curve = forced_curve(k, points)
    assert [p.length for p in curve.points] == [1.5, 2.5, 3.5, 4.5]
    assert curve.break_even.value == pytest.approx(2.5)
    assert curve.step_cost == pytest.approx(cost)
    assert curve.cost_ratio == pytest.approx(0.4) and curve.theory_step_cost == pytest.approx(1 + k * 0.4)
    assert curve.theory_speedup(2.6) == pytest.approx(1.0)
    # The range: where the intervals' upper ends (x/2.5 * 1.05) and lower ends (* 0.95) reach 1.
    assert 1.5 < curve.break_even.earliest < 2.5 < curve.break_even.latest < 3.5
    assert curve.describe().startswith("break-even at forced acceptance 2.50 (from 2.")
    assert "step cost fitted 2.50, the theory's 1 + k*c 2.60" in curve.describe()
    saved = curve.as_dict()
    assert saved["break_even"]["value"] == pytest.approx(2.5) and len(saved["points"]) == 4


def test_a_sweep_that_never_pays_says_so_and_where_the_intervals_leave_it():
    curve = forced_curve(4, [point(x, x / 6.0, c=None) for x in (2.0, 3.0, 4.0, 5.0)])
    assert curve.break_even.value is None and curve.break_even.surely_beyond
    assert curve.describe().startswith("SD does not pay at any forced acceptance measured, up to 5")
    assert curve.cost_ratio is None and curve.theory_step_cost is None and curve.theory_speedup(3.0) is None
    assert "the theory's 1 + k*c unavailable (c unmeasured)" in curve.describe()


def test_intervals_that_straddle_one_at_every_length_leave_the_break_even_open():
    points = [point(x, 0.9 + 0.01 * x, low=0.7, high=1.3) for x in (2.0, 3.0)]
    even = forced_curve(4, points).break_even
    assert even.value is None and not even.surely_beyond
    assert even.earliest is None and even.latest is None
    assert even.describe() == (
        "the speedup does not cross 1 between forced acceptance 2 and 3 (break-even from at or below 2 to beyond 3)"
    )


def test_a_sweep_that_pays_from_its_shortest_length():
    curve = forced_curve(4, [point(x, 1.0 + x / 10, low=1.01) for x in (2.0, 3.0)])
    assert curve.break_even.value is None and curve.break_even.latest == 2.0
    assert curve.describe().startswith(
        "SD pays at every forced acceptance measured, from 2 (break-even from at or below 2 to 2.00)"
    )


def test_an_empty_sweep_is_refused():
    with pytest.raises(ValueError, match="at least one measured length"):
        forced_curve(4, [])


def test_the_timing_spread_is_pooled_over_the_lengths():
    # Two draws a length, each pair 2% apart in the log: the pooled sd of a draw is 0.02/sqrt(2) on 3 degrees
    # of freedom (one a length), so each interval is exp(+-t(3) * 0.02/sqrt(2)/sqrt(2)) around its geometric mean.
    draws = [[0.5 * math.exp(-0.01), 0.5 * math.exp(0.01)], [1.0 * math.exp(-0.01), 1.0 * math.exp(0.01)]] + [
        [2.0 * math.exp(-0.01), 2.0 * math.exp(0.01)]
    ]
    half = t_quantile(0.025, 3) * 0.02 / 2
    for (low, high), centre in zip(pooled_intervals(draws), (0.5, 1.0, 2.0)):
        assert low == pytest.approx(centre * math.exp(-half)) and high == pytest.approx(centre * math.exp(half))
    # Alone, one length's two draws would leave t(1) = 12.7: pooling is what makes the intervals usable.
    assert t_quantile(0.025, 1) > 3.5 * t_quantile(0.025, 3)
    # A length with one draw takes its width from the pool; nothing to pool at all is no interval.
    (low, high), _ = pooled_intervals([[1.0], [0.9, 1.1]])
    assert 0 < low < 1.0 < high < math.inf
    assert pooled_intervals([[1.0], [2.0]]) == [(0.0, math.inf), (0.0, math.inf)]
