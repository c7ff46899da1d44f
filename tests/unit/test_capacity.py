import math
import random

import pytest

from pytest_specdec.load.capacity import (
    Capacity,
    CapacitySearch,
    Probe,
    capacity_ratio,
    crossover,
    search_capacity,
)


class Curve:
    """A synthetic server: the SLO holds at loads up to `capacity`; records every call."""

    def __init__(self, capacity, noise=None):
        self.capacity = capacity
        self.noise = noise or (lambda load: 0.0)
        self.calls = []

    def __call__(self, load):
        self.calls.append(load)
        return Probe(load, load * (1 + self.noise(load)) <= self.capacity, {"reason": "synthetic"})


def rates(**kw):
    return CapacitySearch(over="request_rate", **{"start": 1.0, "max_probes": 20, **kw})


def test_monotone_curve_brackets_upward_then_bisects_geometrically():
    curve = Curve(5.3)
    result = search_capacity(curve, rates())
    assert curve.calls[:4] == [1.0, 2.0, 4.0, 8.0]
    # Geometric midpoints: sqrt(4*8), then sqrt(4*5.657), then sqrt(4.757*5.657).
    assert curve.calls[4:] == pytest.approx([5.6569, 4.7568, 5.1874], rel=1e-4)
    assert result.status == "found" and result.stopped == "converged" and not result.non_monotone
    lo, hi = result.bracket
    assert result.capacity == lo == curve.calls[-1] and hi == curve.calls[4]
    assert lo <= 5.3 < hi and hi / lo - 1 <= 0.1
    assert [p.load for p in result.probes] == curve.calls
    assert result.describe() == "5.19 req/s (held at 5.19, failed at 5.66)"


def test_monotone_curve_brackets_downward_from_a_failing_start():
    curve = Curve(5.3)
    result = search_capacity(curve, rates(start=64.0))
    assert curve.calls[:5] == [64.0, 32.0, 16.0, 8.0, 4.0]
    assert result.status == "found" and result.capacity <= 5.3 < result.bracket[1]
    assert 5.3 / result.capacity - 1 <= 0.1
    assert len(set(curve.calls)) == len(curve.calls)


@pytest.mark.parametrize("true_capacity", [0.3, 0.9, 3.0, 7.7, 40.0, 333.0])
@pytest.mark.parametrize("start", [0.5, 4.0, 100.0])
def test_converges_within_resolution_without_repeating_a_load(true_capacity, start):
    curve = Curve(true_capacity)
    result = search_capacity(curve, rates(start=start, resolution=0.05))
    assert result.status == "found" and result.stopped == "converged"
    lo, hi = result.bracket
    assert lo <= true_capacity < hi and hi / lo - 1 <= 0.05
    assert len(set(curve.calls)) == len(curve.calls)


@pytest.mark.parametrize("max_probes", range(2, 9))
def test_max_probes_is_never_exceeded(max_probes):
    curve = Curve(5.3)
    result = search_capacity(curve, rates(max_probes=max_probes))
    # Unbounded, this search takes 7 probes (see the first test).
    assert len(curve.calls) == min(max_probes, 7) == len(result.probes)
    assert result.stopped == ("converged" if max_probes >= 7 else "max_probes")
    if max_probes == 5:  # 1, 2, 4, 8 and one midpoint, 5.66, which failed
        assert result.status == "found" and result.bracket == (4.0, pytest.approx(5.6569, rel=1e-4))
        assert result.describe().endswith("; the probe budget ran out first")


def test_every_probe_holding_is_a_lower_bound():
    curve = Curve(math.inf)
    result = search_capacity(curve, rates(max_probes=4))
    assert curve.calls == [1.0, 2.0, 4.0, 8.0]
    assert (result.status, result.capacity, result.bracket) == ("above_highest_probe", 8.0, (8.0, None))
    assert result.stopped == "max_probes"
    assert result.describe() == "≥ 8 req/s (every probe up to 8 held)"


def test_failing_down_to_min_load_is_not_reached():
    curve = Curve(0.1)
    result = search_capacity(curve, rates(start=2.0))
    assert curve.calls == [2.0, 1.0, 0.5, 0.25]
    assert (result.status, result.capacity, result.stopped) == ("not_reached", None, "min_load")
    assert result.describe() == "not reached: the SLO failed at 0.25 req/s, the lowest load probed"
    # min_load is clamped to, not overshot.
    curve = Curve(0.1)
    search_capacity(curve, rates(start=3.0, min_load=0.5))
    assert curve.calls == [3.0, 1.5, 0.75, 0.5]


def test_not_reached_because_the_budget_ran_out_says_so():
    curve = Curve(0.1)
    result = search_capacity(curve, rates(start=2.0, max_probes=2))
    assert curve.calls == [2.0, 1.0]
    assert result.status == "not_reached" and result.stopped == "max_probes"
    assert "budget ran out" in result.describe()


