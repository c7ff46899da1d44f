import math

import pytest

from pytest_specdec.analysis.acceptance import (
    Percentiles,
    RequestSteps,
    StepTiming,
    acceptance_by_position,
    compare_estimate,
    per_position_rates,
    request_length_distribution,
    steps_from_chunks,
    steps_from_server,
    why_no_prediction,
)
from pytest_specdec.analysis.predictions import best_k, oracle_speedup, predict_speedups

NAN = math.nan
# tokens per step 4, 1, 3, 2 (sum 10); 12 output tokens: 1 prefill + 10 + 1 undrafted step
R1 = RequestSteps((3, 0, 2, 1), (3, 3, 3, 3), 12, "server")
# tokens 1, 1; 5 output tokens: 1 + 2 + 2 undrafted; the second step drafted only 2
R2 = RequestSteps((0, 0), (3, 2), 5, "server")
# nothing drafted: 1 + 3 undrafted steps
R3 = RequestSteps((), (), 4, "server")


def same(actual, expected):
    """Lists equal with NaN == NaN and float tolerance."""
    assert len(actual) == len(expected), (actual, expected)
    for a, e in zip(actual, expected):
        assert (math.isnan(a) and math.isnan(e)) or a == pytest.approx(e), (actual, expected)


# --- RequestSteps ---------------------------------------------------------------


def test_request_figures_by_hand():
    assert R1.acceptance_length == pytest.approx(2.5)  # 1 + 6/4
    assert R1.tokens_per_step == [4, 1, 3, 2]
    assert R1.undrafted_steps == 1  # 12 - 1 - 10
    assert R2.acceptance_length == pytest.approx(1.0)
    assert R2.undrafted_steps == 2
    assert math.isnan(R3.acceptance_length)
    assert R3.undrafted_steps == 3


def test_undrafted_steps_clamp_when_the_last_step_overruns():
    assert RequestSteps((3,), (3,), 3, "server").undrafted_steps == 0  # 3 - 1 - 4 = -2


def test_step_starts_spread_drafted_tokens_over_the_output():
    same(R1.step_fractions(), [0.0, 0.4, 0.5, 0.8])  # tokens before: 0, 4, 5, 8 of 10
    same(R1.step_positions(), [0.0, 4.4, 5.5, 8.8])  # x (12 - 1)
    assert R3.step_fractions() == []


def test_request_steps_validate():
    with pytest.raises(ValueError, match="source"):
        RequestSteps((1,), (2,), 3, "guess")
    with pytest.raises(ValueError, match="2 accepted counts but 1 drafted"):
        RequestSteps((1, 0), (2,), 3, "server")


# --- steps_from_server / steps_from_chunks ----------------------------------------


def test_server_arrays_become_steps():
    spec = {
        "per_step_accepted": [3, 0, 2, 1],
        "per_step_drafted": [3, 3, 3, 3],
        "num_spec_tokens": 3,
        "mean_acceptance_length": 2.5,
    }
    assert steps_from_server(spec, 12) == R1


@pytest.mark.parametrize("spec", [None, {}, {"num_spec_tokens": 3, "mean_acceptance_length": 1.8}])
def test_server_without_arrays_gives_none(spec):
    assert steps_from_server(spec, 10) is None


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"per_step_accepted": [1, 2], "per_step_drafted": [3]}, "has 2 steps but per_step_drafted has 1"),
        ({"per_step_accepted": [1, -1], "per_step_drafted": [3, 3]}, r"per_step_accepted\[1\]"),
        ({"per_step_accepted": [1, 1], "per_step_drafted": [3, -2]}, r"per_step_drafted\[1\]"),
        ({"per_step_accepted": [1, 1.5], "per_step_drafted": [3, 3]}, r"per_step_accepted\[1\]"),
        ({"per_step_accepted": [4], "per_step_drafted": [3]}, r"per_step_accepted\[0\] = 4 exceeds per_step_drafted"),
        ({"per_step_accepted": [1]}, "no per_step_drafted"),
        ({"per_step_drafted": [1]}, "no per_step_accepted"),
        ({"per_step_accepted": "12", "per_step_drafted": [3, 3]}, "per_step_accepted must be a list"),
    ],
)
def test_server_arrays_are_validated(spec, message):
    with pytest.raises(ValueError, match=message):
        steps_from_server(spec, 10)


