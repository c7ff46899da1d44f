"""Unavailable is never a pass: counters checked, outputs without token ids, failures in order,
latency speedups the right way round, and what the gate can detect."""

import math
from types import SimpleNamespace

import pytest

from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.engines.counters import CounterError, SpecDecodeCounters, parse_prometheus
from pytest_specdec.engines.vllm import spec_decode_counters
from pytest_specdec.measure.measurements import RunError, check_run
from pytest_specdec.analysis.metrics import summarize
from pytest_specdec.measure.result import Run, SpecDecResult, compare_outputs
from pytest_specdec.report.row.rows import row_for
from pytest_specdec.report.tables import csv_text, terminal_table
from pytest_specdec.verdict.gate.baselines import Baseline
from pytest_specdec.verdict.detection import detection, flag_rate
from pytest_specdec.verdict.gate import BaselineSession, RegressionGate
from pytest_specdec.verdict.stats import compare_samples

URL = "http://10.0.0.7:8000/metrics"
SPEC = ServerSpec("m", {"method": "ngram", "num_speculative_tokens": 4})


def scrape(drafts, tokens, accepted, *, name="m", created=1700000000.0, engine="0"):
    labels = f'engine="{engine}",model_name="{name}"'
    text = "\n".join(
        [
            f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}",
            f"vllm:spec_decode_num_drafts_created{{{labels}}} {created}",
            f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {tokens}",
            f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted}",
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="0"}} {min(accepted, drafts)}',
        ]
    )
    return spec_decode_counters(parse_prometheus(text), ["m", "m-alias"], where=URL)


# --- counters --------------------------------------------------------------------------------


def test_a_checked_delta_of_two_scrapes_of_one_process():
    delta = scrape(150, 600, 300).delta(scrape(100, 400, 200), where=URL)
    assert (delta.num_drafts, delta.num_draft_tokens, delta.num_accepted_tokens) == (50, 200, 100)
    assert delta.acceptance_rate == 0.5 and delta.acceptance_length == 3.0


def test_counters_that_go_backwards_are_an_error_naming_the_endpoint():
    # A restart between scrapes with no creation time exposed: only monotonicity can tell.
    before, after = scrape(1000, 4000, 2000, created=0.0), scrape(50, 200, 150, created=0.0)
    with pytest.raises(
        CounterError,
        match=r"http://10.0.0.7:8000/metrics: SD counters went backwards.*"
        r"num_drafts -950",
    ):
        after.delta(before, where=URL)


def test_another_process_between_scrapes_is_an_error_even_when_counters_grew():
    before, after = scrape(100, 400, 200), scrape(900, 3600, 1900, created=1700003600.0)
    with pytest.raises(CounterError, match="different processes.*restarted, or a load balancer"):
        after.delta(before, where=URL)
    with pytest.raises(CounterError, match="different processes"):
        scrape(150, 600, 300, engine="1").delta(before, where=URL)


def test_counters_match_any_served_name_and_are_unavailable_without_one():
    assert scrape(10, 40, 20, name="m-alias").present  # vLLM labels with the first served name
    missing = scrape(10, 40, 20, name="someone-else")
    assert not missing.present and missing.problem == f"no vllm:spec_decode_* counters for m / m-alias at {URL}"
    assert math.isnan(missing.acceptance_rate)
    assert not (missing - scrape(1, 4, 2)).present  # an unavailable scrape never becomes zero


# --- results and checks -----------------------------------------------------------------------


class Rec:
    def __init__(self, index, token_ids=(1, 2, 3, 4), text=None, tpot_s=0.02, success=True, tokens=None):
        self.index, self.prompt_len = index, 16
        self.output_tokens = len(token_ids) if tokens is None else tokens
        self.ttft, self.itl = 0.05, [tpot_s] * (self.output_tokens - 1)
        self.latency = 0.05 + tpot_s * (self.output_tokens - 1)
        self.token_ids, self.top_logprobs, self.success = list(token_ids), None, success
        self.text = " ".join(map(str, token_ids)) if text is None else text


