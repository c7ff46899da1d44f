"""SD at temperature on real CPU servers: acceptance and speedup, and whether the output distribution holds.

- llama.cpp's n-gram SD at temperature 0.8 accepts a draft token only where the target's own sampler drew
  the same token, which keeps the target's distribution: `assert_same_distribution` must pass.
- The same llama.cpp servers with a wrong sampler planted on the SD side (temperature 1.6 against the
  reference's 0.8, what a server that rescaled the request's temperature would do) must fail it.
- vLLM's CPU build (0.32) with n-gram at temperature > 0 writes text the reference never would ("def
  sub( sowing: int Tok) -> interpolation:" at 0.8, and similar at 0.3, where the reference answers
  "def sub(a: int, b: int) -> int:").  Its rejection rule is lossless; the build's C++ stand-in for the
  Triton kernel that copies each request's temperature to its drafted positions writes into int64 copies
  and never copies them back, so drafted positions are divided by uninitialised memory
  (vllm-project/vllm#55005, fix proposed in vllm-project/vllm#55006; greedy decoding is unaffected).  The
  check must find that, at drafted positions only: a strict xfail, so a fixed vLLM fails it as XPASS.
"""

import math

import pytest

from pytest_specdec.load.workloads import resolve_workload
from pytest_specdec.measure.distribution_samples import DrawPlan, draw_side
from pytest_specdec.verdict.distribution import same_distribution, samples_needed

BUNDLED = "specdec:smollm2-135m"
VLLM_NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
LLAMACPP_NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 3, "prompt_lookup_max": 3}
EAGER = ["--enforce-eager"]
SAMPLED = dict(input_len=192, output_len=64, temperature=0.8)
EFFECT = 0.5  # the effect size (Cohen's w) each check is planned to detect with power 90%
CONCURRENCY_4 = pytest.mark.access_pattern("throughput_high", max_concurrency=4, num_prompts=8)


def check_sampled_run(result) -> None:
    assert result.workload["sampling"] == {"temperature": 0.8, "top_p": 1.0, "top_k": None, "seed": "per_request"}
    assert math.isfinite(result.speedup()) and result.counters.num_drafts > 0
    # Sampled outputs are not compared token by token: unavailable, with the reason, never a match rate.
    assert math.isnan(result.match_rate) and "assert_same_distribution" in result.unavailable("match_rate")
    print(
        f"{result.spec.label()} at temperature 0.8: speedup {result.speedup():.2f}x, acceptance {result.acceptance_rate:.0%}"
    )


@pytest.mark.specdec(model=BUNDLED, engine="llamacpp", speculative_config=LLAMACPP_NGRAM)
@pytest.mark.workload("code_edit", **SAMPLED)
@CONCURRENCY_4
def test_llamacpp_ngram_at_temperature_keeps_the_distribution_and_a_planted_sampler_fails(specdec):
    result = specdec.run()
    check_sampled_run(result)
    assert 0 < result.acceptance_rate <= 1

    # Effect w 0.5 at power 90% and family-wise alpha 1%: 67 samples a side per prompt, computed.  (w 0.3
    # needs 185; docs/benchmarks.md has that run: this one costs CI a third of it.)
    result.assert_same_distribution(effect=EFFECT)
    test = result.distribution
    print(test.describe())
    assert test.passed and test.samples_per_side == samples_needed(EFFECT, 7, 0.01 / 16, 0.9) and len(test.tables) >= 8

    # The planted fault: the SD server samples at 1.6 where the reference sampled at 0.8 (its samples reused);
    # benchmarks/sampling.py measures how often a subtler one (1.2) is caught.
    plan = DrawPlan.planned(4, 4, test.samples_per_side, 0.01, EFFECT, 0.9, 8)
    hotter = resolve_workload("code_edit", {**SAMPLED, "temperature": 1.6})
    measurements = specdec.measurements
    prompts = measurements.prompts(BUNDLED, hotter, specdec.pattern, 0)[: plan.prompts]
    wrong = draw_side(measurements, specdec.spec, hotter, prompts, plan, 2, "SD at 1.6")
    planted = same_distribution(test.reference_samples, wrong, samples_per_side=plan.samples, effect=EFFECT)
    print(f"planted wrong sampler: {planted.describe()}")
    assert not planted.passed and planted.rejected


class DraftedTemperatureBug(AssertionError):
    """The distribution check failed the way vllm-project/vllm#55005 makes it fail: drafted positions only.
    The xfail expects this type alone, so any other failure (a plain AssertionError included) stays one."""


# The n-gram target of test_cpu_servers.py, test_measure_cpu.py and test_openai_chat_cpu.py: this file sorts
# after theirs, so this is the group's last test, and its draws, which end on the reference's server, stop the
# n-gram server when no later test of the group needs it (a target of its own cost three starts).
@pytest.mark.specdec(model=BUNDLED, speculative_config=VLLM_NGRAM, server_args=EAGER)
@pytest.mark.workload("code_edit", **SAMPLED)
@pytest.mark.access_pattern("throughput_high", max_concurrency=4, num_prompts=4)
@pytest.mark.xfail(
    strict=True,
    raises=DraftedTemperatureBug,
    reason="vLLM CPU 0.32 divides drafted positions' logits by uninitialised memory (vllm-project/vllm#55005)",
)
def test_vllm_cpu_ngram_at_temperature_keeps_the_distribution(specdec):
    result = specdec.run()
    check_sampled_run(result)
    try:
        # Two prompts at the default effect size (w 0.3: 173 samples a side): p 4.5e-10 at the worst table
        # here, against a threshold of 1.3e-3.  Planned for w 0.5 (67 samples) it was missed (p 0.0036):
        # the defect is a smaller effect than that at most positions (docs/benchmarks.md).
        result.assert_same_distribution(prompts=2)
    except AssertionError as failed:
        message = str(failed)
        print(message)
        test = result.distribution
        # The first token comes from the prefill, before any draft is verified: the bug cannot change it.
        # The tables that reject are the drafted positions, and the message points there.
        assert test.rejected and all(table.position != 1 for table in test.rejected)
        assert "differ" in message and "vllm-project/vllm#55005" in message
        raise DraftedTemperatureBug(message) from failed