def test_chunks_estimate_steps():
    est = steps_from_chunks([1, 3, 1, 5, 2], k=3)
    assert est.source == "estimate"
    assert est.accepted == (2, 0, 3, 1)  # the 5-token chunk is clamped to k=3 accepted
    assert est.drafted == (3, 3, 3, 3)
    assert est.output_tokens == 12
    assert est.undrafted_steps == 1  # the token the clamp dropped
    assert est.acceptance_length == pytest.approx(2.5)


def test_chunks_first_chunk_extras_are_a_step_and_empty_chunks_none():
    assert steps_from_chunks([3, 2], k=4).accepted == (1, 1)  # prefill token + a 2-token step, then 2 tokens
    est = steps_from_chunks([1, 0, 2, 0], k=2)
    assert (est.accepted, est.output_tokens) == ((1,), 3)
    assert steps_from_chunks([1], k=2).accepted == ()
    with pytest.raises(ValueError, match="k must be"):
        steps_from_chunks([1, 2], k=0)


# --- distributions ----------------------------------------------------------------


def test_percentiles_by_hand():
    p = Percentiles.of([5, 1, 4, 2, 3])
    # linear: p5 at rank 0.2 -> 1.2, p10 -> 1.4, p95 at rank 3.8 -> 4.8; population std sqrt(2)
    assert (p.p5, p.p10, p.p25, p.p50, p.p75, p.p95) == pytest.approx((1.2, 1.4, 2, 3, 4, 4.8))
    assert (p.mean, p.std, p.count) == pytest.approx((3.0, math.sqrt(2), 5))


def test_percentiles_of_nothing_are_nan():
    p = Percentiles.of([])
    assert p.count == 0
    assert all(math.isnan(getattr(p, f)) for f in ("p5", "p10", "p25", "p50", "p75", "p95", "mean", "std"))


def test_request_length_distribution_skips_undrafted_requests():
    dist, skipped = request_length_distribution([R1, R2, R3])
    assert skipped == 1
    # lengths 2.5 and 1.0: p5 = 1 + 0.05 * 1.5, p50 = mean = 1.75, std 0.75
    assert (dist.p5, dist.p50, dist.p95, dist.mean, dist.std, dist.count) == pytest.approx(
        (1.075, 1.75, 2.425, 1.75, 0.75, 2)
    )


# --- acceptance_by_position ---------------------------------------------------------


def test_bins_of_one_request_with_empty_bins_nan():
    table = acceptance_by_position([R1], bins=10)
    assert list(table) == ["all"]
    same(table["all"], [4, NAN, NAN, NAN, 1, 3, NAN, NAN, 2, NAN])
    same(acceptance_by_position([R1], bins=4)["all"], [4, 1, 3, 2])


def test_bins_pool_requests_of_similar_length():
    r4 = RequestSteps((2, 0), (2, 2), 10, "server")  # starts at 0 and 3/4; 12/10 <= 1.5: one class
    table = acceptance_by_position([R1, r4, R3], bins=2)
    assert list(table) == ["all"]
    same(table["all"], [(4 + 1 + 3) / 3, (3 + 2 + 1) / 3])


def test_bins_split_by_length_class():
    table = acceptance_by_position([R1, R2], bins=4)  # 12 vs 5 tokens: 2.4 > 1.5
    assert list(table) == ["5 tokens", "12 tokens"]
    same(table["5 tokens"], [1, NAN, 1, NAN])
    same(table["12 tokens"], [4, 1, 3, 2])
    assert list(acceptance_by_position([R1, R2], bins=4, classes=1)) == ["all"]