def make_result(
    counters=SpecDecodeCounters(100, 400, 200, {0: 90, 1: 60, 2: 40, 3: 10}),
    ref_records=None,
    sd_records=None,
    ref_tpot=0.03,
    sd_tpot=0.02,
    repeats=1,
):
    def run(spec, records, tpot, repeat, run_counters):
        records = records or [Rec(i, tpot_s=tpot) for i in range(4)]
        return Run(spec, repeat, summarize(records, duration_s=1.0), records, run_counters, ["vllm"], 0.0)

    reference = [run(SPEC.reference(), ref_records, ref_tpot, r, None) for r in range(repeats)]
    speculative = [run(SPEC, sd_records, sd_tpot, r, counters) for r in range(repeats)]
    outputs = [compare_outputs(a.records, b.records) for a, b in zip(reference, speculative)]
    return SpecDecResult(
        SPEC, {"name": "w"}, {"name": "p"}, reference, speculative, outputs[0], {}, outputs_per_repeat=outputs
    )


def test_lost_counters_fail_assert_acceptance_as_unavailable():
    result = make_result(counters=SpecDecodeCounters.unavailable(f"no vllm:spec_decode_* counters for m at {URL}"))
    assert result.unavailable("acceptance_rate") == f"no vllm:spec_decode_* counters for m at {URL}"
    with pytest.raises(AssertionError, match=r"acceptance_rate: unavailable: no vllm:spec_decode_\* counters"):
        result.assert_acceptance(min_rate=0.0)


def test_without_token_ids_outputs_are_compared_as_text_never_100_percent_by_default():
    ref = [Rec(i, token_ids=(), text=f"same start, reference {i}", tokens=8) for i in range(4)]
    sd = [Rec(i, token_ids=(), text=f"same start, other text {i}", tokens=8) for i in range(4)]
    result = make_result(ref_records=ref, sd_records=sd)
    assert result.outputs.basis == "text" and result.match_rate == 0.0
    same = make_result(ref_records=ref, sd_records=ref)  # 100% by text says so in every report
    row = row_for("t.py::test", SPEC, {"name": "w"}, {"name": "p"}, outcome="passed", result=same)
    assert row["match_basis"] == "text" and "100% as text" in terminal_table([row], full=True)[2]
    assert dict(zip(*[r.split(",") for r in csv_text([row]).splitlines()]))["match_basis"] == "text"
    with pytest.raises(
        AssertionError,
        match=r"(?s)0 of 4 requests identical.*compared as text.*"
        r"first difference at character 12",
    ):
        result.assert_outputs_equivalent(min_match=0.95)
    # Neither ids nor text: unavailable, and the check fails saying so.
    blank = make_result(ref_records=[Rec(i, token_ids=(), text="", tokens=8) for i in range(4)], sd_records=sd)
    assert math.isnan(blank.match_rate) and blank.unavailable("match_rate").startswith("a server sent neither")
    with pytest.raises(AssertionError, match="match_rate: unavailable"):
        blank.assert_outputs_equivalent(min_match=0.0)


def test_equivalence_is_per_repeat():
    result = make_result(repeats=2)
    diverged = [Rec(i, token_ids=(1, 2, 9, 9) if i == 0 else (1, 2, 3, 4)) for i in range(4)]
    result.speculative_runs[1].records[:] = diverged
    result.outputs_per_repeat[1] = compare_outputs(result.reference_runs[1].records, diverged)
    assert [entry["derived"]["match_rate"] for entry in result.repeats()] == [1.0, 0.75]
    assert result.match_rate == 7 / 8


def test_a_speedup_without_a_value_fails_as_unavailable():
    one_token = [Rec(i, token_ids=(7,)) for i in range(4)]  # TPOT needs two tokens
    result = make_result(ref_records=one_token, sd_records=one_token)
    assert "TPOT needs requests with more than one output token" in result.unavailable("speedup_median_tpot")
    with pytest.raises(AssertionError, match="speedup_median_tpot: unavailable"):
        result.assert_speedup(min=1.0, metric="median_tpot_ms")


def test_one_token_outputs_leave_no_blank_and_no_zero_in_the_reports():
    # vllm bench serve writes a TPOT of 0 here; the plugin says "unavailable" and why, everywhere.
    one_token = [Rec(i, token_ids=(7,)) for i in range(4)]
    result = make_result(ref_records=one_token, sd_records=one_token)
    row = row_for("t.py::test", SPEC, {"name": "w"}, {"name": "p"}, outcome="passed", result=result)
    assert row["speculative"]["median_tpot_ms"] is None and row["reference"]["median_tpot_ms"] is None
    assert "more than one output token" in row["unavailable"]["speculative_median_tpot_ms"]
    assert "more than one output token" in row["unavailable"]["speedup_median_tpot"]
    line = dict(zip(*[r.split(",") for r in csv_text([row]).splitlines()]))
    assert line["speculative_median_tpot_ms"] == "unavailable" and line["speedup_median_tpot"] == "unavailable"
    assert "unavailable" in terminal_table([row], full=True)[2]


