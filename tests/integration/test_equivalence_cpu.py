"""Output equivalence on a real divergence of the CPU build.

Speculative decoding is exact in theory, but on the CPU build n-gram
verification runs the target over several tokens at once and its numerics
differ from one-token decoding: some greedy code answers change (seen here:
the indentation of a generated function).  The report must say where, show
both continuations, and tell whether the reference was at a near-tie there.

The plugin serves the bundled model in float32, where this build's n-gram
outputs matched the reference on these prompts; bfloat16 (asked for here with
``--dtype``) is where the divergence shows.
"""

import pytest

BUNDLED = "specdec:smollm2-135m"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


@pytest.mark.specdec(model=BUNDLED, speculative_config=NGRAM, server_args=["--enforce-eager", "--dtype", "bfloat16"])
@pytest.mark.workload("code_edit", input_len=192, output_len=64)
@pytest.mark.access_pattern("throughput_low", num_prompts=6)
def test_ngram_divergence_is_reported_with_both_continuations(specdec):
    result = specdec.run(logprobs=2)
    assert all(record.top_logprobs for record in result.reference_runs[0].records)
    diverged = result.outputs.diverged
    assert diverged, "expected the CPU build's n-gram run to change at least one greedy answer"
    with pytest.raises(AssertionError) as failure:
        result.assert_outputs_equivalent(min_match=1.0, ignore_numerical_ties=False)
    report = str(failure.value)
    print(report)
    first = diverged[0]
    assert f"request {first.index}: first difference at token {first.first_divergence}" in report
    assert f"reference: {first.reference_text!r}" in report and f"SD:        {first.speculative_text!r}" in report
    assert first.reference_text != first.speculative_text
    # Every divergence is classified from the reference's own top-2 logprobs.
    assert "top-2 gap" in report and "(unknown" not in report
    assert "reproduce by hand:" in report and "--speculative-config" in report
