"""Predictions against traces generated with the structure of the study's recorded data, values by hand.

"Speculative Decoding: Performance or Illusion?" records, per output position, how many tokens a step starting
there produces (up to 21 with 20 drafted); along a span the count falls by one per position.  TRACE below is
one request of 11 output tokens after the prefill's: a span of 9 tokens, then one of 2.  `simulate` steps it
the way the study's method does at batch size 1 (a step proposing j tokens produces min(span, j + 1)) with a
step cost t(j) = T_REF + fixed + per_token * j, and gives what the plugin reads from a vLLM run: each drafted
step's accepted and drafted counts, and the decode time.
"""

import math

import pytest

from pytest_specdec.analysis.acceptance import RequestSteps, StepTiming, why_no_prediction
from pytest_specdec.analysis.predictions import oracle_label, oracle_speedup, predict_speedups, spans
from pytest_specdec.analysis.step_cost import ONE_K, TWO_K, StepCost, fit_step_cost

T_REF = 10.0
# Positions after the prefill's token: 9 8 7 6 5 4 3 2 1 | 2 1
TRACE = [9, 8, 7, 6, 5, 4, 3, 2, 1, 2, 1]


def simulate(trace, k, fixed=0.0, per_token=2.0, oracle=False):
    """(RequestSteps, decode ms) of a run at draft length k (or the oracle: each step proposes its span)."""
    position, accepted, drafted, decode = 0, [], [], 0.0
    while position < len(trace):
        span = trace[position]
        proposed = span - 1 if oracle else k
        produced = min(span, proposed + 1)
        decode += T_REF + (fixed + per_token * proposed if proposed else 0.0)
        accepted.append(produced - 1)
        drafted.append(proposed)
        position += produced
    return RequestSteps(tuple(accepted), tuple(drafted), len(trace) + 1, "server"), decode


REFERENCE_MS = T_REF * len(TRACE)  # the reference: one plain step per token


def run_at(k, **cost):
    steps, decode = simulate(TRACE, k, **cost)
    return steps, StepTiming(T_REF, decode, 0.0, k), REFERENCE_MS / decode


# --- cause 1: a span cut at k continues ---------------------------------------------------------


def test_a_step_that_accepted_all_k_continues_its_span():
    steps, _, _ = run_at(3)
    # k=3: 9 -> 4 tokens (all 3 accepted), 5 -> 4 (all 3), 1 -> 1, 2 -> 2: spans of 9 and 2 tokens again
    assert steps.accepted == (3, 3, 0, 1)
    assert spans(steps, 3) == [9, 2]
    # A step that drafted fewer than k and accepted them all was stopped by the drafter: its span ends there.
    assert spans(RequestSteps((2, 3, 1), (2, 3, 3), 9, "server"), 3) == [3, 6]


@pytest.mark.parametrize("shorter", [1, 2])
def test_predictions_at_a_shorter_k_count_the_steps_a_cut_span_takes(shorter):
    steps, timing, measured = run_at(3)
    # k=3: 4 steps of 16 ms = 64 ms.  k'=1: ceil(9/2) + ceil(2/2) = 6 steps of 12 ms = 72 ms;
    # k'=2: ceil(9/3) + ceil(2/3) = 4 steps of 14 ms = 56 ms.  Stepping the trace at k' gives the same steps.
    by_hand = {1: REFERENCE_MS / 72, 2: REFERENCE_MS / 56}
    predicted = predict_speedups([steps], timing, measured)
    assert predicted[shorter] == pytest.approx(by_hand[shorter])
    assert predicted[shorter] == pytest.approx(run_at(shorter)[2])
    # Taking the cut span for a fresh average step instead: 11 tokens / mean(min(a, 1) + 1) = 11 / 1.75 steps.
    assert predicted[1] > REFERENCE_MS / (11 / 1.75 * 12) * 1.04


def test_nothing_is_predicted_past_the_run_k():
    steps, timing, measured = run_at(3)
    assert list(predict_speedups([steps], timing, measured)) == [1, 2, 3]


# --- cause 2: a step's cost has a fixed part ----------------------------------------------------


def test_runs_at_two_k_fit_the_fixed_and_the_per_token_part():
    # An EAGLE-like drafter: 3 ms per drafted step plus 0.5 ms per proposed token.
    runs = {k: run_at(k, fixed=3.0, per_token=0.5) for k in (3, 6)}
    drafted_ms = {3: 14.5, 6: 16.0}  # t(3) = 10 + 3 + 1.5, t(6) = 10 + 3 + 3
    for k, (steps, timing, _) in runs.items():
        assert timing.sd_decode_ms / len(steps.accepted) == pytest.approx(drafted_ms[k])
    cost = fit_step_cost(T_REF, drafted_ms, drafter_always_runs=True)
    assert (cost.fixed_ms, cost.per_token_ms, cost.fitted_from) == (pytest.approx(3.0), pytest.approx(0.5), TWO_K)
    assert cost.label.startswith("fitted from runs at k=3, 6: 3 ms per drafted step plus 0.5 ms per proposed token")
    steps, timing, measured = runs[3]
    # k'=1 from the k=3 run: 6 steps of t(1) = 13.5 ms = 81 ms, as stepping the trace at k=1 gives.
    assert predict_speedups([steps], timing, measured, cost)[1] == pytest.approx(REFERENCE_MS / 81)
    assert predict_speedups([steps], timing, measured, cost)[1] == pytest.approx(run_at(1, fixed=3.0, per_token=0.5)[2])