def one_event(index, tokens=8):
    """A request whose whole output came in one streamed event: TTFT = E2E, no gap to time."""
    record = Rec(index, token_ids=tuple(range(tokens)))
    record.itl, record.latency = [], record.ttft
    return record


def test_outputs_in_one_event_leave_tpot_unavailable_never_zero(tmp_path):
    # vllm bench serve would print a TPOT of 0 ms here: read as infinitely fast, it would pass any gate.
    result = make_result(ref_records=[one_event(i) for i in range(4)], sd_records=[one_event(i) for i in range(4)])
    assert math.isnan(result.speculative_runs[0].metrics.tpot.median)
    assert "streamed in more than one event" in result.unavailable("speedup_median_tpot")
    row = row_for("t.py::test", SPEC, {"name": "w"}, {"name": "p"}, outcome="passed", result=result)
    assert row["speculative"]["median_tpot_ms"] is None and "in one event" in row["unavailable"]["speedup_median_tpot"]
    gate = gate_with_baseline(tmp_path, {"speedup_median_tpot": 1.5})
    result.gate = gate
    with pytest.raises(AssertionError, match=r"(?s)cannot compare.*speedup_median_tpot: unavailable"):
        result.assert_no_regression(metrics=["speedup_median_tpot"])


def test_an_undefined_speedup_names_both_sides():
    # A server that streamed text but counted no tokens: throughput 0, and no speedup to take of it.
    result = make_result(sd_records=[Rec(i, token_ids=(), text="x", tokens=0) for i in range(4)])
    assert result.unavailable("speedup_output_throughput") == (
        "speedup_output_throughput is undefined in repeat 1: output_throughput is 16 for the reference and 0 for SD"
    )
    with pytest.raises(AssertionError, match="speedup_output_throughput: unavailable"):
        result.assert_speedup(min=0.5)


def test_assert_speedup_uses_the_one_speedup_and_its_paired_interval():
    result = make_result(repeats=3)
    for run, tpot in zip(result.speculative_runs, (0.02, 0.025, 0.03)):
        run.metrics = summarize([Rec(i, tpot_s=tpot) for i in range(4)], duration_s=1.0)
    assert result.speedup("median_tpot_ms") == pytest.approx(0.03 / 0.025)
    # Three fixed draws of 1.5x, 1.2x and 1.0x around a bound of 1.3: the draws' spread covers the bound, so the
    # check is undecided, not failed (as the median alone said) and not passed; strict fails it.
    result.assert_speedup(min=1.3, metric="median_tpot_ms")
    (decision,) = result.undecided().values()
    assert decision.draws == 3 and decision.stopped == "undecided at the cap (3 runs a side)"
    result.strict = True
    with pytest.raises(AssertionError, match=r"undecided, and --specdec-strict fails an undecided check"):
        result.assert_speedup(min=1.3, metric="median_tpot_ms")
    # Well below the bound on every draw: failed, with the speedup per draw.
    with pytest.raises(AssertionError, match=r"speedup per draw: 1\.500, 1\.200, 1\.000"):
        result.assert_speedup(min=3.0, metric="median_tpot_ms")


# --- the gate ---------------------------------------------------------------------------------

FINGERPRINT = {
    "engine": "vllm",
    "engine_version": "0.32.0",
    "device_kind": "cpu",
    "device_name": "x",
    "device_count": 2,
    "driver": None,
    "torch_version": "2.13.0",
}


def gate_with_baseline(tmp_path, derived, repeats=1):
    """A gate over a stored baseline whose repeats have the `derived` figures (a dict, or one per repeat)."""
    from pytest_specdec.verdict.gate.baselines import write_baseline

    per_repeat = derived if isinstance(derived, list) else [derived] * repeats
    session = BaselineSession(base_dir=tmp_path, update=False, fingerprint=FINGERPRINT)
    write_baseline(
        tmp_path,
        Baseline(
            "t.py::test",
            FINGERPRINT,
            {
                "spec": {"model": "m", "speculative_config": None, "server_args": [], "tensor_parallel_size": 1},
                "workload": {},
                "pattern": {},
                "seed": 0,
                "repeat_seeds": [r * 7919 for r in range(len(per_repeat))],
            },
            [{"reference": {}, "speculative": {}, "derived": dict(d)} for d in per_repeat],
            {},
        ),
    )
    return RegressionGate(session, "t.py::test")


