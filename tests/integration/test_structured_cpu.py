"""Constrained traffic on real CPU servers: every output valid on both sides, the free figures beside the
constrained ones, and a planted grammar bypass that must fail.

The file's name sorts after test_cpu_servers.py on purpose: the pool groups tests by server configuration at
the first file that names it, and a constrained group placed before test_cpu_servers.py's reference test
stopped the reference the agreement test had left up (started three times, not once).  Each free run's
reference is measured before SD's side (SpecDecTest.run: one start of each server, where a
free run after SD's restarted both: 661 s for this file, 118 s since).  The two passing tests run on
configurations the session already starts (vLLM n-gram with --enforce-eager as in
test_cpu_servers.py and test_openai_chat_cpu.py; llama.cpp n-gram as in test_sampling_cpu.py): the pool serves
them on those servers.  The planted test needs an SD server of its own (k=3, so the pool does not reuse the
unplanted one) started with tests/support/planted_grammar.py's sitecustomize on PYTHONPATH: from a request's first
draft window on, nothing is checked against the grammar.  The reference never drafts, so it stays valid
even where it loads the plant: the failure must name SD's invalid outputs and a valid reference.
"""

import pytest

from tests.support.planted_grammar import planted_grammar_site

BUNDLED = "specdec:smollm2-135m"
VLLM_NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
LLAMACPP_NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 3, "prompt_lookup_max": 3}
SIX = pytest.mark.access_pattern("throughput_low", num_prompts=6)  # the bundled file's six prompts, once each


def check_valid_with_free_figures(result) -> dict:
    figures = result.constraint_figures()
    for side in ("reference", "speculative"):
        counts = figures["validity"][side]
        assert counts == {"checked": 6, "valid": 6, "invalid": 0, "failed_requests": 0}, (side, counts)
    assert figures["unconstrained"] is not None and figures["constrained"]["acceptance_rate"] is not None
    print(
        f"{result.spec.label()} constrained: speedup {result.speedup():.2f}x, acceptance "
        f"{result.acceptance_rate:.0%}, length {result.acceptance_length:.2f}, match {result.match_rate:.0%}; "
        f"free: speedup {result.unconstrained.speedup():.2f}x, acceptance {result.unconstrained.acceptance_rate:.0%}, "
        f"length {result.unconstrained.acceptance_length:.2f}; free outputs valid "
        f"{figures['unconstrained_validity']['reference']['valid']}/6 ref, "
        f"{figures['unconstrained_validity']['speculative']['valid']}/6 SD"
    )
    return figures


# Among the pooled n-gram tests: its free reference is not announced at collection, so it goes back to the
# reference's server and then to the n-gram server the others share.  On --specdec-cpu both are parked, not
# stopped, and come back resumed (serving.pool), so test_measure_cpu.py still counts each started once; before
# parking this test ran last with two vLLM starts of its own (30-60 s each).
@pytest.mark.specdec(model=BUNDLED, speculative_config=VLLM_NGRAM, server_args=["--enforce-eager"])
@pytest.mark.workload("structured", output_len=48)
@SIX
def test_vllm_ngram_under_json_schemas_keeps_every_output_valid_and_shows_the_free_figures(specdec):
    result = specdec.run(unconstrained=True)
    check_valid_with_free_figures(result)
    assert result.outputs.basis == "token ids" and result.match_rate >= 5 / 6, result.outputs.diverged


@pytest.mark.specdec(model=BUNDLED, engine="llamacpp", speculative_config=LLAMACPP_NGRAM)
@pytest.mark.workload("structured", output_len=48)
@SIX
def test_llamacpp_ngram_under_json_schemas_keeps_every_output_valid_and_shows_the_free_figures(specdec):
    result = specdec.run(unconstrained=True)
    check_valid_with_free_figures(result)
    assert result.match_rate >= 5 / 6, result.outputs.diverged


@pytest.mark.specdec(
    model=BUNDLED, speculative_config={**VLLM_NGRAM, "num_speculative_tokens": 3}, server_args=["--enforce-eager"]
)
@pytest.mark.workload("structured", output_len=48)
@SIX
def test_a_planted_grammar_bypass_on_the_sd_side_fails_naming_its_invalid_outputs(specdec, monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHONPATH", str(planted_grammar_site(tmp_path)))
    with pytest.raises(AssertionError) as failed:
        specdec.run()
    message = str(failed.value)
    print(message)
    assert "speculative:" in message and "reference:" not in message, message
    assert "the reference's outputs are all valid: SD's drafted tokens bypassed the grammar" in message
    (result,) = specdec.results  # the row is recorded before the check fails
    assert result.validity("reference").valid == 6 and result.validity("speculative").invalid
