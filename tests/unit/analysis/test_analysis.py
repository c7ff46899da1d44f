"""A result's per-request analyses end to end: per-step data from the server or the chunk estimate,
the figures on the result, the checks, the gate, the report rows, the summary and the plots.

The numbers are hand-computed.  Four SD requests of 6 output tokens each take
four drafted steps accepting 1, 0, 0, 0 of k=4 drafts (the first token comes
from the prefill, so 1 + 2 + 1 + 1 + 1 = 6); a reference step costs 20 ms, an
SD step 40 ms, every TTFT is 50 ms.  Then (acceptance.py's model):
t(k') = 20 + 5 k' ms, each drafted step yields 1.25 tokens whatever k',
SD time per request 50 + 4 t(k'): 210 ms at k=4, 150 ms at k'=1, so the
prediction at k'=1 is 210/150 = 1.4 times the measured speedup; the oracle
costs 25 + 20 + 20 + 20 = 85 ms of steps: 210/135.  Leviathan's c from the
same step times: (40 - 20) / (4 * 20) = 0.25, so a drafted step costs
1 + 4 * 0.25 = 2 plain steps for 1.25 tokens: expected 1.25 / 2 = 0.625x, the
decode speedup itself (20 ms / (160 ms / 5 tokens)).
"""

import math

import pytest

from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.engines.counters import SpecDecodeCounters
from pytest_specdec.analysis.metrics import summarize
from pytest_specdec.measure.result import Run, SpecDecResult, compare_outputs
from pytest_specdec.report.plots import write_plots
from pytest_specdec.report.row.rows import row_for
from pytest_specdec.report.tables import markdown_summary, terminal_table
from pytest_specdec.verdict.gate.baselines import Baseline, write_baseline
from pytest_specdec.verdict.gate import BaselineSession, RegressionGate

SPEC = ServerSpec("m", {"method": "ngram", "num_speculative_tokens": 4})
ACCEPTED = [1, 0, 0, 0]
SERVER_METRICS = {
    "per_step_accepted": ACCEPTED,
    "per_step_drafted": [4, 4, 4, 4],
    "num_spec_tokens": 4,
    "mean_acceptance_length": 1.25,
}
CHUNKS = [1, 2, 1, 1, 1]  # the prefill token, then one chunk per step: a + 1 tokens


class Rec:
    def __init__(self, index, *, step_ms, spec_decoding=None, chunk_tokens=(), tokens=6):
        self.index, self.prompt_len, self.output_tokens = index, 16, tokens
        self.ttft = 0.05
        self.latency = self.ttft + step_ms / 1000 * (4 if spec_decoding is not None or chunk_tokens else tokens - 1)
        self.itl = [0.01] * (tokens - 1)
        self.token_ids, self.text, self.top_logprobs, self.success = list(range(tokens)), "x", None, True
        self.spec_decoding, self.chunk_tokens = spec_decoding, list(chunk_tokens)


def make_result(*, server=True, chunks=True, spec=SPEC, sd_step_ms=40):
    k = spec.speculative_config["num_speculative_tokens"]
    reported = {**SERVER_METRICS, "per_step_drafted": [k] * 4, "num_spec_tokens": k}
    reference = [Rec(i, step_ms=20) for i in range(4)]
    speculative = [
        Rec(
            i,
            step_ms=sd_step_ms,
            spec_decoding=dict(reported) if server else None,
            chunk_tokens=CHUNKS if chunks else (),
        )
        for i in range(4)
    ]
    counters = SpecDecodeCounters(16, 16 * k, 4, {0: 4, **{i: 0 for i in range(1, k)}})
    ref_run = Run(spec.reference(), 0, summarize(reference, 1.0), reference, None, ["vllm"], 0.0)
    sd_run = Run(spec, 0, summarize(speculative, 1.0), speculative, counters, ["vllm"], 0.0)
    outputs = compare_outputs(reference, speculative)
    return SpecDecResult(
        spec,
        {"name": "code_edit"},
        {"name": "throughput_low"},
        [ref_run],
        [sd_run],
        outputs,
        {},
        outputs_per_repeat=[outputs],
        cost_ratio=0.0,
    )