def test_lost_counters_fail_the_gate_unless_allowed(tmp_path):
    gate = gate_with_baseline(tmp_path, {"acceptance_rate": 0.5})
    result = make_result(counters=SpecDecodeCounters.unavailable(f"no vllm:spec_decode_* counters for m at {URL}"))
    result.gate = gate
    with pytest.raises(AssertionError, match=r"(?s)cannot compare with the baseline.*acceptance_rate: unavailable"):
        result.assert_no_regression(metrics=["acceptance_rate"])
    assert gate.outcome == "unavailable"
    result.assert_no_regression(metrics=["acceptance_rate"], allow_unavailable=["acceptance_rate"])
    assert "acceptance_rate" not in gate.detections


def test_a_baseline_without_the_figure_fails_the_gate(tmp_path):
    gate = gate_with_baseline(tmp_path, {"acceptance_rate": None})
    result = make_result()
    result.gate = gate
    with pytest.raises(AssertionError, match="unavailable: the baseline has no value for it"):
        result.assert_no_regression(metrics=["acceptance_rate"])


def test_latency_speedups_point_the_right_way_in_the_gate():
    # The TPOT speedup halving (2 -> 1) is a 50% loss; doubling is a gain.
    assert compare_samples("speedup_median_tpot", [2.0], [1.0]).regression
    assert compare_samples("speedup_median_tpot", [2.0], [1.0]).change == pytest.approx(-0.5)
    assert not compare_samples("speedup_median_tpot", [1.0], [2.0]).regression
    assert not compare_samples("speedup_median_tpot_ms", [1.0], [2.0]).regression  # the pre-0.2 name too


def test_the_gate_says_what_it_can_detect(tmp_path):
    recorded = [{"speedup_median_tpot": value} for value in (1.47, 1.50, 1.53)]  # a 2% spread
    gate = gate_with_baseline(tmp_path, recorded)
    result = make_result(repeats=3)  # 1.5x in every repeat
    result.gate = gate
    result.assert_no_regression(metrics=["speedup_median_tpot"])
    # A speedup on the recording machine is decided by the sequential rule (verdict.gate.speedups), paired by
    # draw, with the drift between two sessions (4.2% a side) counted: its statement is the rule's own.
    decision = result.decisions["speedup_median_tpot against the baseline"]
    assert decision.outcome == "passed" and decision.runs == 3 and decision.draws == 3
    assert "speedup_median_tpot" not in gate.detections  # the old rule's statement is not made of it
    # What the old rule's statement says of the same values, from the detection module itself: a drop must clear
    # the tolerance and the drift; without the drift it was the optimistic one sessions did not bear out.
    found = detection("speedup_median_tpot", [1.47, 1.50, 1.53], 3, 0.15, current_values=[1.5] * 3)
    assert found.repeats == 3 and found.noise_from == "paired ratios"
    assert found.spread == pytest.approx(0.02 / 2**0.5, abs=0.001)
    assert found.drift == 0.042 and 0.19 < found.smallest_drop < 0.24 and found.false_alarm_rate <= 0.02
    assert "flagged in 90% of runs" in found.describe() and "session drift 4.2% a side" in found.describe()
    still = detection("speedup_median_tpot", [1.47, 1.50, 1.53], 3, 0.15, current_values=[1.5] * 3, drift=0.0)
    assert 0.15 < still.smallest_drop < 0.20 and still.smallest_drop < found.smallest_drop
    # A failing check shows the rule's decision in its table: failed, and the runs it took.
    for run in result.speculative_runs:
        run.metrics = summarize([Rec(i, tpot_s=0.03) for i in range(4)], duration_s=1.0)
    with pytest.raises(AssertionError, match=r"(?s)detects.*failed, 3 runs"):
        result.assert_no_regression(metrics=["speedup_median_tpot"])


def test_prompt_sets_that_differ_are_not_noise_when_repeats_are_paired():
    # Repeat seeds send different prompts: the baseline's repeats spread 20% across prompt sets, but
    # each pair moves together.  The baseline's spread would say only drops of ~45% are visible.
    baseline, current = [1.2, 1.5, 1.8], [1.2 * 0.99, 1.5 * 1.0, 1.8 * 1.01]
    unpaired = detection("speedup_output_throughput", baseline, 3, 0.15, paired=False)
    paired = detection("speedup_output_throughput", baseline, 3, 0.15, current_values=current)
    assert unpaired.noise_from == "baseline repeats" and unpaired.spread == pytest.approx(0.2)
    assert paired.spread == pytest.approx(0.01 / 2**0.5, abs=0.002)
    assert paired.smallest_drop < 0.24 < unpaired.smallest_drop and paired.false_alarm_rate < 0.02
    assert detection("m", baseline, 3, 0.15, current_values=[1.2, None, None]).spread is None  # one pair


