"""The capacity search's mechanics: bracket, bisect, re-probe the boundary; budgets; ratios and bounds.

The issue-19 counter-examples (true capacities 15.9 and 11.5, unbracketed sides,
noise, over-saturation) are in test_capacity_bracketing.py.
"""

import math
import random

import pytest

from pytest_specdec.formatting import quantity
from pytest_specdec.measure.capacity.search import (
    Capacity,
    CapacitySearch,
    Probe,
    capacity_ratio,
    crossover,
    ratio_of,
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
    return CapacitySearch(over="request_rate", **{"start": 1.0, **kw})


def test_monotone_curve_brackets_upward_bisects_geometrically_then_reprobes_both_ends():
    curve = Curve(5.3)
    result = search_capacity(curve, rates())
    assert curve.calls[:4] == [1.0, 2.0, 4.0, 8.0]
    # Geometric midpoints: sqrt(4*8), then sqrt(4*5.657), then sqrt(4.757*5.657); then the
    # final bracket's failure (5.657) and hold (5.187) once more each.
    assert curve.calls[4:] == pytest.approx([5.6569, 4.7568, 5.1874, 5.6569, 5.1874], rel=1e-4)
    assert result.status == "found" and result.stopped == "converged" and not result.non_monotone
    lo, hi = result.bracket
    assert result.capacity == lo == curve.calls[6] and hi == curve.calls[4]
    assert lo <= 5.3 < hi and hi / lo - 1 <= 0.1
    assert [p.load for p in result.probes] == curve.calls
    assert result.reprobed() == {hi: (0, 2), lo: (2, 0)}
    assert result.describe() == (
        "5.19 req/s (held at 5.19, failed at 5.66); re-probed 5.66: held 0 of 2; re-probed 5.19: held 2 of 2"
    )
    assert result.bound is None and result.interval == (lo, hi)


def test_monotone_curve_brackets_downward_from_a_failing_start():
    curve = Curve(5.3)
    result = search_capacity(curve, rates(start=64.0))
    assert curve.calls[:5] == [64.0, 32.0, 16.0, 8.0, 4.0]
    assert result.status == "found" and result.capacity <= 5.3 < result.bracket[1]
    assert 5.3 / result.capacity - 1 <= 0.1


@pytest.mark.parametrize("true_capacity", [0.3, 0.9, 3.0, 7.7, 40.0, 200.0])
@pytest.mark.parametrize("start", [0.5, 4.0, 100.0])
def test_converges_within_resolution_and_runs_only_the_boundary_twice(true_capacity, start):
    curve = Curve(true_capacity)
    result = search_capacity(curve, rates(start=start, resolution=0.05, bracket_probes=12))
    assert result.status == "found" and result.stopped == "converged"
    lo, hi = result.bracket
    assert lo <= true_capacity < hi and hi / lo - 1 <= 0.05
    repeated = {x for x in curve.calls if curve.calls.count(x) > 1}
    assert repeated == {lo, hi} and all(curve.calls.count(x) == 2 for x in repeated)


def test_the_bracket_budget_ends_an_open_side_as_a_lower_bound():
    curve = Curve(math.inf)
    result = search_capacity(curve, rates(bracket_probes=4))
    assert curve.calls == [1.0, 2.0, 4.0, 8.0]
    assert (result.status, result.capacity, result.bracket, result.bound) == (
        "above_highest_probe",
        8.0,
        (8.0, None),
        ">=",
    )
    assert result.stopped == "bracket_probes" and result.interval == (8.0, math.inf)
    assert result.describe() == ">= 8 req/s (held at every load up to 8; bracket_probes ran out before a load failed)"


def test_max_load_is_a_ceiling_the_search_never_exceeds():
    curve = Curve(math.inf)
    result = search_capacity(curve, rates(max_load=10.0))
    assert curve.calls == [1.0, 2.0, 4.0, 8.0, 10.0]
    assert (result.status, result.stopped, result.capacity) == ("above_highest_probe", "max_load", 10.0)
    assert result.describe() == ">= 10 req/s (held at every load up to 10, the ceiling max_load=10)"
    curve = Curve(9.0)  # the ceiling is where the bracket closes: 10 fails, bisect (8, 10)
    found = search_capacity(curve, rates(max_load=10.0))
    assert found.status == "found" and found.bracket[0] <= 9.0 < found.bracket[1] <= 10.0


def test_the_bisect_budget_is_separate_from_the_bracket_budget():
    curve = Curve(5.3)
    result = search_capacity(curve, rates(bisect_probes=1))
    assert curve.calls == pytest.approx([1.0, 2.0, 4.0, 8.0, 5.6569], rel=1e-4)  # bracketing spent its own four
    assert result.status == "found" and result.stopped == "bisect_probes"
    assert result.bracket == (4.0, pytest.approx(5.6569, rel=1e-4))
    assert result.describe().endswith("; the probe budget ran out first (bisect_probes), bracket 4-5.66")


def test_a_converged_bracket_without_budget_to_reprobe_says_it_rests_on_single_runs():
    curve = Curve(5.3)
    result = search_capacity(curve, rates(bisect_probes=3))
    assert len(curve.calls) == 7 and result.stopped == "unconfirmed" and result.status == "found"
    assert "rests on single runs" in result.describe()


@pytest.mark.parametrize("max_probes", range(2, 11))
def test_max_probes_caps_both_phases_together(max_probes):
    curve = Curve(5.3)
    result = search_capacity(curve, rates(max_probes=max_probes))
    # Unbounded, this search takes 9 probes (see the first test).
    assert len(curve.calls) == min(max_probes, 9) == len(result.probes)
    assert result.stopped == ("converged" if max_probes >= 9 else "unconfirmed" if max_probes >= 7 else "max_probes")


def test_failing_down_to_min_load_is_an_upper_bound():
    curve = Curve(0.1)
    result = search_capacity(curve, rates(start=2.0))
    assert curve.calls == [2.0, 1.0, 0.5, 0.25]
    assert (result.status, result.capacity, result.stopped, result.bound) == ("not_reached", None, "min_load", "<")
    assert result.interval == (0.0, 0.25)
    assert result.describe() == "< 0.25 req/s (not reached: the SLO failed at 0.25 req/s, the lowest load probed)"
    curve = Curve(0.1)
    search_capacity(curve, rates(start=3.0, min_load=0.5))
    assert curve.calls == [3.0, 1.5, 0.75, 0.5]  # min_load is clamped to, not overshot


def test_not_reached_because_the_budget_ran_out_says_so():
    curve = Curve(0.1)
    result = search_capacity(curve, rates(start=2.0, bracket_probes=2))
    assert curve.calls == [2.0, 1.0]
    assert result.status == "not_reached" and result.stopped == "bracket_probes"
    assert "budget ran out" in result.describe()


@pytest.mark.parametrize(
    "start, expected_calls", [(1, [1, 2, 4, 8, 16, 12, 10, 11, 12, 11]), (64, [64, 32, 16, 8, 12, 10, 11, 12, 11])]
)
def test_concurrency_bisects_on_integers(start, expected_calls):
    curve = Curve(11)
    result = search_capacity(curve, CapacitySearch(over="max_concurrency", start=start))
    assert curve.calls == expected_calls and all(float(c).is_integer() for c in curve.calls)
    assert (result.capacity, result.bracket, result.status) == (11, (11, 12), "found")
    assert result.describe().startswith("11 concurrent requests (held at 11, failed at 12)")


def test_concurrency_growth_always_moves_by_at_least_one():
    curve = Curve(math.inf)
    search_capacity(curve, CapacitySearch(over="max_concurrency", start=1, bracket_probes=5, growth=1.2))
    assert curve.calls == [1, 2, 3, 4, 5]


def test_shared_loads_near_a_midpoint_are_probed_instead():
    curve = Curve(5.3)
    result = search_capacity(curve, rates(), shared_loads=[5.5, 4.9, 100.0, 0.3])
    # (4, 8): midpoint 5.657, 5.5 is within 10% -> probe 5.5 (fails);
    # (4, 5.5): midpoint 4.690, 4.9 within 10% -> probe 4.9 (holds);
    # (4.9, 5.5): midpoint 5.191, no shared load near -> probe it; converged; re-probe 5.5 and 5.191.
    assert curve.calls[:6] == [1.0, 2.0, 4.0, 8.0, 5.5, 4.9]
    assert curve.calls[6:] == pytest.approx([math.sqrt(4.9 * 5.5), 5.5, math.sqrt(4.9 * 5.5)])
    assert 100.0 not in curve.calls and 0.3 not in curve.calls
    assert result.capacity == pytest.approx(math.sqrt(4.9 * 5.5))


def test_shared_loads_farther_than_resolution_are_not_used():
    curve = Curve(5.3)
    search_capacity(curve, rates(), shared_loads=[5.0])  # 5.0 is 11.6% off sqrt(32)
    assert 5.0 not in curve.calls[:5]
    curve = Curve(11)
    search_capacity(curve, CapacitySearch(over="max_concurrency", start=8), shared_loads=[11])
    assert curve.calls[:5] == [8, 16, 11, 13, 12]  # (8, 16): midpoint 12, shared 11 is within 10%


def test_shared_loads_outside_the_bracket_are_not_used():
    curve = Curve(4.3)
    # (4, 4.5): midpoint 4.243; 3.9 is within 10% of it but below the load that held.
    search_capacity(curve, rates(start=4.0, growth=1.125), shared_loads=[3.9, 4.5])
    assert curve.calls[:3] == pytest.approx([4.0, 4.5, math.sqrt(18)])
    assert 3.9 not in curve.calls


def test_a_noisy_curve_never_reports_a_capacity_above_a_failed_verdict():
    for seed in range(40):
        rng = random.Random(seed)
        curve = Curve(5.3, noise=lambda load: rng.uniform(-0.3, 0.3))  # every run draws afresh
        result = search_capacity(curve, rates(start=rng.choice([0.5, 2.0, 16.0]), max_probes=14))
        tally = {}
        for p in result.probes:
            held, failed = tally.get(p.load, (0, 0))
            tally[p.load] = (held + p.holds, failed + (not p.holds))
        failed = [load for load, (h, f) in tally.items() if h <= f]
        if result.capacity is not None:
            assert all(result.capacity < f for f in failed)
            assert tally[result.capacity][0] > tally[result.capacity][1]
        assert len(curve.calls) <= 14 and max(curve.calls.count(x) for x in curve.calls) <= 3


def test_a_load_run_several_times_counts_by_majority_and_a_tie_counts_as_failed():
    runs = [Probe(4.0, True, {}), Probe(8.0, False, {}), Probe(8.0, True, {}), Probe(8.0, True, {})]
    majority = Capacity.from_probes("request_rate", runs)
    assert (majority.capacity, majority.status) == (8.0, "above_highest_probe")
    assert "re-probed 8: held 2 of 3 (runs disagreed, noise: the majority counts, held)" in majority.describe()
    tie = Capacity.from_probes("request_rate", runs[:3])
    assert (tie.capacity, tie.bracket) == (4.0, (4.0, 8.0))
    assert "(runs disagreed, noise: the majority counts, a tie, counted as failed)" in tie.describe()


def test_non_monotone_probes_are_flagged_and_not_believed():
    probes = [Probe(1.0, True, {}), Probe(2.0, True, {}), Probe(4.0, False, {}), Probe(8.0, True, {})]
    result = Capacity.from_probes("request_rate", probes)
    assert (result.capacity, result.bracket, result.status) == (2.0, (2.0, 4.0), "found")
    assert result.non_monotone and "non-monotone" in result.describe()
    lowest_failed = Capacity.from_probes("request_rate", [Probe(1.0, False, {}), Probe(2.0, True, {})])
    assert (lowest_failed.status, lowest_failed.capacity, lowest_failed.non_monotone) == ("not_reached", None, True)


def test_a_load_the_client_did_not_offer_is_a_ceiling_the_search_narrows_below():
    # Held up to 3, failed at 4; the client cannot offer 2.83 or more: the bisection narrows between 2 and
    # 2.83, never at or above it, and stops there.
    def probe(load):
        if load >= math.sqrt(8) - 1e-9:
            if load < 4:
                return Probe(load, False, {"reason": "client-bound: p99 dispatch lag 40 ms"}, offered=False)
        return Probe(load, load <= 3.0, {"reason": "synthetic"})

    found = search_capacity(probe, rates())
    loads = [p.load for p in found.probes]
    assert loads[:4] == pytest.approx([1, 2, 4, math.sqrt(8)])
    assert all(x < math.sqrt(8) for x in loads[4:]) and len(loads) > 4, loads
    assert found.stopped == "client_bound" and found.status == "found" and found.bracket[1] == 4.0
    lo = found.bracket[0]
    assert lo == max(loads[4:]) and math.sqrt(8) / lo - 1 <= 0.1, loads  # converged against the ceiling
    assert found.not_offered() == pytest.approx([math.sqrt(8)])
    assert found.describe() == (
        f"{quantity(lo)} req/s (held at {quantity(lo)}, failed at 4); not offered (the client, not the server, "
        "set the pace) at 2.83: client-bound: p99 dispatch lag 40 ms; the search stopped "
        f"there, bracket {quantity(lo)}-4"
    )
    # Counted neither way: the same probes without it read the same capacity.
    offered = [p for p in found.probes if p.offered]
    assert Capacity.from_probes("request_rate", offered).bracket == found.bracket


def test_a_first_load_the_client_cannot_offer_steps_the_search_down_below_it():
    # The CI failure of 2026-12-01: the reference's first probe (1 req/s) was client-bound in every run, and
    # the search ended there, its capacity unknown, while lower loads were there to measure.
    def probe(load):
        if load >= 1:
            return Probe(load, False, {"reason": "client-bound"}, offered=False)
        return Probe(load, load <= 0.6, {"reason": "synthetic"})

    found = search_capacity(probe, rates())
    loads = [p.load for p in found.probes]
    assert loads[:3] == pytest.approx([1, 0.5, math.sqrt(0.5)]) and all(x < 1 for x in loads[1:]), loads
    assert found.status == "found" and 0.5 <= found.capacity <= 0.6 < found.bracket[1] <= math.sqrt(0.5)
    assert found.stopped in ("converged", "unconfirmed")


def test_a_client_that_cannot_offer_any_load_steps_down_to_the_least_and_knows_nothing():
    found = search_capacity(lambda load: Probe(load, False, {"reason": "client-bound"}, offered=False), rates())
    assert [p.load for p in found.probes] == [1.0, 0.5, 0.25]  # min_load 0.25: nothing below it
    assert found.status == "not_offered" and found.stopped == "client_bound" and found.capacity is None
    assert found.describe().startswith(
        "unknown (the client could not offer 1 req/s, the first load probed, nor any load down to 0.25 req/s)"
    )


def test_a_ceiling_below_a_failure_bisects_under_the_ceiling_and_converges_there():
    # Failed at 1, the client could not offer 0.5, held at 0.25: the search bisects between 0.25 and the
    # ceiling, never at 0.5 or above again, and brackets the true capacity (0.4) below it.
    def probe(load):
        if load == 0.5:
            return Probe(load, False, {"reason": "client-bound"}, offered=False)
        return Probe(load, load < 0.4, {"reason": "synthetic"})

    found = search_capacity(probe, rates())
    loads = [p.load for p in found.probes]
    assert loads[:3] == [1.0, 0.5, 0.25] and all(x < 0.5 for x in loads[3:]), loads
    assert found.status == "found" and found.stopped == "converged", found.describe()
    lo, hi = found.bracket
    assert 0.25 < lo < 0.4 <= hi < 0.5 and hi / lo - 1 <= 0.1, found.bracket


def test_a_probe_for_another_load_is_refused():
    with pytest.raises(ValueError, match="must return a Probe"):
        search_capacity(lambda load: Probe(load + 1, True, {}), rates())


@pytest.mark.parametrize(
    "kwargs, field",
    [
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
        ({"max_load": 0.5}, "max_load"),  # below start
        ({"max_load": math.inf}, "max_load"),
        ({"over": "max_concurrency", "start": 4, "max_load": 9.5}, "max_load"),
        ({"bracket_probes": 1}, "bracket_probes"),
        ({"bracket_probes": True}, "bracket_probes"),
        ({"bisect_probes": -1}, "bisect_probes"),
        ({"bisect_probes": 2.0}, "bisect_probes"),
    ],
)
def test_search_fields_are_validated_by_name(kwargs, field):
    with pytest.raises(ValueError, match=field):
        CapacitySearch(**{"over": "request_rate", "start": 1.0, **kwargs})


def test_the_access_pattern_carries_the_search_bounds_and_names_a_bad_one():
    from pytest_specdec.load.patterns import CATALOG, PatternError

    pattern = CATALOG["slo_capacity"].with_overrides(search_start=0.5, max_load=32, bracket_probes=7, bisect_probes=4)
    assert pattern.search_bounds() == {
        "over": "request_rate",
        "start": 0.5,
        "max_load": 32.0,
        "bracket_probes": 7,
        "bisect_probes": 4,
        "max_probes": None,
        "resolution": 0.1,
    }
    assert CapacitySearch(**pattern.search_bounds()).max_load == 32.0
    described = pattern.describe()
    assert (described["max_load"], described["bracket_probes"], described["bisect_probes"]) == (32.0, 7, 4)
    defaults = CATALOG["slo_capacity_concurrency"].search_bounds()
    assert (defaults["max_load"], defaults["bracket_probes"], defaults["bisect_probes"], defaults["max_probes"]) == (
        None,
        8,
        6,
        None,
    )
    for bad, named in (
        ({"max_load": 0.25}, "max_load must be a finite number >= search_start (0.5)"),
        ({"bracket_probes": 1}, "bracket_probes must be an int >= 2"),
        ({"bisect_probes": 1.5}, "bisect_probes must be an int >= 0"),
        ({"max_probes": 1}, "max_probes must be an int >= 2 or None"),
    ):
        with pytest.raises(PatternError, match=named.replace("(", r"\(").replace(")", r"\)")):
            pattern.with_overrides(**bad)
    with pytest.raises(PatternError, match="max_load must be a finite whole number"):
        CATALOG["slo_capacity_concurrency"].with_overrides(max_load=8.5)
    with pytest.raises(PatternError, match="max_load, bisect_probes only apply to capacity searches"):
        CATALOG["throughput_low"].with_overrides(max_load=8, bisect_probes=2)


def test_min_load_defaults_by_what_is_searched():
    assert CapacitySearch("request_rate", 1.0, 4).min_load == 0.25
    assert CapacitySearch("max_concurrency", 4, 4).min_load == 1


def _cap(held, failed, over="request_rate"):
    probes = [Probe(x, True, {}) for x in held] + [Probe(x, False, {}) for x in failed]
    return Capacity.from_probes(over, probes)


def test_capacity_ratio_of_two_found_capacities_is_an_estimate_with_its_spread():
    assert capacity_ratio(_cap([4.0], [5.0]), _cap([6.0], [7.0])) == (1.5, None)
    ratio = ratio_of(_cap([4.0], [5.0]), _cap([6.0], [7.0]))
    assert (ratio.kind, ratio.value, ratio.low, ratio.high) == ("estimate", 1.5, 6 / 5, 7 / 4)
    assert ratio.describe() == "1.50x (1.20-1.75x with probe noise)"
    # Decided on the interval, never on the point: 1.5 is undecidable, 1.2 passes, 1.8 fails.
    assert ratio.decide(1.5)[0] == "undecidable" and "anywhere in 1.2-1.75x" in ratio.decide(1.5)[1]
    assert ratio.decide(1.2) == ("pass", "ratio in 1.2-1.75x, all of it >= 1.2")
    assert ratio.decide(1.8) == ("fail", "ratio in 1.2-1.75x, all of it < 1.8")


def test_capacity_ratio_with_an_open_side_is_a_bound_in_its_direction():
    upper = ratio_of(_cap([8.0], []), _cap([12.0], [13.0]))  # the reference held everywhere: ratio <= 12/8
    assert (upper.kind, upper.value) == ("upper_bound", 1.5) and upper.notes[0] == "upper bound"
    assert upper.notes[1].startswith("reference >= 8 req/s")
    # Decided where even the interval's top (SD's failed load over the reference's highest hold) is below.
    assert upper.decide(1.7) == ("fail", "ratio in 0-1.62x, all of it < 1.7")
    assert upper.decide(1.6)[0] == "undecidable"
    assert upper.decide(1.0)[0] == "undecidable"
    lower = ratio_of(_cap([4.0], [5.0]), _cap([8.0], []))  # SD held everywhere: ratio >= 8/4
    assert (lower.kind, lower.value) == ("lower_bound", 2.0) and lower.notes[1].startswith("SD >= 8 req/s")
    assert lower.decide(1.6)[0] == "pass" and lower.decide(2.0)[0] == "undecidable"  # low end: 8 / 5
    both = ratio_of(_cap([8.0], []), _cap([8.0], []))
    assert both.kind == "unknown" and math.isnan(both.value) and both.decide(0.1)[0] == "undecidable"
    value, why = capacity_ratio(_cap([8.0], []), _cap([8.0], []))
    assert math.isnan(value) and why.startswith("unknown")


def test_a_side_not_reached_bounds_the_ratio_from_the_other_direction():
    # The reference failed even at 0.25 req/s, SD held at 4: SD carries more than 16x.
    lower = ratio_of(_cap([], [0.25]), _cap([4.0], [5.0]))
    assert (lower.kind, lower.value) == ("lower_bound", 16.0) and "reference < 0.25 req/s" in lower.notes[1]
    # SD failed at 0.25, the reference held at 4: SD carries under 1/16 of it, decidedly below 1.
    upper = ratio_of(_cap([4.0], [5.0]), _cap([], [0.25]))
    assert (upper.kind, upper.value) == ("upper_bound", 0.0625) and upper.decide(1.0)[0] == "fail"
    assert ratio_of(_cap([], [0.25]), _cap([], [0.25])).kind == "unknown"


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
