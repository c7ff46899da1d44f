"""Capacity verdicts stand on their intervals: no pass where the true ratio is below the threshold by more
than the search's resolution, in 400 searches per case, with deterministic and with noisy probes.

The noisy probe holds with a probability falling smoothly around the true capacity: a logistic curve whose
10%-90% transition spans `width` of the load (5% and 10%, as issue 27 describes). Each search draws its
true capacities and its start load at random, so the brackets land at every offset from the truth.
"""

import math
import random

import pytest

from pytest_specdec.measure.capacity.search import CapacitySearch, Probe, ratio_of, search_capacity

SEARCHES = 400
RESOLUTION = CapacitySearch("request_rate", start=1.0).resolution  # 10%: the stated resolution


def probe_for(true: float, width: float, rng: random.Random):
    scale = width / 4.394  # a logistic's 10%-90% span is 4.394 scales

    def probe(load):
        p = float(load <= true) if width == 0 else 1 / (1 + math.exp((load / true - 1) / scale))
        return Probe(load, rng.random() < p)

    return probe


def verdicts(true_ratio: float, width: float, min_ratio: float = 1.0, seed: int = 0, **search) -> dict[str, int]:
    rng = random.Random(seed)
    counts = {"pass": 0, "fail": 0, "undecidable": 0}
    for _ in range(SEARCHES):
        reference_true = rng.uniform(4.0, 40.0)
        sd_true = reference_true * true_ratio
        plan = CapacitySearch("request_rate", start=round(rng.uniform(0.5, 4.0), 2), **search)
        reference = search_capacity(probe_for(reference_true, width, rng), plan)
        speculative = search_capacity(
            probe_for(sd_true, width, rng), plan, shared_loads=[p.load for p in reference.probes]
        )
        counts[ratio_of(reference, speculative).decide(min_ratio)[0]] += 1
    return counts


@pytest.mark.parametrize("width", [0.0, 0.05, 0.10])
@pytest.mark.parametrize("true_ratio", [1 - RESOLUTION - 0.01, 0.8, 0.5])
def test_no_pass_where_the_truth_is_below_the_threshold_by_more_than_the_resolution(width, true_ratio):
    counts = verdicts(true_ratio, width)
    assert counts["pass"] == 0, counts
    assert sum(counts.values()) == SEARCHES


@pytest.mark.parametrize("width", [0.0, 0.05, 0.10])
def test_no_fail_where_the_truth_is_above_the_threshold_by_more_than_the_resolution(width):
    counts = verdicts(1 + RESOLUTION + 0.01, width)
    assert counts["fail"] == 0, counts


def test_at_0_95x_the_point_estimate_no_longer_passes_a_check_of_1():
    # Issue 27: at a true 0.95x, deciding on the point estimate passed 161 of 400 searches.
    counts = verdicts(0.95, 0.0)
    assert counts["pass"] == 0, counts


def test_a_clear_margin_is_decided_both_ways():
    # The few left undecidable ran out of bracket probes on a high capacity from a low start: a bound.
    above, below = verdicts(1.5, 0.05), verdicts(0.6, 0.05)
    assert above["fail"] == 0 and above["pass"] >= 0.95 * SEARCHES, above
    assert below["pass"] == 0 and below["fail"] >= 0.95 * SEARCHES, below


@pytest.mark.parametrize("width, least", [(0.0, 1.0), (0.05, 1.0), (0.10, 0.985)])
def test_the_noise_interval_covers_the_true_capacity(width, least):
    rng = random.Random(7)
    bare = widened = 0
    for _ in range(SEARCHES):
        true = rng.uniform(4.0, 40.0)
        capacity = search_capacity(probe_for(true, width, rng), CapacitySearch("request_rate", start=1.0))
        lo, hi = capacity.interval
        bare += lo <= true < hi
        low, high = capacity.noise_interval
        widened += low <= true < high
    assert widened / SEARCHES >= least
    if width:
        assert bare < widened  # the bare bracket misses the truth more often under noise


def test_the_case_the_last_round_left_open_is_not_a_pass():
    # True capacities 15.9 (reference) and 11.5 (SD), start 1, six probes: both brackets read 11.3-16.
    plan = CapacitySearch("request_rate", start=1.0, max_probes=6)
    reference = search_capacity(probe_for(15.9, 0.0, random.Random(0)), plan)
    speculative = search_capacity(probe_for(11.5, 0.0, random.Random(0)), plan)
    verdict, why = ratio_of(reference, speculative).decide(1.0)
    assert verdict == "undecidable" and "cannot say whether it reaches 1" in why
