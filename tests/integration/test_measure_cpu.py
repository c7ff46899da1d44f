"""specdec.run() on real vLLM CPU servers with the bundled model (run with --specdec-cpu).

Scaled-down traffic: a real measurement, small enough for CI.  The plugin
groups tests by server configuration and measures each reference once, so
this module starts the reference, n-gram, suffix and draft servers once each.
"""

import math

import pytest

from pytest_specdec.measure.result import SpecDecResult

BUNDLED = "specdec:smollm2-135m"
# The same n-gram config as test_cpu_servers.py, so the session shares one server.
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
SUFFIX = {"method": "suffix", "num_speculative_tokens": 4}
POOR_DRAFT = {"method": "draft_model", "model": f"{BUNDLED}@layers=8", "num_speculative_tokens": 3}

CODE_EDIT = dict(input_len=192, output_len=64)
# ~25 s per server start instead of ~70 s; both sides of every comparison pay the same.
EAGER = ["--enforce-eager"]


def check_measured(result: SpecDecResult, num_prompts: int) -> None:
    for run in result.reference_runs + result.speculative_runs:
        assert run.metrics.completed == num_prompts and run.metrics.failed == 0
        assert run.metrics.output_throughput > 0
        assert all(r.output_tokens == CODE_EDIT["output_len"] for r in run.records)  # ignore_eos: exact lengths
    speedup = result.speedup()
    assert math.isfinite(speedup) and speedup > 0
    assert result.reference_runs[0].counters is None
    counters = result.counters
    assert counters.present and counters.num_drafts > 0 and counters.num_accepted_tokens > 0
    assert 0 < result.acceptance_rate <= 1
    assert len(result.outputs.requests) == num_prompts
    assert "--speculative-config" in result.reproduce["speculative_server"]
    assert "--speculative-config" not in result.reproduce["reference_server"]
    assert "--dataset-path" in result.reproduce["bench"]


CONCURRENCY_1 = pytest.mark.access_pattern("throughput_low", num_prompts=4)
CONCURRENCY_4 = pytest.mark.access_pattern("throughput_high", max_concurrency=4, num_prompts=8)


@pytest.mark.workload("code_edit", **CODE_EDIT)
@pytest.mark.parametrize(
    "num_prompts",
    [
        pytest.param(4, marks=[pytest.mark.specdec(model=BUNDLED, speculative_config=NGRAM, server_args=EAGER), CONCURRENCY_1],
                     id="ngram-c1"),
        pytest.param(8, marks=[pytest.mark.specdec(model=BUNDLED, speculative_config=NGRAM, server_args=EAGER), CONCURRENCY_4],
                     id="ngram-c4"),
        pytest.param(4, marks=[pytest.mark.specdec(model=BUNDLED, speculative_config=SUFFIX, server_args=EAGER), CONCURRENCY_1],
                     id="suffix-c1"),
        pytest.param(8, marks=[pytest.mark.specdec(model=BUNDLED, speculative_config=SUFFIX, server_args=EAGER), CONCURRENCY_4],
                     id="suffix-c4"),
    ],
)
def test_sd_against_the_reference_on_code_edit(specdec, num_prompts):
    result = specdec.run()
    check_measured(result, num_prompts)
    print(result)
    check_per_step_data(result)


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
    print(f"per-request acceptance length p50: server {check['server_acceptance_length_p50']:.2f}, chunk estimate "
          f"{check['estimate_acceptance_length_p50']:.2f}; steps agreeing {check['step_agreement_p50']:.0%}")
    # Summed over requests, the server's per-step arrays are the Prometheus counters' delta.
    counters = result.counters
    assert sum(sum(r.spec_decoding["per_step_accepted"]) for run in result.speculative_runs
               for r in run.records) == counters.num_accepted_tokens
    assert sum(len(r.spec_decoding["per_step_accepted"]) for run in result.speculative_runs
               for r in run.records) == counters.num_drafts
    assert math.isfinite(analysis.oracle_speedup) and analysis.best_k in range(1, k + 1)


@pytest.mark.specdec(model=BUNDLED, speculative_config=POOR_DRAFT, server_args=EAGER)
@pytest.mark.workload("code_edit", **CODE_EDIT)
@pytest.mark.access_pattern("throughput_low", num_prompts=4)
def test_truncated_draft_accepts_little(specdec):
    result = specdec.run()
    check_measured(result, 4)
    print(result)
    # An 8-of-30-layer draft is a poor draft: it was measured here at ~2% (k=3).
    assert result.acceptance_rate < 0.25
    assert len(result.per_position_acceptance) == 3


@pytest.mark.specdec(model=BUNDLED, speculative_config=NGRAM, server_args=EAGER)
@pytest.mark.workload("code_edit", **CODE_EDIT)
@pytest.mark.access_pattern("throughput_low", num_prompts=4)
def test_reference_runs_are_shared_across_configs(specdec, specdec_measurements, specdec_pool):
    """Runs after the tests above (same n-gram config group): nothing is measured twice."""
    result = specdec.run()
    # code_edit at concurrency 1 and 4: two traffics, each measured once, all on one reference server start.
    assert specdec_measurements.reference_measurements[specdec.spec.target] == 2
    # One start, and one more for each comparison of this config flagged cold and measured again.
    assert specdec_pool.starts[specdec.spec.key] == 1 + specdec_measurements.remeasures[specdec.spec.key]
    assert result.reference_runs is specdec_measurements.reference(
        specdec.spec, specdec.workload, specdec.pattern, [], seed=0
    )