def test_the_servers_arrays_give_every_figure_and_the_estimate_agrees_with_them():
    result = make_result()
    analysis = result.analysis()
    assert analysis.source == "server" and not analysis.estimated
    assert analysis.request_lengths.p50 == pytest.approx(1.25) and analysis.request_lengths.count == 4
    assert analysis.per_position == pytest.approx([0.25, 0.0, 0.0, 0.0])
    assert result.speedup() == pytest.approx(1.0)  # same tokens over the same duration
    assert analysis.predictions[4] == pytest.approx(1.0)  # the measurement itself
    assert analysis.predictions[1] == pytest.approx(210 / 150)
    assert analysis.best_k == 1
    assert analysis.oracle_speedup == pytest.approx(210 / 135)
    assert analysis.estimate_check["step_agreement_p50"] == pytest.approx(1.0)
    assert analysis.estimate_check["requests"] == 4


def test_without_the_servers_arrays_the_chunk_estimate_is_used_and_labelled():
    result = make_result(server=False)
    analysis = result.analysis()
    assert analysis.source == "estimate" and analysis.estimated
    assert analysis.best_k == 1 and analysis.estimate_check is None
    row = row_for("t.py::test", SPEC, result.workload, result.pattern, outcome="passed", result=result)
    assert row["per_step_source"] == "estimate" and row["per_request"]["estimated"] is True
    assert "~1" in terminal_table([row], full=True)[2]  # the table marks an estimated best k


def test_no_per_step_data_leaves_the_figures_unavailable_and_the_checks_failing():
    result = make_result(server=False, chunks=False)
    assert "no per-step data" in result.unavailable("request_acceptance_length_p10")
    assert math.isnan(result.analysis().figure("best_k"))
    with pytest.raises(AssertionError, match="request_acceptance_length_p10: unavailable: no per-step data"):
        result.assert_acceptance(min_request_p10_length=1.1)
    with pytest.raises(AssertionError, match="best_k: unavailable"):
        result.assert_best_k(1)


def test_assert_acceptance_on_per_request_lengths():
    result = make_result()
    result.assert_acceptance(min_request_p10_length=1.2, min_request_p50_length=1.25)
    with pytest.raises(AssertionError) as failure:
        result.assert_acceptance(min_request_p10_length=1.5)
    assert "request_acceptance_length_p10" in str(failure.value) and "p50 1.25" in str(failure.value)
    with pytest.raises(ValueError, match="length in tokens per step"):
        result.assert_acceptance(min_request_p50_length=0.5)


def test_assert_best_k_takes_one_k_or_a_set():
    result = make_result()
    result.assert_best_k(1)
    result.assert_best_k({1, 2})
    with pytest.raises(AssertionError, match=r"(?s)is k=1, not 3.*k=1: 1\.40x.*k=4: 1\.00x"):
        result.assert_best_k(3)
    with pytest.raises(ValueError):
        result.assert_best_k(0)


def test_a_failed_speedup_says_why_sd_did_not_pay_with_the_figures():
    result = make_result()
    with pytest.raises(AssertionError) as failure:
        result.assert_speedup(min=1.2)
    message = str(failure.value)
    assert "why SD did not pay:" in message
    # L = 1.25 is under the break-even 1 + 4 * 0.25 = 2 at the measured c: expected 1.25 / 2 = 0.625x.
    assert (
        "low_acceptance: acceptance length 1.25 tokens per drafted step (6% of drafts accepted), not above the "
        "break-even 1 + k·c = 2.000 (k=4, c 0.25 measured): expected 0.625x"
    ) in message
    # Rates .25 0 0 0: k=1 gives 1.25 / 1.25 = 1.000x; positions 2..4 are under c * 1.25 / (1 + (j-1) c):
    # 25%, 21%, 18%.
    assert (
        "acceptance_collapse: positions 2..4 accept 0%, 0%, 0%, under their break-evens 25%, 21%, 18% "
        "(c·E_(j-1) / (1 + (j-1)·c), c 0.25 measured): k=1 raises the expected speedup from 0.625x to 1.000x; "
        "the step times predict best k=1 (1.40x)"
    ) in message
    # c measured from these step times accounts for the decode time: no shortfall left to blame on verification.
    assert "verification_cost" not in message