def test_length_classes_are_quartiles():
    requests = [RequestSteps((1,), (2,), n, "server") for n in (88, 10, 12, 20, 22, 40, 44, 80)]
    table = acceptance_by_position(requests, bins=2)
    assert list(table) == ["10-12 tokens", "20-22 tokens", "40-44 tokens", "80-88 tokens"]
    same(table["10-12 tokens"], [2, NAN])
    # a length on a quartile (20, 30, 40) opens the class above it: [q_i, q_i+1), the last one closed
    fives = [RequestSteps((1,), (2,), n, "server") for n in (10, 20, 30, 40, 50)]
    assert list(acceptance_by_position(fives, bins=2)) == ["10 tokens", "20 tokens", "30 tokens", "40-50 tokens"]


def test_bins_without_any_drafted_step_are_nan():
    same(acceptance_by_position([R3], bins=3)["all"], [NAN, NAN, NAN])
    with pytest.raises(ValueError, match="bins"):
        acceptance_by_position([R1], bins=0)


# --- per_position_rates -----------------------------------------------------------


def test_per_position_rates_count_only_steps_that_drafted_the_position():
    # steps (a, d): (3,3) (0,3) (2,3) (1,3) (0,3) (0,2)
    # i=0: a>0 3 of 6; i=1: 2 of 6; i=2: 1 of the 5 that drafted 3 (vLLM's counter would say 1/6)
    same(per_position_rates([R1, R2, R3], k=3), [0.5, 1 / 3, 0.2])
    same(per_position_rates([R1, R2], k=4), [0.5, 1 / 3, 0.2, NAN])  # nobody drafted position 3
    same(per_position_rates([R3], k=2), [NAN, NAN])


# --- step-cost model --------------------------------------------------------------

# R1 + R2 + R3: D = 6 drafted steps, T_d = 12 tokens, U = 6 undrafted steps.
# t_ref = 10, t_k = 16  ->  sd_decode = 6 * 16 + 6 * 10 = 156; prefill 40.
TIMING = StepTiming(reference_step_ms=10.0, sd_decode_ms=156.0, sd_prefill_ms=40.0, k=3)
REQUESTS = [R1, R2, R3]


def test_predictions_by_hand_prefer_a_smaller_k():
    pred = predict_speedups(REQUESTS, TIMING, 1.2)
    assert list(pred) == [1, 2, 3]
    assert pred[3] == 1.2  # k' = k reproduces the measurement exactly
    # One k: t(j) = 10 + 2j.  Spans (R1's first step accepted all 3, so it joins the next): 5, 3, 2, 1, 1.
    # time(3) = 40 + 60 + 6 * 16 = 196 (ceil(5/4) + 1 + 1 + 1 + 1 = 6 steps: the run's own)
    # k'=2: ceil(5/3) + 4 = 6 steps of 14 ms -> 184;  k'=1: 3 + 2 + 1 + 1 + 1 = 8 steps of 12 ms -> 196
    assert pred[1] == pytest.approx(1.2)
    assert pred[2] == pytest.approx(1.2 * 196 / 184)
    assert best_k(pred) == 2


def test_full_acceptance_prefers_the_measured_k():
    request = RequestSteps((3, 3, 3, 3), (3, 3, 3, 3), 17, "server")  # one span of 16 tokens in 4 steps, U = 0
    timing = StepTiming(10.0, 64.0, 0.0, 3)  # t_k = 16
    pred = predict_speedups([request], timing, 2.0)
    # k'=2: ceil(16/3) = 6 steps of 14 ms; k'=1: 8 steps of 12 ms
    assert pred[2] == pytest.approx(2.0 * 64 / (6 * 14))
    assert pred[1] == pytest.approx(2.0 * 64 / 96)
    assert best_k(pred) == 3
    assert oracle_speedup([request], timing, 2.0) == pytest.approx(2.0)  # every step proposed k anyway


