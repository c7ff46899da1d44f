"""gpt-oss-120b on three engines: the engine choice of the Blackwell EAGLE-3 study, as tests.

Before tuning SD, docs/references.md#blackwell-eagle-3 (Experiment 1) served
gpt-oss-120b without SD on vLLM 0.14.1 and TensorRT-LLM 1.3.0rc1, random
1,024 tokens in and 1,024 out, one request at a time, 32 prompts: vLLM
177.71 output tok/s at 5.54 ms mean TPOT, TensorRT-LLM 116.55 tok/s at 8.51
ms, with TensorRT-LLM's mean TTFT lower (82.8 ms against 98.43 ms). SGLang
0.5.8 could not serve the model there (an MXFP4 MoE kernel build bug on
Blackwell). The study picked vLLM for everything after.

Here each engine serves the same EAGLE-3 draft at k=1 (the study's best, its
Experiment 2) against its own no-SD reference on that traffic: `engine=` in
the marker translates the one speculative vocabulary to each engine's own
flags (`pytest_specdec/engines/`), and each engine's acceptance is its own
server's (vLLM's counters, SGLang's per-request `meta_info` and metrics,
TensorRT-LLM's iteration statistics). Then `test_engine_ranking` holds the
engines' references to the study's ordering. Run with
``pytest examples/gpu/test_engines.py --specdec-gpu``; each engine must be
installed where the plugin can start it (`vllm`, `trtllm-serve`,
`python -m sglang.launch_server`). A baseline recorded on one engine never
gates another.
"""

from __future__ import annotations

import pytest

# Published figures stay between fmt: off and on: the formatter would split a figure from the
# comment citing it, and tests/plugin/test_examples_gpu.py checks that every figure cites its source.
# fmt: off
MARGIN = 0.90  # threshold = MARGIN x published number, as in test_gpt_oss_eagle3.py
# fmt: on

TARGET = "openai/gpt-oss-120b"
EAGLE3_K1 = {"method": "eagle3", "model": "nvidia/gpt-oss-120b-Eagle3-throughput", "num_speculative_tokens": 1}
# The study's vLLM flags (GPT-OSS_Blackwell.yaml); the other engines run their defaults, as the study's
# TensorRT-LLM and SGLang launch lines did apart from options files the plugin does not take.
VLLM_ARGS = [
    "--kv-cache-dtype",
    "fp8",
    "--async-scheduling",
    "--no-enable-prefix-caching",
    "--max-num-batched-tokens",
    "8192",
    "--stream-interval",
    "20",
]

# engine: (reference output tok/s, reference mean TPOT ms, reference mean TTFT ms) as published; None where
# the engine did not run.
# fmt: off
PUBLISHED = {
    "vllm": (177.71, 5.54, 98.43),  # docs/references.md#blackwell-eagle-3, Experiment 1 table, vLLM column
    "trtllm": (116.55, 8.51, 82.8),  # docs/references.md#blackwell-eagle-3, Experiment 1 table, TensorRT-LLM column
    "sglang": None,  # docs/references.md#blackwell-eagle-3, Experiment 1: SGLang 0.5.8 could not run gpt-oss-120b
}
VLLM_EAGLE3_K1_SPEEDUP = 180.67 / 177.71  # docs/references.md#blackwell-eagle-3, Experiment 2 results table, "throughput (num=1)" vs "baseline"
VLLM_EAGLE3_K1_ACCEPTANCE = 0.7058  # docs/references.md#blackwell-eagle-3, Experiment 2 results table, "throughput (num=1)"
# fmt: on

ENGINE_RESULTS: dict[str, object] = {}


def on(engine: str):
    return pytest.mark.specdec(
        model=TARGET,
        engine=engine,
        speculative_config=EAGLE3_K1,
        server_args=VLLM_ARGS if engine == "vllm" else [],
        requires_gpu=True,
    )


TRAFFIC = [
    pytest.mark.workload("random_s", output_len=1024),
    pytest.mark.access_pattern("throughput_low", num_prompts=32),
]


@pytest.mark.parametrize("engine", [pytest.param(e, marks=[on(e), *TRAFFIC], id=e) for e in PUBLISHED])
def test_engine_with_eagle3(specdec, engine):
    result = specdec.run()
    ENGINE_RESULTS[engine] = result  # before any check, for the ranking
    # The draft is the same on every engine, so its acceptance is too, within the engines' sampling and
    # numerics: the published vLLM rate is the floor for all three.
    result.assert_acceptance(min_rate=MARGIN * VLLM_EAGLE3_K1_ACCEPTANCE)
    if engine == "vllm":
        result.assert_speedup(min=MARGIN * VLLM_EAGLE3_K1_SPEEDUP)
    result.assert_no_confounds()


# Same traffic and TensorRT-LLM's marker: the plugin orders tests by server configuration, in the order
# they first appear, keeping file order within one, so this runs after the vLLM and TensorRT-LLM tests;
# it starts no server itself (no specdec fixture) and is skipped like them without --specdec-gpu.
@on("trtllm")
@TRAFFIC[0]
@TRAFFIC[1]
def test_engine_ranking():
    ran = {engine: result for engine, result in ENGINE_RESULTS.items() if PUBLISHED[engine]}
    if len(ran) < 2:
        pytest.skip(
            "fewer than two of vLLM and TensorRT-LLM ran in this process (deselected, failed to start, "
            "or on another pytest-xdist worker: use --dist loadfile)"
        )
    vllm, trtllm = ran["vllm"], ran["trtllm"]
    throughput = vllm.reference_metric("output_throughput") / trtllm.reference_metric("output_throughput")
    published = PUBLISHED["vllm"][0] / PUBLISHED["trtllm"][0]
    assert throughput >= MARGIN * published, (
        f"vLLM's reference output throughput is {throughput:.2f}x TensorRT-LLM's; the study measured "
        f"{published:.2f}x (floor {MARGIN * published:.2f}x)"
    )
    # TensorRT-LLM's first token came sooner in the study: a floor on that ordering, with the margin.
    ttft = vllm.reference_metric("mean_ttft_ms") / trtllm.reference_metric("mean_ttft_ms")
    published_ttft = PUBLISHED["vllm"][2] / PUBLISHED["trtllm"][2]
    assert ttft >= MARGIN * published_ttft, (
        f"vLLM's mean TTFT is {ttft:.2f}x TensorRT-LLM's; the study measured {published_ttft:.2f}x"
    )