def test_per_repeat_figures_reach_the_baseline_and_the_gate_holds_best_k_exactly(tmp_path):
    result = make_result()
    derived = result.repeats()[0]["derived"]
    assert derived["best_k"] == 1 and derived["request_acceptance_length_p50"] == pytest.approx(1.25)
    fingerprint = {
        "engine": "vllm",
        "engine_version": "0.32.0",
        "device_kind": "cpu",
        "device_name": "x",
        "device_count": 2,
        "driver": None,
        "torch_version": "2.13.0",
    }
    config = {
        "spec": {"model": "m", "speculative_config": None, "server_args": [], "tensor_parallel_size": 1},
        "workload": {},
        "pattern": {},
        "seed": 0,
        "repeat_seeds": [0],
    }
    for stored, fails in ((1.0, False), (2.0, True)):
        write_baseline(
            tmp_path,
            Baseline(
                "t.py::test",
                fingerprint,
                config,
                [{"reference": {}, "speculative": {}, "derived": {**derived, "best_k": stored}}],
                {},
            ),
        )
        result.gate = RegressionGate(BaselineSession(tmp_path, update=False, fingerprint=fingerprint), "t.py::test")
        if fails:
            with pytest.raises(AssertionError, match=r"best_k\s+2\.000\s+1\.000"):
                result.assert_no_regression(metrics=["best_k", "request_acceptance_length_p50"])
        else:
            result.assert_no_regression(metrics=["best_k", "request_acceptance_length_p50"])


def test_rows_summary_and_plots_carry_the_analyses(tmp_path):
    result = make_result()
    row = row_for("t.py::test", SPEC, result.workload, result.pattern, outcome="passed", result=result)
    assert row["best_k"] == 1 and row["oracle_speedup"] == pytest.approx(210 / 135)
    assert row["request_acceptance_length_p50"] == pytest.approx(1.25)
    assert {c["name"] for c in row["diagnosis"]} >= {"low_acceptance", "acceptance_collapse"}
    slow = dict(row, speedup_output_throughput=0.8)
    summary = markdown_summary([slow])
    assert "**Inside the acceptance numbers**" in summary and "| server (4 requests) |" in summary
    assert "**Why SD did not pay**" in summary and "low_acceptance: acceptance length 1.25" in summary
    assert "| 0.80x | 0.62x | 1.56x | +94% |" in summary  # measured, expected (0.625), oracle at k (210/135), gap
    assert "| measured | expected | oracle | oracle gap |" in summary and "the oracle at k, spans cut at k" in summary
    assert row["cost_ratio"] == pytest.approx(0.25) and row["cost_ratio_source"] == "measured"
    assert row["per_request"]["oracle"].startswith("oracle at k=4:") and row["oracle_speedup_label"].startswith(
        "oracle at k=4"
    )
    assert row["per_request"]["step_cost"].startswith("one run at k=4:")
    names = [p.name for p in write_plots([row], tmp_path)]
    assert "request_acceptance_length.png" in names and "tokens_per_step.png" in names


def test_a_repeats_predictions_and_oracle_scale_that_repeats_speedup():
    # Repeat 2's SD run took twice as long: its speedup is 0.5, and its oracle bound is 0.5 x 210/135,
    # not the median over repeats times that (which could put the "bound" below the measurement).
    result = make_result()
    ref, sd = result.reference_runs[0], result.speculative_runs[0]
    result.reference_runs.append(Run(ref.spec, 1, ref.metrics, ref.records, None, ["vllm"], 0.0))
    result.speculative_runs.append(Run(sd.spec, 1, summarize(sd.records, 2.0), sd.records, sd.counters, ["vllm"], 0.0))
    result.outputs_per_repeat.append(result.outputs)
    assert result.repeat_speedups() == pytest.approx([1.0, 0.5])
    assert result.analysis(repeat=0).oracle_speedup == pytest.approx(210 / 135)
    assert result.analysis(repeat=1).oracle_speedup == pytest.approx(0.5 * 210 / 135)
    assert result.analysis(repeat=1).predictions[1] == pytest.approx(0.5 * 210 / 150)
    assert [entry["derived"]["oracle_speedup"] for entry in result.repeats()] == pytest.approx(
        [210 / 135, 0.5 * 210 / 135]
    )