def test_one_k_cannot_split_the_cost_and_says_what_it_assumed():
    steps, timing, measured = run_at(3, fixed=3.0, per_token=0.5)
    alone = fit_step_cost(T_REF, {3: 14.5})
    assert (alone.fixed_ms, alone.per_token_ms, alone.fitted_from) == (0.0, pytest.approx(1.5), ONE_K)
    assert "one k cannot split it into a fixed and a per-token part" in alone.label
    # k'=1 then costs 11.5 ms a step, not 13.5: 6 steps = 69 ms, a prediction 17% high, labelled as assumed.
    assert predict_speedups([steps], timing, measured)[1] == pytest.approx(REFERENCE_MS / 69)
    # c keeps its definition at the run's k: (t_k - t_ref) / (k t_ref) = 4.5 / 30, whichever fit.
    assert alone.cost_ratio_at(3) == pytest.approx(0.15)
    assert fit_step_cost(T_REF, {3: 14.5, 6: 16.0}).cost_ratio_at(3) == pytest.approx(0.15)


def test_a_negative_part_is_noise_and_the_fit_is_redone_without_it():
    # The extra falls with k: no per-token part, the fixed part is the mean extra.
    falling = fit_step_cost(T_REF, {2: 14.0, 4: 13.0})
    assert (falling.fixed_ms, falling.per_token_ms) == (pytest.approx(3.5), 0.0)
    # The line through the points would have a negative fixed part: per-token only, least squares through 0.
    steep = fit_step_cost(T_REF, {1: 10.5, 3: 16.5})
    assert steep.fixed_ms == 0.0 and steep.per_token_ms == pytest.approx((0.5 + 3 * 6.5) / 10)
    # A drafted step faster than the plain one it contains is no point at all.
    assert fit_step_cost(T_REF, {3: 9.0}) is None


def test_a_drafted_step_faster_than_the_plain_one_leaves_predictions_unavailable():
    steps, _, _ = run_at(3)
    fast = StepTiming(T_REF, 36.0, 0.0, 3)  # 4 drafted steps in 36 ms: 9 ms each, under the 10 ms plain step
    assert "faster than the reference's plain decode step" in why_no_prediction([steps], fast, 1.2)
    assert all(math.isnan(v) for v in predict_speedups([steps], fast, 1.2).values())
    assert math.isnan(oracle_speedup([steps], fast, 1.2))


# --- cause 3: the oracle the study means -----------------------------------------------------------


def test_the_oracle_from_a_run_at_k20_is_the_studys():
    steps, timing, measured = run_at(20, fixed=3.0, per_token=0.5)
    assert steps.accepted == (8, 1)  # spans of 9 and 2: nothing is cut at k=20
    cost = fit_step_cost(T_REF, {20: timing.sd_decode_ms / 2, 3: 14.5}, drafter_always_runs=True)
    oracle_steps, oracle_ms = simulate(TRACE, 20, fixed=3.0, per_token=0.5, oracle=True)
    assert oracle_speedup([steps], timing, measured, cost) == pytest.approx(REFERENCE_MS / oracle_ms)
    # by hand: t(8) + t(1) = 10 + 3 + 4 + 10 + 3 + 0.5 = 30.5 ms
    assert oracle_ms == pytest.approx(30.5)
    assert oracle_label(20).startswith('the oracle of "Speculative Decoding: Performance or Illusion?"')
    # From a run at k=3 it is the oracle at k, never called the study's, and it is below it here.
    at3, timing3, measured3 = run_at(3, fixed=3.0, per_token=0.5)
    assert oracle_speedup([at3], timing3, measured3, cost) < REFERENCE_MS / oracle_ms
    assert oracle_label(3).startswith("oracle at k=3:") and "not the study's oracle" in oracle_label(3)


def test_a_model_drafter_pays_its_fixed_part_on_a_step_that_proposes_nothing():
    model = StepCost(T_REF, 3.0, 0.5, TWO_K, "", drafter_always_runs=True)
    lookup = StepCost(T_REF, 3.0, 0.5, TWO_K, "", drafter_always_runs=False)
    assert (model.ms(0), lookup.ms(0), model.ms(2)) == (13.0, 10.0, 14.0)


# --- cause 4: per-request acceptance length is tokens per drafted step, not the study's per position ---


def test_per_request_acceptance_length_is_per_drafted_step_not_per_position():
    steps, _, _ = run_at(3)
    # The plugin's (vLLM's): 1 + mean accepted over the steps the run took = 1 + 7/4.
    assert steps.acceptance_length == pytest.approx(2.75)
    # The study's Fig. 6 / Table 4 average every output position, drafted with 20: (45 + 3) / 11 = 4.36.
    assert sum(TRACE) / len(TRACE) == pytest.approx(4.3636, abs=1e-4)


def test_a_free_draft_is_predicted_not_refused():
    # t_k equal to t_ref (c = 0), solved back from a decode time with float error: fewer steps only win.
    steps, _, _ = run_at(3)
    timing = StepTiming(T_REF * 1.1, 4 * T_REF * 1.1, 0.0, 3)
    assert why_no_prediction([steps], timing, 1.2) is None
    predicted = predict_speedups([steps], timing, 1.2)
    assert predicted[1] == pytest.approx(1.2 * 4 / 6) and predicted[2] == pytest.approx(1.2)  # 6, 4 and 4 steps
    assert fit_step_cost(T_REF * 1.1, {3: 4 * T_REF * 1.1 / 4}).per_token_ms == 0.0