def test_detection_gets_worse_with_noise_and_false_alarms_fewer_with_repeats():
    quiet, noisy = detection("m", [1.0, 1.02, 0.98], 3, 0.10), detection("m", [1.0, 1.10, 0.90], 3, 0.10)
    assert quiet.smallest_drop < noisy.smallest_drop
    assert detection("m", [1.0, 1.10, 0.90], 5, 0.10).false_alarm_rate < noisy.false_alarm_rate
    assert flag_rate(0.0, 0.01, 3, 0.10) == 0.0 and flag_rate(0.5, 0.01, 3, 0.10) == 1.0
    unknown = detection("m", [1.0], 1, 0.15)
    assert unknown.spread is None and "repeat noise unknown" in unknown.describe()


# --- failures in order, theory, reports -------------------------------------------------------


def test_a_dead_server_is_reported_before_anything_else():
    def never(*args):
        raise AssertionError("a dead server must not be scraped")

    server = SimpleNamespace(
        process=SimpleNamespace(poll=lambda: -9),
        log_path="/logs/server-02.log",
        log_tail=lambda: "--- last 1 log lines ---\nKilled",
        url="http://x",
        spec_decode_counters=never,
    )
    records = [Rec(0), Rec(1, success=False)]
    records[1].error = "ConnectError: All connection attempts failed"
    with pytest.raises(
        RunError,
        match=r"(?s)died during the run \(killed by SIGKILL\); 1 of 2 requests failed"
        r".*server log: /logs/server-02.log.*Killed",
    ):
        check_run(server, SPEC, records, "SD on w/p")
    alive = SimpleNamespace(process=None, log_path=None, url="http://x")
    with pytest.raises(RunError, match="(?s)1 of 2 requests failed on .*ConnectError.*endpoint: http://x"):
        check_run(alive, SPEC, records, "SD on w/p")


def test_an_impossible_acceptance_length_does_not_crash_the_report():
    result = make_result(counters=SpecDecodeCounters(10, 40, 80, {0: 10}))  # length 9 with k=4
    row = row_for("t.py::test", SPEC, {"name": "w"}, {"name": "p"}, outcome="passed", result=result, cost_ratio=0.0)
    assert row["expected_speedup"] is None and "outside [1, k+1]" in row["unavailable"]["expected_speedup"]
    lost = make_result(counters=SpecDecodeCounters.unavailable("no counters at x"))
    row = row_for("t.py::test", SPEC, {"name": "w"}, {"name": "p"}, outcome="failed", result=lost, cost_ratio=0.0)
    assert row["acceptance_rate"] is None and row["unavailable"]["acceptance_rate"] == "no counters at x"
    assert "unavailable" in terminal_table([row], full=True)[2]
    assert csv_text([row]).splitlines()[1].count("unavailable") >= 2


def test_exports_say_unavailable_and_why_never_nan():
    from pytest_specdec.report.exports import junit_properties

    result = make_result(counters=SpecDecodeCounters.unavailable(f"no vllm:spec_decode_* counters for m at {URL}"))
    props = junit_properties(result)
    assert props["specdec_acceptance_rate"] == f"unavailable: no vllm:spec_decode_* counters for m at {URL}"
    assert props["specdec_speedup_output_throughput"] == pytest.approx(1.0, abs=0.5)
    assert "nan" not in {str(v) for v in props.values()}


def test_counters_older_than_the_managed_server_are_another_process():
    # A stale vLLM still answering on the port the plugin's server should have: not this server's counters.
    from pytest_specdec.serving.server import scrape_counters

    text = "\n".join(
        [
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10',
            'vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1700000000.0',
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40',
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 20',
        ]
    )
    server = SimpleNamespace(url="http://127.0.0.1:8123", port=8123, metrics_text=lambda: text, started_at=1700000100.0)
    counters = scrape_counters(server, ["m"])
    assert (
        not counters.present
        and "created at 1700000000, before this server was started at 1700000100" in counters.problem
        and "port 8123" in counters.problem
    )
    server.started_at = 1699999990.0
    assert scrape_counters(server, ["m"]).present
    del server.started_at  # an endpoint the plugin did not start: no launch time to check against
    assert scrape_counters(server, ["m"]).present