def test_a_request_that_never_reached_a_verify_step_keeps_the_servers_source():
    # vLLM 0.32 leaves out empty per-step arrays; num_spec_steps 0 says there were none.
    result = make_result()
    short = result.speculative_runs[0].records[0]
    short.spec_decoding = {
        "num_spec_steps": 0,
        "num_draft_tokens": 0,
        "num_spec_tokens": 4,
        "mean_acceptance_length": 1.0,
        "acceptance_histogram": [0, 0, 0, 0, 0],
    }
    analysis = result.analysis()
    assert analysis.source == "server" and analysis.request_lengths.count == 3
    assert analysis.requests_without_steps == 1


def test_a_sweep_level_names_speedup_falling_with_concurrency():
    from pytest_specdec.measure.sweep import SweepResult

    low, high = make_result(), make_result()
    low.pattern, high.pattern = {"name": "c1", "max_concurrency": 1}, {"name": "c25", "max_concurrency": 25}
    high.speculative_runs[0].metrics = summarize(high.speculative_runs[0].records, 1.6)  # 0.625x at 25
    sweep = SweepResult([low, high])
    for result in sweep.results:  # as SpecDecTest.sweep does
        result.sweep_speedups = sweep.speedups()
    with pytest.raises(
        AssertionError,
        match=r"high_concurrency: speedup 1\.00x at concurrency 1 falls to 0\.62x "
        r"at concurrency 25",
    ):
        high.assert_speedup(min=1.0)
    row = row_for("t.py::test[c25]", SPEC, high.workload, high.pattern, outcome="failed", result=high)
    assert "high_concurrency" in {c["name"] for c in row["diagnosis"]}
    assert "high_concurrency" in markdown_summary([row])


def test_exports_say_whether_the_per_step_figures_are_estimated():
    from pytest_specdec.report.exports import junit_properties

    assert junit_properties(make_result())["specdec_per_step_source"] == "server"
    assert junit_properties(make_result(server=False))["specdec_per_step_source"] == "estimate"
    assert junit_properties(make_result(server=False, chunks=False))["specdec_per_step_source"].startswith(
        "unavailable: no per-step data"
    )


def test_a_run_at_another_k_fits_the_step_costs_fixed_part():
    # The k=4 run's drafted step costs 40 ms, a k=2 run's 35 ms, over a 20 ms plain step: extras 20 and 15 ms,
    # so 10 ms per drafted step plus 2.5 ms per proposed token.  At k'=1 a step then costs 32.5 ms (the k=4 run
    # alone says 25 ms): 50 + 4 * 32.5 = 180 ms per request against 210, so 210/180 times the measured speedup.
    result = make_result()
    alone = result.analysis()
    assert alone.step_cost.startswith("one run at k=4:") and "at concurrency" not in alone.step_cost
    assert alone.predictions[1] == pytest.approx(result.speedup() * 1.4)
    at_two = make_result(spec=ServerSpec("m", {"method": "ngram", "num_speculative_tokens": 2}), sd_step_ms=35)
    fitted = result.fit_step_cost_with(at_two).analysis()
    assert fitted.step_cost.startswith("fitted from runs at k=2, 4: 10 ms per drafted step plus 2.5 ms")
    assert fitted.predictions[1] == pytest.approx(result.speedup() * 210 / 180)
    assert fitted.predictions[4] == pytest.approx(result.speedup())
    # The oracle: steps proposing 1, 0, 0, 0 cost 32.5 + 3 * 20 (an n-gram lookup that proposes nothing is a
    # plain step): 50 + 92.5 ms against 210.
    assert fitted.oracle_speedup == pytest.approx(result.speedup() * 210 / 142.5)


