"""specdec.run() on real vLLM CPU servers with the bundled model (run with --specdec-cpu).

Scaled-down traffic: a real measurement, small enough for CI.  The plugin
groups tests by server configuration and measures each reference once, so
this module starts the reference, n-gram and suffix servers once each.

One request at a time on code edits, n-gram, suffix and a truncated draft
are what the README's main job measures (examples/cpu): the checks of the
servers' own figures run on the main job's results (conftest.py's
`main_job`), not on a second measurement of the same configurations on the
same traffic.  At concurrency 4 this module measures its own.
"""

import math

import pytest

from pytest_specdec.measure.result import SpecDecResult

BUNDLED = "specdec:smollm2-135m"
# The same n-gram config as test_cpu_servers.py, so the session shares one server.
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
SUFFIX = {"method": "suffix", "num_speculative_tokens": 4}
POOR_DRAFT = {"method": "draft_model", "model": f"{BUNDLED}@layers=8", "num_speculative_tokens": 3}

CODE_EDIT = dict(input_len=192, output_len=32)
# ~25 s per server start instead of ~70 s; both sides of every comparison pay the same.
EAGER = ["--enforce-eager"]


def check_measured(result: SpecDecResult, num_prompts: int, *, some_accepted: bool = True) -> None:
    for run in result.reference_runs + result.speculative_runs:
        assert run.metrics.completed == num_prompts and run.metrics.failed == 0
        assert run.metrics.output_throughput > 0
        assert all(r.output_tokens == result.workload["output_len"] for r in run.records)  # ignore_eos: exact lengths
    speedup = result.speedup()
    assert math.isfinite(speedup) and speedup > 0
    assert result.reference_runs[0].counters is None
    counters = result.counters
    assert counters.present and counters.num_drafts > 0 and counters.num_draft_tokens >= counters.num_drafts
    if some_accepted:
        assert counters.num_accepted_tokens > 0 and 0 < result.acceptance_rate <= 1
    else:
        assert 0 <= counters.num_accepted_tokens <= counters.num_draft_tokens and 0 <= result.acceptance_rate <= 1
    assert len(result.outputs.requests) == num_prompts
    assert "--speculative-config" in result.reproduce["speculative_server"]
    assert "--speculative-config" not in result.reproduce["reference_server"]
    assert "--dataset-path" in result.reproduce["bench"]


# The main job's tests of these configurations on code edits, one request at a time (examples/cpu).
MAIN_JOB_AT_CONCURRENCY_1 = {"ngram": "test_ngram_on_code_edits", "suffix": "test_suffix_pays_on_code_edits"}
CONCURRENCY_4 = pytest.mark.access_pattern("throughput_high", max_concurrency=4, num_prompts=8)
MEASURED_AT_CONCURRENCY_4: dict[str, SpecDecResult] = {}  # for the sharing test at the end


@pytest.mark.parametrize("method", sorted(MAIN_JOB_AT_CONCURRENCY_1))
def test_sd_against_the_reference_one_request_at_a_time(main_job, method):
    result = main_job.result(MAIN_JOB_AT_CONCURRENCY_1[method])
    assert result.spec.speculative_config == {"ngram": NGRAM, "suffix": SUFFIX}[method]
    assert (result.workload["name"], result.pattern["max_concurrency"]) == ("code_edit", 1)
    check_measured(result, 4)
    print(result)
    check_per_step_data(result)


@pytest.mark.workload("code_edit", **CODE_EDIT)
@CONCURRENCY_4
@pytest.mark.parametrize(
    "method",
    [
        pytest.param(
            method,
            marks=pytest.mark.specdec(model=BUNDLED, speculative_config=config, server_args=EAGER),
            id=f"{method}-c4",
        )
        for method, config in (("ngram", NGRAM), ("suffix", SUFFIX))
    ],
)
def test_sd_against_the_reference_on_code_edit(specdec, method):
    result = specdec.run()
    check_measured(result, 8)
    print(result)
    check_per_step_data(result)
    MEASURED_AT_CONCURRENCY_4[method] = result