def test_endpoint_mode_without_speculative_config_says_what_the_config_is_for():
    from pytest_specdec.measure.measurements import Measurements

    spec = ServerSpec("m", None, endpoints=(("reference", "http://a:1"), ("speculative", "http://b:2")))
    with pytest.raises(
        RunError,
        match=r"(?s)In endpoint mode the plugin starts nothing: speculative_config "
        r"describes what the speculative endpoint \(http://b:2\) runs.*"
        r"num_speculative_tokens",
    ):
        Measurements.run(SimpleNamespace(), spec, None, None)


def test_counters_that_accept_more_than_they_drafted_are_an_error():
    with pytest.raises(CounterError, match=r"inconsistent \(300 tokens accepted of 200 drafted\)"):
        scrape(150, 600, 500).delta(scrape(100, 400, 200), where=URL)


def test_summary_and_results_json_carry_unavailable_figures_and_what_the_gate_detects(tmp_path):
    from pytest_specdec.report.files import load_report, write_report
    from pytest_specdec.report.tables import markdown_summary

    gate = gate_with_baseline(tmp_path / "baselines", [{"acceptance_rate": v} for v in (0.49, 0.50, 0.51)])
    result = make_result(repeats=3)
    result.gate = gate
    result.assert_no_regression(metrics=["acceptance_rate"])
    detection = {metric: found.as_dict() for metric, found in gate.detections.items()}
    lost = make_result(counters=SpecDecodeCounters.unavailable(f"no vllm:spec_decode_* counters for m at {URL}"))
    rows = [
        row_for(
            "t.py::test_gated", SPEC, {"name": "w"}, {"name": "p"}, outcome="passed", result=result, detection=detection
        ),
        row_for("t.py::test_lost", SPEC, {"name": "w"}, {"name": "p"}, outcome="failed", result=lost),
    ]
    summary = markdown_summary(rows)
    assert f"- t.py::test_lost: acceptance_rate: no vllm:spec_decode_* counters for m at {URL}" in summary
    assert "**What the baseline gates can detect**" in summary and "| t.py::test_gated | acceptance_rate |" in summary
    assert "paired ratios" in summary
    write_report(tmp_path / "report", rows)  # validated against the schema as it is written
    document = load_report(tmp_path / "report")
    gated, lost_row = document["results"]
    assert gated["detection"]["acceptance_rate"]["noise_from"] == "paired ratios"
    assert lost_row["acceptance_rate"] is None and "no vllm:spec_decode_*" in lost_row["unavailable"]["acceptance_rate"]


def test_allow_unavailable_must_name_a_gated_metric(tmp_path):
    result = make_result()
    result.gate = gate_with_baseline(tmp_path, {"acceptance_rate": 0.5})
    with pytest.raises(ValueError, match="allow_unavailable names metrics this check does not gate: match_rate"):
        result.assert_no_regression(metrics=["acceptance_rate"], allow_unavailable=["match_rate"])


def test_a_client_bound_run_shows_client_bound_not_a_speedup_and_its_lag_in_every_report(tmp_path):
    from pytest_specdec.report.files import write_report
    from pytest_specdec.report.tables import markdown_summary

    lagging = [Rec(i) for i in range(4)]
    for record in lagging:
        record.dispatch_lag = 0.05  # the client sent every SD request 50 ms late
    result = make_result(sd_records=lagging)
    assert result.client_bound().startswith("client-bound")
    row = row_for("t.py::test", SPEC, {"name": "w"}, {"name": "p"}, outcome="failed", result=result)
    assert row["speedup_output_throughput"] is None and row["unavailable"]["speedup_output_throughput"].startswith(
        "client-bound"
    )
    assert row["speculative"]["p99_dispatch_lag_ms"] == pytest.approx(50.0)
    assert row["reference"]["p99_dispatch_lag_ms"] == pytest.approx(0.0)
    assert "client-bound" in terminal_table([row], full=True)[2] and "1.50x" not in terminal_table([row], full=True)[2]
    assert "| test | ngram k=4 | w | p | client-bound |" in markdown_summary([row])
    line = dict(zip(*[r.split(",") for r in csv_text([row]).splitlines()]))
    assert float(line["speculative_p99_dispatch_lag_ms"]) == pytest.approx(50.0)
    write_report(tmp_path, [row])  # the schema takes it