def test_draft_length_advice_shows_where_sd_paid_too():
    result = make_result()
    row = row_for("t.py::test", SPEC, result.workload, result.pattern, outcome="passed", result=result)
    (collapse,) = [c for c in row["diagnosis"] if c["name"] == "acceptance_collapse"]
    paid = dict(row, speedup_output_throughput=1.3)
    summary = markdown_summary([paid])
    assert "**Why SD did not pay**" not in summary
    assert "**Draft length** (SD paid, and a shorter k is expected to pay more):" in summary
    assert f"- t.py::test (1.30x): {collapse['figure']}" in summary
    from pytest_specdec.report.html_sections import theory_section

    assert "<h3>Draft length</h3>" in "\n".join(theory_section([paid]))


def test_a_run_at_another_k_whose_drafted_step_is_faster_than_its_plain_one_is_left_out_and_named():
    result = make_result()
    faster = make_result(spec=ServerSpec("m", {"method": "ngram", "num_speculative_tokens": 2}), sd_step_ms=15)
    analysis = result.fit_step_cost_with(faster).analysis()
    assert analysis.step_cost.startswith("one run at k=4:")
    assert "the run at k=2 left out: its drafted step did not time above its plain step" in analysis.step_cost


def test_energy_per_token_reaches_the_row_the_summary_and_the_page(tmp_path):
    from pytest_specdec.report.files import validate_report, write_report
    from pytest_specdec.serving.energy import EnergyReading

    result = make_result()
    # 4 requests of 6 tokens a run: 24 tokens; 12 J without SD, 18 J with: 0.5 and 0.75 J per token, 1.5x.
    result.reference_runs[0].energy = EnergyReading(12.0, "RAPL energy of CPU package intel-rapl:0")
    result.speculative_runs[0].energy = EnergyReading(18.0, "RAPL energy of CPU package intel-rapl:0")
    row = row_for("t.py::test", SPEC, result.workload, result.pattern, outcome="passed", result=result)
    assert row["energy"] == {
        "source": "RAPL energy of CPU package intel-rapl:0",
        "reference_j_per_token": 0.5,
        "speculative_j_per_token": 0.75,
        "ratio": 1.5,
        "unavailable": None,
    }
    summary = markdown_summary([row])
    assert "| t.py::test | 0.5 | 0.75 | 1.50x | RAPL energy of CPU package intel-rapl:0 |" in summary
    unread = row_for("t.py::other", SPEC, result.workload, result.pattern, outcome="passed", result=make_result())
    assert unread["energy"]["unavailable"] == "the run's energy was not read"
    assert "- unavailable: the run's energy was not read" in markdown_summary([unread])
    written = write_report(tmp_path, [row, unread])
    validate_report(__import__("json").loads((tmp_path / "results.json").read_text()), "results.json")
    assert '<section id="energy">' in (tmp_path / "report.html").read_text() and written


def test_a_drafted_step_below_the_plain_one_predicts_with_the_fallback_c_and_says_so():
    # The SD server's steps timed 15 ms against the reference's 20 ms plain step: the run's own step cost is
    # rejected, as c is, and the fallback c the theory uses (0, given) costs the steps instead.  With c = 0
    # every step costs 20 ms: the same 4 steps per request at every k (no step accepted all 4), so every
    # prediction and the oracle are the measured speedup.
    result = make_result(sd_step_ms=15)
    analysis = result.analysis()
    assert analysis.prediction_problem is None
    assert "below its plain step of 20 ms" in analysis.step_cost and "the fallback c 0 (given)" in analysis.step_cost
    assert all(v == pytest.approx(result.speedup()) for v in analysis.predictions.values())
    assert analysis.oracle_speedup == pytest.approx(result.speedup())
    # Without a fallback c (none given, and a draft model's default needs its sizes) they are unavailable.
    draft = ServerSpec("m", {"method": "draft_model", "model": "d", "num_speculative_tokens": 4})
    unknown = make_result(spec=draft, sd_step_ms=15)
    unknown.cost_ratio = None
    found = unknown.analysis()
    assert found.best_k is None and "faster than the reference's plain decode step" in found.prediction_problem