def test_oracle_beats_every_fixed_k_when_drafting_costs():
    # costs 10 + 2a: 16 + 10 + 14 + 12 + 10 + 10 = 72 -> time 100 + 72
    oracle = oracle_speedup(REQUESTS, TIMING, 1.2)
    assert oracle == pytest.approx(1.2 * 196 / 172)
    assert all(oracle > s for s in predict_speedups(REQUESTS, TIMING, 1.2).values())


def test_best_k_ties_and_nan():
    assert best_k({1: 1.5, 2: 1.5, 3: 1.4}) == 1
    assert best_k({1: 1.0, 2: 1.1, 3: NAN}) == 2
    assert best_k({1: NAN, 2: NAN}) is None
    assert best_k({}) is None


@pytest.mark.parametrize(
    "requests, timing, measured, reason",
    [
        ([R3], TIMING, 1.2, "no request had a drafted step"),
        (REQUESTS, StepTiming(NAN, 156.0, 40.0, 3), 1.2, "reference decode time per token"),
        (REQUESTS, StepTiming(10.0, 156.0, -1.0, 3), 1.2, "prefill"),
        (REQUESTS, TIMING, 0.0, "measured speedup"),
        (REQUESTS, TIMING, NAN, "measured speedup"),
        (REQUESTS, StepTiming(10.0, 60.0, 40.0, 3), 1.2, "6 undrafted steps"),  # 6 * 10 = the whole decode time
        (REQUESTS, StepTiming(10.0, 156.0, 40.0, 2), 1.2, "accepted 3 tokens, more than k=2"),
        # t_k = (114 - 60) / 6 = 9 ms, below the 10 ms plain step it contains: c would be rejected, and so is this
        (REQUESTS, StepTiming(10.0, 114.0, 40.0, 3), 1.2, "the drafted step timed 9 ms, faster than"),
    ],
)
def test_unpredictable_inputs_give_nan_and_a_reason(requests, timing, measured, reason):
    assert reason in why_no_prediction(requests, timing, measured)
    pred = predict_speedups(requests, timing, measured)
    assert list(pred) == list(range(1, timing.k + 1)) and all(math.isnan(s) for s in pred.values())
    assert math.isnan(oracle_speedup(requests, timing, measured))


def test_predictable_inputs_have_no_reason():
    assert why_no_prediction(REQUESTS, TIMING, 1.2) is None


def test_step_timing_needs_a_k():
    with pytest.raises(ValueError, match="k must be"):
        StepTiming(10.0, 100.0, 0.0, 0)


# --- compare_estimate -------------------------------------------------------------


def test_compare_estimate_with_server_steps():
    est = steps_from_chunks([1, 4, 2, 3], k=3)  # accepted 3, 1, 2 -> length 3.0
    cmp = compare_estimate(R1, est)
    assert cmp["server_acceptance_length"] == pytest.approx(2.5)
    assert cmp["estimate_acceptance_length"] == pytest.approx(3.0)
    assert cmp["acceptance_length_difference"] == pytest.approx(0.5)
    assert cmp["steps_compared"] == 3
    assert cmp["step_agreement"] == pytest.approx(2 / 3)  # (3,3) (0,1) (2,2)
    empty = compare_estimate(R1, steps_from_chunks([1], k=3))
    assert empty["steps_compared"] == 0
    assert math.isnan(empty["step_agreement"]) and math.isnan(empty["acceptance_length_difference"])


def test_server_without_arrays_and_without_steps_gives_zero_steps():
    empty = steps_from_server({"num_spec_steps": 0, "num_draft_tokens": 0, "num_spec_tokens": 3}, 1)
    assert empty.accepted == () and empty.source == "server" and math.isnan(empty.acceptance_length)
    # summary level: steps taken but no arrays sent, so no per-step data
    assert steps_from_server({"num_spec_steps": 5, "num_draft_tokens": 15, "num_spec_tokens": 3}, 9) is None
