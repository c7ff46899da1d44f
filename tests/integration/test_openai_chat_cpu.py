"""`endpoint="chat"` on real CPU servers: each engine's chat route, template and stream, with its SD figures.

The prompts go as the user's message to /v1/chat/completions; the server wraps them in the bundled model's
chat template (SmolLM2-Instruct's, with its default system message), so the prompt tokens the server counts
exceed the raw prompt's by the template's.  The streams must still give what the verdicts read: each
request's own SD figures (vLLM's per-request metrics, llama.cpp's timings), the counters, and each chunk's
token ids where the engine streams them on chat (vLLM's return_token_ids does; llama-server's chat chunks
carry none, "verbose" or not, so its outputs are compared as text, and said so).

Both tests run on configurations the session already starts (llama.cpp n-gram as in test_sampling_cpu.py
and the main job; vLLM n-gram as in test_measure_cpu.py): the pool serves them on those servers, and the
reference server measures the chat traffic with the others of its target.  The file's name sorts after
test_cpu_servers.py on purpose: the pool's n-gram group stands where its first test stands, and a group
that started before test_cpu_servers.py's reference-only test would need the n-gram server again after it.  benchmarks/chat.py measures
chat and natural stops beside raw completions (docs/benchmarks.md).
"""

import math

import pytest

BUNDLED = "specdec:smollm2-135m"
VLLM_NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
LLAMACPP_NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 3, "prompt_lookup_max": 3}
CHAT = dict(input_len=192, output_len=32, endpoint="chat")
ONE_AT_A_TIME = pytest.mark.access_pattern("throughput_low", num_prompts=4)
# SmolLM2-Instruct's template adds its default system message and the role markers: ~30 tokens here.
TEMPLATE_TOKENS = 20


def check_chat_run(specdec, result, basis: str) -> None:
    assert result.workload["endpoint"] == "chat"
    prompts = specdec.measurements.prompts(BUNDLED, specdec.workload, specdec.pattern, 0)
    for run in result.reference_runs + result.speculative_runs:
        first = run.records if run.repeat == 0 else []
        for record in run.records:
            assert record.success and record.output_tokens == CHAT["output_len"], record.error
            # Every token's id came with the stream where the engine sends them on chat; else none, never some.
            assert len(record.token_ids) == (record.output_tokens if basis == "token ids" else 0)
        for record in first:  # repeat 0 sent these very prompts; the server counted the template's tokens too
            assert record.prompt_len >= prompts[record.index].prompt_len + TEMPLATE_TOKENS, (
                record.prompt_len,
                prompts[record.index].prompt_len,
            )
    assert result.counters.present and result.counters.num_drafts > 0 and 0 < result.acceptance_rate <= 1
    assert all(r.spec_decoding for run in result.speculative_runs for r in run.records), "per-request SD figures"
    assert math.isfinite(result.speedup()) and result.outputs.basis == basis
    print(
        f"{result.spec.label()} on chat: speedup {result.speedup():.2f}x, acceptance {result.acceptance_rate:.0%}, "
        f"outputs equal to the reference's {result.match_rate:.0%}, prompt tokens "
        f"{result.reference_runs[0].records[0].prompt_len} for a raw prompt of {prompts[0].prompt_len}; flags: "
        f"{[flag.describe() for flag in result.fairness_flags()]}, measured again: {result.remeasured}"
    )


@pytest.mark.specdec(model=BUNDLED, engine="llamacpp", speculative_config=LLAMACPP_NGRAM)
@pytest.mark.workload("code_edit", **CHAT)
@ONE_AT_A_TIME
def test_llamacpp_chat_gives_sd_figures_through_the_template_and_compares_text(specdec):
    check_chat_run(specdec, specdec.run(), basis="text")


@pytest.mark.specdec(model=BUNDLED, speculative_config=VLLM_NGRAM, server_args=["--enforce-eager"])
@pytest.mark.workload("code_edit", **CHAT)
@ONE_AT_A_TIME
def test_vllm_chat_streams_ids_and_sd_figures_through_the_template(specdec):
    result = specdec.run()
    check_chat_run(specdec, result, basis="token ids")
    # vLLM's per-request metrics ride on the chat stream's last chunk as on completions: per-step arrays.
    assert all(r.spec_decoding.get("per_step_accepted") for run in result.speculative_runs for r in run.records)