@pytest.mark.parametrize("start, expected_calls", [
    (1, [1, 2, 4, 8, 16, 12, 10, 11]),
    (64, [64, 32, 16, 8, 12, 10, 11]),
])
def test_concurrency_bisects_on_integers(start, expected_calls):
    curve = Curve(11)
    search = CapacitySearch(over="max_concurrency", start=start, max_probes=20)
    result = search_capacity(curve, search)
    assert curve.calls == expected_calls and all(float(c).is_integer() for c in curve.calls)
    assert (result.capacity, result.bracket, result.status) == (11, (11, 12), "found")
    assert result.describe() == "11 concurrent requests (held at 11, failed at 12)"


def test_concurrency_growth_always_moves_by_at_least_one():
    curve = Curve(math.inf)
    search_capacity(curve, CapacitySearch(over="max_concurrency", start=1, max_probes=5, growth=1.2))
    assert curve.calls == [1, 2, 3, 4, 5]


def test_shared_loads_near_a_midpoint_are_probed_instead():
    curve = Curve(5.3)
    result = search_capacity(curve, rates(), shared_loads=[5.5, 4.9, 100.0, 0.3])
    # (4, 8): midpoint 5.657, 5.5 is within 10% -> probe 5.5 (fails);
    # (4, 5.5): midpoint 4.690, 4.9 within 10% -> probe 4.9 (holds);
    # (4.9, 5.5): midpoint 5.191, no shared load near -> probe it; then converged.
    assert curve.calls[:6] == [1.0, 2.0, 4.0, 8.0, 5.5, 4.9]
    assert curve.calls[6:] == pytest.approx([math.sqrt(4.9 * 5.5)])
    assert 100.0 not in curve.calls and 0.3 not in curve.calls
    assert result.capacity == pytest.approx(math.sqrt(4.9 * 5.5))


def test_shared_loads_farther_than_resolution_are_not_used():
    curve = Curve(5.3)
    search_capacity(curve, rates(), shared_loads=[5.0])  # 5.0 is 11.6% off sqrt(32)
    assert 5.0 not in curve.calls[:5]
    curve = Curve(11)
    search_capacity(curve, CapacitySearch(over="max_concurrency", start=8, max_probes=9), shared_loads=[11])
    assert curve.calls == [8, 16, 11, 13, 12]  # (8, 16): midpoint 12, shared 11 is within 10%


def test_shared_loads_outside_the_bracket_are_not_used():
    curve = Curve(4.3)
    # (4, 4.5): midpoint 4.243; 3.9 is within 10% of it but below the load that held.
    search_capacity(curve, rates(start=4.0, growth=1.125), shared_loads=[3.9, 4.5])
    assert curve.calls == pytest.approx([4.0, 4.5, math.sqrt(18)])


def test_a_noisy_curve_never_reports_a_capacity_above_a_failed_probe():
    for seed in range(40):
        rng = random.Random(seed)
        table = {}
        curve = Curve(5.3, noise=lambda load: table.setdefault(load, rng.uniform(-0.3, 0.3)))
        result = search_capacity(curve, rates(start=rng.choice([0.5, 2.0, 16.0]), max_probes=8))
        failed = [p.load for p in result.probes if not p.holds]
        held = [p.load for p in result.probes if p.holds]
        if result.capacity is not None:
            assert all(result.capacity < f for f in failed)
            assert result.capacity == max(h for h in held if not failed or h < min(failed))
        assert len(set(curve.calls)) == len(curve.calls) <= 8
        # Each probe lies inside the bracket the earlier ones leave, so one search cannot
        # see a hold above a failure; only probes pooled from elsewhere can.
        assert not result.non_monotone


def test_non_monotone_probes_are_flagged_and_not_believed():
    probes = [Probe(1.0, True, {}), Probe(2.0, True, {}), Probe(4.0, False, {}), Probe(8.0, True, {})]
    result = Capacity.from_probes("request_rate", probes)
    assert (result.capacity, result.bracket, result.status) == (2.0, (2.0, 4.0), "found")
    assert result.non_monotone and "non-monotone" in result.describe()
    lowest_failed = Capacity.from_probes("request_rate", [Probe(1.0, False, {}), Probe(2.0, True, {})])
    assert (lowest_failed.status, lowest_failed.capacity, lowest_failed.non_monotone) == ("not_reached", None, True)


def test_a_probe_for_another_load_is_refused():
    with pytest.raises(ValueError, match="must return a Probe"):
        search_capacity(lambda load: Probe(load + 1, True, {}), rates())


