"""llama.cpp for real: the bundled model's GGUF served by llama.cpp's server, with its own SD figures.

The README's main job (examples/cpu/test_llamacpp.py) measures n-gram and a
truncated draft on llama.cpp through the plugin (the `llamacpp` engine;
llama-server's flags run by the xllamacpp wheel here, see
engines/llamacpp_serve.py), two draws each; these tests read those very
runs (conftest.py's `main_job`) rather than measure the same configurations
on the same traffic again, and check what the engine reports against what
the client saw: the per-request ``timings.draft_n`` summed over the run's
requests must equal the difference of the ``llamacpp:spec_decode_*``
counters, two independent readings of the same drafting.
"""

BUNDLED = "specdec:smollm2-135m"
# llama.cpp's ngram-simple matches one n-gram length (3 here) and drafts up to k = 4 tokens.
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 3, "prompt_lookup_max": 3}
POOR_DRAFT = {"method": "draft_model", "model": f"{BUNDLED}@layers=8", "num_speculative_tokens": 3}


def drafted_per_request(run):
    return [record.spec_decoding["num_draft_tokens"] for record in run.records]


def measured_on_llamacpp(main_job, test_name, config, workload, output_len):
    result = main_job.result(test_name)
    assert result.spec.engine == "llamacpp" and result.spec.speculative_config == config
    assert (result.workload["name"], result.workload["output_len"]) == (workload, output_len)
    assert result.pattern["num_prompts"] == 4 and result.pattern["max_concurrency"] == 1
    return result


def test_llamacpp_ngram_is_measured_with_its_own_counters_and_timings(main_job):
    result = measured_on_llamacpp(main_job, "test_llamacpp_ngram_on_code_edits", NGRAM, "code_edit", 64)
    print(
        f"llama.cpp n-gram: speedup {result.speedup():.2f}x, accepted {result.acceptance_rate:.0%}, "
        f"length {result.acceptance_length:.2f}, same output {result.match_rate:.0%}"
    )
    assert len(result.speculative_runs) == 2  # the main job's two draws (auto repeats): each run read both ways
    for run in result.speculative_runs:
        counters = run.counters
        assert counters.present and counters.num_drafts > 0, counters.problem
        # Two readings of one run's drafting: the responses' timings and the server's counters.
        assert sum(drafted_per_request(run)) == counters.num_draft_tokens
        assert sum(r.spec_decoding["num_accepted_draft_tokens"] for r in run.records) == counters.num_accepted_tokens
        # Per position, from llamacpp:spec_decode_num_accepted_tokens_per_pos_total: never rising with the position.
        positions = counters.accepted_per_position
        assert positions and all(positions[p] >= positions[p + 1] for p in range(len(positions) - 1))
    # Code edits repeat their prompt: the lookup finds continuations.
    assert result.acceptance_rate > 0.2
    # Token ids came with every streamed token ("verbose" chunks), so outputs are compared by id.
    for record in result.reference_runs[0].records + result.speculative_runs[0].records:
        assert record.success and record.output_tokens == 64 and len(record.token_ids) >= 60
    assert result.outputs.basis == "token ids"
    assert result.speedup() > 0


def test_llamacpp_with_a_truncated_gguf_draft_accepts_little(main_job):
    result = measured_on_llamacpp(main_job, "test_llamacpp_poor_draft_makes_sd_slower", POOR_DRAFT, "random_s", 32)
    print(f"llama.cpp 8-layer draft: speedup {result.speedup():.2f}x, accepted {result.acceptance_rate:.1%}")
    for run in result.speculative_runs:
        counters = run.counters
        assert counters.present and counters.num_draft_tokens > 0
        assert sum(drafted_per_request(run)) == counters.num_draft_tokens
        assert set(counters.accepted_per_position) <= {0, 1, 2}  # k = 3 positions
    assert result.acceptance_rate < 0.15  # the first 8 of 30 layers rarely predict the target's token


def test_a_request_longer_than_one_slots_share_of_the_context_is_served(specdec_server, specdec_measurements):
    """-np 16 -c 8192 without --kv-unified gave each slot 512 tokens: a 700-token prompt failed on
    llama.cpp only.  One server start (1-2 s here), one request."""
    from pytest_specdec.load.client import generate_load
    from pytest_specdec.load.patterns import resolve_pattern
    from pytest_specdec.load.workloads import resolve_workload

    server = specdec_server(model=BUNDLED, engine="llamacpp", speculative_config=NGRAM)
    workload = resolve_workload("random_s", {"input_len": 700, "output_len": 8})
    pattern = resolve_pattern("throughput_low", {"num_prompts": 1})
    prompts = specdec_measurements.prompts(BUNDLED, workload, pattern, seed=0)
    (record,) = generate_load(server.url, server.model, prompts, pattern, engine="llamacpp").records
    assert record.success, record.error
    assert record.prompt_len >= 700 and record.output_tokens == 8
