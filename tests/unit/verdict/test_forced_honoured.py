"""Under forced acceptance the engine must honour it (or the test fails by name), and output equivalence is not
applied, with the reason."""

from dataclasses import replace

import pytest

from pytest_specdec.engines.counters import SpecDecodeCounters
from pytest_specdec.engines.forced_acceptance import ForcedAcceptance, honoured_band, honoured_range
from pytest_specdec.engines.server_spec import ServerSpec
from pytest_specdec.measure.result import SpecDecResult, compare_outputs
from pytest_specdec.verdict.assertions import check_forced_acceptance
from tests.support.report_results import PATTERN, WORKLOAD, run

FORCED = ServerSpec(
    "m",
    {
        "method": "draft_model",
        "num_speculative_tokens": 4,
        "model": "m@layers=8",
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_length": 2.5,
    },
)  # on vLLM, which resolves a length to rates the least-variance way


def forced_result(drafts: int, accepted: int) -> SpecDecResult:
    counters = SpecDecodeCounters(drafts, 4 * drafts, accepted, {})
    ref, sd = run(FORCED.reference(), 30.0, 0.030), run(FORCED, 45.0, 0.020, counters, ((1, 9, 9), (4, 9, 9)))
    return SpecDecResult(FORCED, WORKLOAD, PATTERN, [ref], [sd], compare_outputs(ref.records, sd.records), {})


def test_a_server_that_honours_the_forced_length_passes():
    result = forced_result(200, 300)  # 1 + 300/200 = 2.5
    assert result.forced == ForcedAcceptance((1.0, 0.5, 0.0, 0.0), 2.5)
    check_forced_acceptance(result, result.forced)
    check_forced_acceptance(forced_result(200, 320), result.forced)  # 2.6: within 0.15


def test_a_server_that_ignores_it_fails_by_name_with_both_lengths():
    result = forced_result(200, 60)  # its own drafter's 1.3
    with pytest.raises(AssertionError) as failed:
        check_forced_acceptance(result, result.forced)
    message = str(failed.value)
    assert "did not honour the forced acceptance" in message and "1.30 over 200 drafting steps of 2" in message
    assert "forced 2.50" in message and "its vllm build may ignore or lack the setting" in message


def test_a_server_that_drafted_nothing_has_no_length_to_honour_it_with():
    with pytest.raises(AssertionError, match=r"(?s)forced acceptance.*drafted nothing"):
        result = forced_result(0, 0)
        check_forced_acceptance(result, result.forced)


def test_the_band_widens_with_few_steps_and_not_for_a_schedule_without_spread():
    half = ForcedAcceptance((1.0, 0.5, 0.0, 0.0), 2.5)  # one more draft half the time: sd 0.5 a step
    assert honoured_band(half, 10_000) == 0.15
    assert honoured_band(half, 16) == pytest.approx(4 * 0.5 / 4)
    whole = ForcedAcceptance((1.0, 1.0, 0.0, 0.0), 3.0)  # every step accepts exactly two
    assert honoured_band(whole, 4) == 0.15


def test_output_equivalence_is_not_applied_under_forced_acceptance_and_says_why():
    result = forced_result(200, 300)
    why = result.unavailable("match_rate")
    assert why.startswith("not applied at forced acceptance 2.50") and "not the target's" in why
    with pytest.raises(AssertionError, match="not applied at forced acceptance"):
        result.assert_outputs_equivalent()
    unforced = ServerSpec("m", {"method": "draft_model", "num_speculative_tokens": 4, "model": "m@layers=8"})
    assert SpecDecResult(unforced, WORKLOAD, PATTERN, [], [], None, {}).forced is None


def test_the_row_names_the_forced_length_in_both_tables():
    from pytest_specdec.report.row.cells import compact_config
    from pytest_specdec.report.row.parts import sd_label

    row = {"method": "draft_model", "k": 4, "engine": "llamacpp", "speculative_config": dict(FORCED.speculative_config)}
    assert compact_config(row) == "draft_model k=4 forced 2.5 on llamacpp"  # the row's engine, as given
    assert "at forced acceptance 2.50" in sd_label(FORCED)
    assert compact_config({**row, "speculative_config": {"method": "draft_model"}}) == "draft_model k=4 on llamacpp"


def test_each_requests_last_step_may_fall_short_of_the_forced_length_never_above_it():
    every = ForcedAcceptance((1.0, 1.0, 1.0, 1.0), 5.0)  # every draft accepted: 4 a step
    low, high = honoured_range(every, 104, requests=4)  # 4 requests of 64 tokens: each ends on a cut step
    assert high == pytest.approx(5.15) and low == pytest.approx(5.0 - 0.15 - 4 * 4 / 104)
    assert low < 4.85 < high  # measured so on llama.cpp: honoured
    half = ForcedAcceptance((1.0, 0.5, 0.0, 0.0), 2.5)
    assert honoured_range(half, 10_000, requests=4)[0] == pytest.approx(2.5 - 0.15 - 4 * 1.5 / 10_000)
    result = forced_result(200, 300)  # two requests: the cut allows 2 * 1.5 / 200 = 0.015 below the band
    check_forced_acceptance(forced_result(200, 268), result.forced)  # 2.34, just inside 2.335
    with pytest.raises(AssertionError, match="allowed 2.33-2.65"):
        check_forced_acceptance(forced_result(200, 265), result.forced)  # 2.325


def test_a_length_an_engine_resolves_unseen_gets_the_widest_spread_of_its_mean():
    whole = ForcedAcceptance((1.0, 1.0, 0.0, 0.0), 3.0)
    assert honoured_band(whole, 80) == 0.15  # least-variance: two drafts every step, no spread
    # Unknown (llama.cpp's): all four drafts with probability 1/2, else none: sd 2 a step, 4 sd / sqrt(80).
    assert honoured_band(whole, 80, schedule_known=False) == pytest.approx(4 * 2 / 80**0.5)
    rates = ForcedAcceptance((1.0, 1.0, 0.0, 0.0))  # given as rates: the engine's schedule is these
    assert honoured_band(rates, 80, schedule_known=False) == 0.15
    llama = replace(FORCED, engine="llamacpp")
    ref, sd = run(llama.reference(), 30.0, 0.030), run(llama, 45.0, 0.020, SpecDecodeCounters(80, 320, 170, {}))
    result = SpecDecResult(llama, WORKLOAD, PATTERN, [ref], [sd], compare_outputs(ref.records, sd.records), {})
    check_forced_acceptance(result, result.forced)  # 3.125 at a forced 2.5 over 80 steps: inside the wide band