@pytest.mark.parametrize("kwargs, field", [
    ({"over": "rate"}, "over"),
    ({"start": 0.0}, "start"),
    ({"start": math.inf}, "start"),
    ({"start": 0.1}, "start"),  # below the default min_load of 0.25
    ({"over": "max_concurrency", "start": 2.5}, "start"),
    ({"max_probes": 1}, "max_probes"),
    ({"max_probes": 4.0}, "max_probes"),
    ({"growth": 1.0}, "growth"),
    ({"growth": math.nan}, "growth"),
    ({"resolution": 0.0}, "resolution"),
    ({"min_load": 0.0}, "min_load"),
    ({"over": "max_concurrency", "start": 4, "min_load": 0.5}, "min_load"),
])
def test_search_fields_are_validated_by_name(kwargs, field):
    with pytest.raises(ValueError, match=field):
        CapacitySearch(**{"over": "request_rate", "start": 1.0, "max_probes": 6, **kwargs})


def test_min_load_defaults_by_what_is_searched():
    assert CapacitySearch("request_rate", 1.0, 4).min_load == 0.25
    assert CapacitySearch("max_concurrency", 4, 4).min_load == 1


def _cap(held, failed, over="request_rate"):
    probes = [Probe(x, True, {}) for x in held] + [Probe(x, False, {}) for x in failed]
    return Capacity.from_probes(over, probes)


def test_capacity_ratio_of_two_found_capacities_is_plain():
    assert capacity_ratio(_cap([4.0], [5.0]), _cap([6.0], [7.0])) == (1.5, None)


def test_capacity_ratio_with_an_open_side_is_a_bound():
    ratio, why = capacity_ratio(_cap([8.0], []), _cap([12.0], [13.0]))
    assert ratio == 1.5 and why.startswith("upper bound")
    ratio, why = capacity_ratio(_cap([4.0], [5.0]), _cap([8.0], []))
    assert ratio == 2.0 and why.startswith("lower bound")
    ratio, why = capacity_ratio(_cap([8.0], []), _cap([8.0], []))
    assert math.isnan(ratio) and "both" in why


def test_capacity_ratio_without_a_capacity_is_nan():
    ratio, why = capacity_ratio(_cap([], [0.25]), _cap([4.0], [5.0]))
    assert math.isnan(ratio) and "reference capacity not reached" in why
    ratio, why = capacity_ratio(_cap([4.0], [5.0]), _cap([], [0.25]))
    assert math.isnan(ratio) and "speculative capacity not reached" in why


def test_capacity_ratio_flags_a_non_monotone_side_and_refuses_mixed_loads():
    ratio, why = capacity_ratio(_cap([4.0, 16.0], [8.0]), _cap([6.0], [7.0]))
    assert ratio == 1.5 and "non-monotone" in why
    with pytest.raises(ValueError, match="different loads"):
        capacity_ratio(_cap([4.0], [5.0]), _cap([4], [5], over="max_concurrency"))


def test_crossover_interpolates_linearly_in_concurrency():
    result = crossover([(40, 0.7), (1, 1.5), (20, 0.9), (10, 1.3)])  # sorted here
    # Between (10, 1.3) and (20, 0.9): 10 + (1.3 - 1) * (20 - 10) / (1.3 - 0.9) = 17.5.
    assert (result.status, result.value, result.between) == ("crosses", pytest.approx(17.5), (10, 20))
    assert (result.lowest, result.highest) == (1, 40)
    assert result.describe().startswith("SD stops paying at ≈ 17.5 concurrent requests")
    assert crossover([(4, 1.0), (8, 0.5)]).value == 4


def test_crossover_never_and_below_from_start():
    never = crossover([(1, 1.4), (8, 1.1), (64, 1.02)])
    assert (never.status, never.value, never.highest) == ("never", None, 64)
    assert never.describe() == "SD pays up to the highest measured concurrency 64"
    below = crossover([(1, 0.9), (8, 0.8)])
    assert (below.status, below.value, below.lowest) == ("below_from_start", None, 1)
    assert below.describe() == "SD never paid, even at the lowest measured concurrency 1"
    assert crossover([(1, 0.9), (8, 1.2)]).note == "speedup >= 1 again at 8"


def test_crossover_skips_nan_points():
    result = crossover([(1, 1.2), (10, math.nan), (20, 0.8)])
    # The NaN point is gone: interpolate over (1, 1.2)-(20, 0.8): 1 + 0.2 * 19 / 0.4 = 10.5.
    assert (result.status, result.value, result.skipped) == ("crosses", pytest.approx(10.5), (10,))
    assert "NaN speedup skipped at 10" in result.describe()


@pytest.mark.parametrize("points", [[], [(1, 1.2)], [(1, 1.2), (2, math.nan)]])
def test_crossover_of_fewer_than_two_points_is_unavailable(points):
    result = crossover(points)
    assert (result.status, result.value) == ("unavailable", None)
    assert result.describe().startswith("unavailable: ") and "needs two" in result.reason


def test_crossover_refuses_repeated_concurrency():
    with pytest.raises(ValueError, match="distinct"):
        crossover([(4, 1.2), (4, 0.9)])