def check_per_step_data(result: SpecDecResult) -> None:
    """vLLM's per-request SD metrics, as the CPU build returns them in the last streamed event."""
    k = result.spec.speculative_config["num_speculative_tokens"]
    for record in result.speculative_runs[0].records:
        reported = record.spec_decoding
        assert reported and reported["num_spec_tokens"] == k
        accepted, drafted = reported["per_step_accepted"], reported["per_step_drafted"]
        assert len(accepted) == len(drafted) == reported["num_spec_steps"]
        assert all(0 <= a <= d <= k for a, d in zip(accepted, drafted))
        assert sum(accepted) == reported["num_accepted_draft_tokens"]
        # The prefill's token plus a + 1 per drafted step never exceed the output (max_tokens may cut the last).
        assert 1 + sum(a + 1 for a in accepted) <= record.output_tokens + k
        assert sum(record.chunk_tokens) == record.output_tokens  # every token arrived in some chunk
    analysis = result.analysis()
    assert analysis.source == "server" and not analysis.estimated
    check = analysis.estimate_check
    assert check["requests"] == len(result.speculative_runs[0].records) * len(result.speculative_runs)
    print(
        f"per-request acceptance length p50: server {check['server_acceptance_length_p50']:.2f}, chunk estimate "
        f"{check['estimate_acceptance_length_p50']:.2f}; steps agreeing {check['step_agreement_p50']:.0%}"
    )
    # Summed over requests, the server's per-step arrays are the Prometheus counters' delta.
    counters = result.counters
    assert (
        sum(sum(r.spec_decoding["per_step_accepted"]) for run in result.speculative_runs for r in run.records)
        == counters.num_accepted_tokens
    )
    assert (
        sum(len(r.spec_decoding["per_step_accepted"]) for run in result.speculative_runs for r in run.records)
        == counters.num_drafts
    )
    assert math.isfinite(analysis.oracle_speedup) and analysis.best_k in range(1, k + 1)


def test_truncated_draft_accepts_little(main_job):
    result = main_job.result("test_a_poor_draft_makes_sd_slower")
    assert result.spec.speculative_config == POOR_DRAFT
    # On the main job's random-token prompts it may accept nothing at all (0 of 372 draft tokens in a CI-like
    # run; 0.3% in others): the counters must still count every draft. Accepted tokens are vLLM's same
    # counter series whatever drafts them: n-gram and suffix accept tokens on these servers in every run.
    check_measured(result, 4, some_accepted=False)
    print(result)
    # An 8-of-30-layer draft is a poor draft: it was measured here at ~2% (k=3) on code edits, 0-0.3% on random tokens.
    assert result.acceptance_rate < 0.25
    assert len(result.per_position_acceptance) == 3


# Marked with the suffix config, the last of this module's server groups: the plugin runs it after both
# comparisons at concurrency 4, and it measures nothing itself.
@pytest.mark.specdec(model=BUNDLED, speculative_config=SUFFIX, server_args=EAGER)
@pytest.mark.workload("code_edit", **CODE_EDIT)
@CONCURRENCY_4
def test_reference_runs_are_shared_across_configs(specdec, specdec_measurements, specdec_pool):
    """Two SD configs on one traffic: the reference was measured once, on one start, for both."""
    assert sorted(MEASURED_AT_CONCURRENCY_4) == ["ngram", "suffix"], (
        "the comparisons at concurrency 4 did not run first"
    )
    ngram, suffix = MEASURED_AT_CONCURRENCY_4["ngram"], MEASURED_AT_CONCURRENCY_4["suffix"]
    shared = specdec_measurements.reference(specdec.spec, specdec.workload, specdec.pattern, [], seed=0)
    remeasured = specdec_measurements.remeasures[ngram.spec.key] + specdec_measurements.remeasures[suffix.spec.key]
    if not remeasured:  # a comparison measured again replaces the shared reference with its new runs
        assert ngram.reference_runs is suffix.reference_runs is shared
    assert shared in (ngram.reference_runs, suffix.reference_runs)
    # code_edit at concurrency 4: one traffic, measured once for both (a comparison measured again is counted apart;
    # other traffics of this target, test_openai_chat_cpu.py's chat among them, are counted under their own keys).
    key = specdec_measurements.reference_key(specdec.spec, specdec.workload, specdec.pattern)
    assert specdec_measurements.reference_measurements[key] == 1
    # One start per SD config. A drafter that remembers what it served (suffix) is never parked: each comparison
    # of it flagged cold and measured again starts it afresh.  N-gram is parked, never started again: it comes
    # back resumed for each such comparison and for the group's other tests that return to it (the constrained
    # test's free run, test_structured_cpu.py), so its resumes are at least its comparisons measured again.
    for result in (ngram, suffix):
        key = result.spec.key
        again = specdec_measurements.remeasures[key]
        if result.spec.remembers_requests:
            assert (specdec_pool.starts[key], specdec_pool.resumes[key]) == (1 + again, 0)
        else:
            assert specdec_pool.starts[key] == 1 and specdec_pool.resumes[key] >= again
