"""Production conditions on a real GPU (issue 33's GPU checks): energy per token from NVML, the server series,
chat and sampling at temperature, on vLLM with the bundled SmolLM2-135M in eager mode.

Not part of CI (no GPU there).  Run it with the GPU kit (docs/benchmarks.md, "On a lent GPU"):

    device.sh run tests/gpu    # or: pytest tests/gpu --specdec-gpu

Two servers, one at a time: the reference and n-gram (k=4).  The three tests share them; the sampling check
draws from both sides at the end, so it comes last (its reference draws restart the reference server once).
Needs `nvidia-ml-py` installed beside the plugin for the energy figures.

Measured on an H200 (vLLM 0.26.0, 2026-11-27; docs/benchmarks.md, "On a lent GPU"): 2.715 J per output token
without SD and 1.681 with n-gram (0.62x), NVML; KV cache peak 0.0% on both sides (5.97 million tokens of
cache for one request at a time), 69 series reads at 46.4 ms median.  That run's reference had vLLM's async
scheduling and V2 model runner and the n-gram side had neither (vLLM turns both off for `ngram`), which the
plugin then flagged as confounds and a cold side, and never compared.  That loss is SD's own cost now
(measure.fairness, `engine_costs`): both sides run as deployed, the comparison is compared with the cost named,
and the first test also asks for the mechanism figure (a reference on the n-gram side's engine path).
"""

import math

import pytest

from pytest_specdec.analysis.energy_figures import describe_energy, energy_figures
from pytest_specdec.analysis.series_figures import describe_series, series_figures

MODEL = "specdec:smollm2-135m"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
ngram = pytest.mark.specdec(model=MODEL, speculative_config=NGRAM, server_args=["--enforce-eager"])
one_at_a_time = pytest.mark.access_pattern("throughput_low", num_prompts=8)


def show(result, label: str) -> None:
    print(
        f"\n[{label}] speedup={result.speedup():.3f} tpot_speedup={result.speedup('median_tpot_ms'):.3f} "
        f"acceptance={result.acceptance_rate:.3f} length={result.acceptance_length:.2f} "
        f"match={result.match_rate} engine={result.engine_version}"
    )
    for cost in result.sd_costs():
        print(f"[{label}] SD's own cost: {cost.describe()}")
    if result.mechanism is not None:
        print(
            f"[{label}] mechanism={result.mechanism.speedup():.3f} {result.mechanism.settings} {result.mechanism.note}"
        )


@ngram
@pytest.mark.workload("code_edit", input_len=512, output_len=128)
@one_at_a_time
@pytest.mark.specdec_mechanism
def test_energy_and_server_series_on_gpu(specdec):
    result = specdec.run()
    show(result, "completions")
    # Against the reference as deployed: compared, whatever vLLM turned off for n-gram (named, not a confound).
    assert result.unfair_speedup() is None, result.fairness_flags()
    result.assert_acceptance(min_rate=0.25)
    result.assert_outputs_equivalent(min_match=0.75)
    energy = energy_figures(result)
    print(f"[energy] {describe_energy(energy)} {energy}")
    # NVML counts the whole GPU's energy: both sides must have read it, and per token it is a real figure.
    assert energy["unavailable"] is None and energy["source"] and "NVML" in energy["source"], energy
    assert energy["reference_j_per_token"] > 0 and energy["speculative_j_per_token"] > 0
    assert math.isfinite(energy["ratio"]) and energy["ratio"] > 0
    series = series_figures(result)
    print(f"[series] {describe_series(series)}")
    for side in ("reference", "speculative"):
        figures = series[side]
        # One request at a time on a GPU with room for thousands: the KV share is tiny but read, never queued.
        assert figures["samples"] >= 1 and 0 <= figures["kv_cache_usage_peak"] < 1, figures
        assert figures["running_peak"] <= 1 and not figures["waiting_peak"] and figures["preemptions"] == 0, figures


@ngram
@pytest.mark.workload("code_edit", input_len=512, output_len=128, endpoint="chat")
@one_at_a_time
def test_chat_on_gpu(specdec):
    result = specdec.run()
    show(result, "chat")
    assert result.workload["endpoint"] == "chat"
    result.assert_acceptance(min_rate=0.10)
    # vLLM streams token ids on chat too: outputs compared token by token, not as text.
    assert not math.isnan(result.match_rate)
    result.assert_outputs_equivalent(min_match=0.75)


@ngram
@pytest.mark.workload("code_edit", input_len=192, output_len=64, temperature=0.8)
@pytest.mark.access_pattern("throughput_high", max_concurrency=4, num_prompts=8)
def test_sampling_keeps_the_distribution_on_gpu(specdec):
    result = specdec.run()
    show(result, "temperature 0.8")
    assert result.counters.num_drafts > 0
    # The default plan: effect w 0.3 at power 90%, family-wise alpha 1%, 4 prompts x 4 positions.  vLLM's CPU
    # build fails this through a bug of its C++ stand-in for a Triton kernel (drafted positions get an
    # uninitialised temperature: vllm-project/vllm#55005, fix proposed in #55006); GPU vLLM runs Triton.
    try:
        result.assert_same_distribution()
    finally:
        print(f"[distribution] {result.distribution.describe() if result.distribution else 'not drawn'}")
