"""The throughput-interactivity frontier: Pareto points, reading a target off it, SD's worth there, and its checks."""

import math

import pytest

from pytest_specdec.analysis.frontier import (
    Frontier,
    OperatingPoint,
    frontier_at_or_above,
    operating_point,
    pareto_frontier,
    throughput_at,
    worth_at,
)
from pytest_specdec.verdict.sequential.rule import FAILED, PASSED, UNDECIDED

LEVELS = (1, 2, 4, 8)


def sweep(per_user, per_gpu, wobble=()):
    """A side's draws: draw d scales every level's throughput by (1 + wobble[d]); per-user speeds as given."""
    return tuple(
        tuple(OperatingPoint(c, u, g * (1 + w)) for c, u, g in zip(LEVELS, per_user, per_gpu))
        for w in (wobble or (0.0,))
    )


# A reference that trades per-user speed for throughput as concurrency grows, and SD faster per user at every level
# but with less throughput to spare at the top: the field's picture.
REF_USER, REF_GPU = (50.0, 45.0, 38.0, 28.0), (50.0, 90.0, 152.0, 224.0)
SD_USER, SD_GPU = (80.0, 70.0, 55.0, 36.0), (80.0, 140.0, 220.0, 250.0)


def test_a_point_is_1000_over_the_median_tpot_per_user_and_throughput_over_gpus_per_gpu():
    point = operating_point(4, output_throughput=800.0, median_tpot_ms=20.0, gpus=2)
    assert point == OperatingPoint(4.0, 50.0, 400.0)
    assert operating_point(4, 800.0, math.nan) is None and operating_point(4, 0.0, 20.0) is None
    with pytest.raises(ValueError, match="gpus"):
        operating_point(1, 10.0, 10.0, gpus=0)


def test_the_pareto_points_of_a_constructed_sweep_leave_out_the_dominated_ones():
    points = [
        OperatingPoint(1, 50, 50),
        OperatingPoint(2, 45, 90),
        OperatingPoint(3, 40, 80),  # slower per user and less per GPU than concurrency 2: dominated
        OperatingPoint(4, 38, 152),
        OperatingPoint(8, 28, 140),  # past the knee: slower and less productive than 4
        None,  # a level that could not be measured
    ]
    frontier = pareto_frontier(points)
    assert [p.concurrency for p in frontier] == [4, 2, 1]  # slowest per user first
    assert all(not p.dominated_by(q) for p in frontier for q in frontier)


def test_a_target_is_read_on_the_line_between_the_points_around_it_and_never_extrapolated():
    frontier = pareto_frontier(sweep(REF_USER, REF_GPU)[0])
    between = throughput_at(frontier, 41.5)  # half-way from concurrency 4 (38, 152) to 2 (45, 90)
    assert between.reached and between.per_gpu == pytest.approx(121.0) and between.between == (4.0, 2.0)
    assert throughput_at(frontier, 45.0).per_gpu == pytest.approx(90.0)
    beyond = throughput_at(frontier, 60.0)
    assert not beyond.reached and beyond.per_gpu is None
    assert beyond.why.startswith("not reached: the fastest operating point measured gives 50 tok/s per user")
    below = throughput_at(frontier, 20.0)
    assert not below.reached and below.why.startswith("outside the sweep")
    with pytest.raises(ValueError, match="per-user speed"):
        throughput_at(frontier, 0)


def test_sd_worth_at_a_per_user_speed_with_cost_per_1m_tokens_from_a_known_price():
    ref = Frontier("reference", sweep(REF_USER, REF_GPU))
    sd = Frontier("SD", sweep(SD_USER, SD_GPU))
    worth = worth_at(ref, sd, 45.0, usd_per_gpu_hour=3.6)
    # SD at 45 tok/s per user: between its concurrency 8 (36, 250) and 4 (55, 220): 250 - 9/19 * 30.
    assert worth.speculative.per_gpu == pytest.approx(250 - 9 / 19 * 30)
    assert worth.reference.per_gpu == pytest.approx(90.0)
    assert worth.ratio == pytest.approx(worth.speculative.per_gpu / 90.0)
    # $3.60 an hour at 90 tok/s: 1e6 / 90 s of GPU, a thousandth of a dollar a second.
    costs = worth.usd_per_million()
    assert costs["reference"] == pytest.approx(1e6 / 90 * 3.6 / 3600)
    assert worth.saving() == pytest.approx(1 - 1 / worth.ratio)
    assert worth_at(ref, sd, 45.0).usd_per_million() == {"reference": None, "speculative": None}  # no price given
    # A target only SD's frontier reaches: no ratio, said, never extrapolated from the reference's.
    only_sd = worth_at(ref, sd, 70.0)
    assert only_sd.ratio is None and only_sd.why.startswith("reference: not reached")
    assert only_sd.decide_at_least(1.0).outcome == PASSED
    assert worth_at(ref, sd, 90.0).decide_at_least(1.0).outcome == FAILED  # SD does not reach it either


def test_a_frontier_check_is_decided_when_the_draws_agree_and_undecided_when_they_straddle_the_zone():
    steady = (0.0, 0.01, -0.01, 0.005, -0.005, 0.0)
    ref = Frontier("reference", sweep(REF_USER, REF_GPU, steady))
    sd = Frontier("SD", sweep(SD_USER, SD_GPU, steady[::-1]))  # each side's own timing, draw by draw
    decided = worth_at(ref, sd, 45.0).decide_at_least(1.5)  # the ratio there is 2.62
    assert decided.outcome == PASSED and decided.draws == 6 and decided.low > math.log(1.5), decided.describe()
    assert worth_at(ref, sd, 45.0).decide_at_least(3.0).outcome == FAILED
    outcome, points = frontier_at_or_above(ref, sd, 40.0, 50.0)
    assert outcome == PASSED and [worth.per_user for worth, _ in points] == [40.0, 45.0, 50.0]
    # Where the frontiers cross (SD's throughput falls under the reference's at low per-user speeds), it fails.
    crossing = Frontier("SD", sweep(SD_USER, (60.0, 70.0, 80.0, 95.0), steady[::-1]))
    outcome, points = frontier_at_or_above(ref, crossing, 40.0, 50.0)
    assert outcome == FAILED and points[0][1].outcome == FAILED and points[0][1].ratio < 1
    # A range reaching below SD's slowest operating point was not measured there: undecided, never failed.
    outside = worth_at(ref, sd, 30.0).decide_at_least(1.0)
    assert outside.outcome == UNDECIDED and "outside the sweep" in outside.why
    # Two draws a side whose ratios straddle the bound: the intervals overlap, undecided, never a pass.
    ref2 = Frontier("reference", sweep(REF_USER, REF_GPU, (0.0, 0.0)))
    sd2 = Frontier("SD", sweep(SD_USER, SD_GPU, (-0.3, 0.3)))
    straddle = worth_at(ref2, sd2, 45.0).decide_at_least(1.5)
    assert straddle.outcome == UNDECIDED and straddle.low < math.log(1.5) < straddle.high


def test_the_sides_must_share_their_draws():
    with pytest.raises(ValueError, match="same draws"):
        worth_at(Frontier("r", sweep(REF_USER, REF_GPU, (0, 0))), Frontier("s", sweep(SD_USER, SD_GPU)), 45.0)
