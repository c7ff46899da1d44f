"""SGLang and TensorRT-LLM engines: command lines, options file, refusals, and their SD figures.

Pure logic: no server is started and nothing touches the network.
"""

from __future__ import annotations

import json

import pytest

from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.engines import EngineConfigError, LaunchRequest, engine_named
from pytest_specdec.engines.sglang import ENGINE as SGLANG
from pytest_specdec.engines.trtllm import ENGINE as TRTLLM
from pytest_specdec.engines.trtllm import iteration_counters
from pytest_specdec.analysis.acceptance import steps_from_server

PYTHON = "/venv/bin/python"
TARGET = "sd-target"
DRAFT_NAME = "specdec:draft"  # what the marker says
DRAFT_PATH = "/models/draft"  # what the launch resolved it to
EAGLE3 = {"method": "eagle3", "num_speculative_tokens": 3, "model": DRAFT_NAME}
NGRAM = {"method": "ngram", "num_speculative_tokens": 4}
DRAFT_MODEL = {"method": "draft_model", "num_speculative_tokens": 2, "model": DRAFT_NAME}


def launch_of(engine: str, config: dict | None, tmp_path, *, tp: int = 1, server_args=(), device="gpu"):
    spec = ServerSpec(
        model=TARGET, speculative_config=config, server_args=tuple(server_args), tensor_parallel_size=tp, engine=engine
    )
    resolved = None if config is None else {**config, **({"model": DRAFT_PATH} if "model" in config else {})}
    return LaunchRequest(
        spec=spec,
        device=device,
        host="127.0.0.1",
        port=8000,
        model_path="/models/target",
        speculative_config=resolved,
        kv_cache_bytes=None,
        python=PYTHON,
        work_dir=str(tmp_path),
    )


def refusal(engine, config: dict | None, server_args=()) -> EngineConfigError:
    spec = ServerSpec(model=TARGET, speculative_config=config, server_args=tuple(server_args), engine=engine.name)
    with pytest.raises(EngineConfigError) as caught:
        engine.check(spec)
    return caught.value


def test_the_registry_finds_both_engines():
    assert engine_named("sglang") is SGLANG and engine_named("trtllm") is TRTLLM
    assert (SGLANG.title, SGLANG.devices) == ("SGLang", ("gpu",))
    assert (TRTLLM.title, TRTLLM.devices) == ("TensorRT-LLM", ("gpu",))
    assert SGLANG.version_paths == ("/server_info", "/get_server_info") and SGLANG.ready_path == "/health"


# ---------------------------------------------------------------- SGLang: commands

SGLANG_BASE = [
    PYTHON,
    "-m",
    "sglang.launch_server",
    "--model-path",
    "/models/target",
    "--served-model-name",
    TARGET,
    "--host",
    "127.0.0.1",
    "--port",
    "8000",
    "--enable-metrics",
]


def test_sglang_eagle3_takes_the_resolved_draft_path_and_a_chain_of_k(tmp_path):
    launch = launch_of("sglang", EAGLE3, tmp_path)
    SGLANG.check(launch.spec)
    # k=3: three draft steps, top-1 each, and 4 draft tokens because SGLang counts the root token too.
    assert SGLANG.command(launch) == SGLANG_BASE + [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        DRAFT_PATH,
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
    ]


def test_sglang_ngram_is_a_chain_of_k_without_window_flags(tmp_path):
    launch = launch_of("sglang", NGRAM, tmp_path)
    SGLANG.check(launch.spec)
    assert SGLANG.command(launch) == SGLANG_BASE + [
        "--speculative-algorithm",
        "NGRAM",
        "--speculative-num-draft-tokens",
        "5",
        "--speculative-ngram-min-bfs-breadth",
        "1",
        "--speculative-ngram-max-bfs-breadth",
        "1",
    ]


def test_sglang_draft_model_is_standalone_with_tp_and_server_args_last(tmp_path):
    launch = launch_of("sglang", DRAFT_MODEL, tmp_path, tp=2, server_args=["--mem-fraction-static", "0.8"])
    SGLANG.check(launch.spec)
    assert SGLANG.command(launch) == SGLANG_BASE + ["--tp-size", "2"] + [
        "--speculative-algorithm",
        "STANDALONE",
        "--speculative-draft-model-path",
        DRAFT_PATH,
        "--speculative-num-steps",
        "2",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "3",
        "--mem-fraction-static",
        "0.8",
    ]


def test_sglang_mtp_is_eagle_without_a_draft_path_and_the_reference_has_no_sd_flags(tmp_path):
    mtp = launch_of("sglang", {"method": "mtp", "num_speculative_tokens": 2}, tmp_path)
    SGLANG.check(mtp.spec)
    assert SGLANG.command(mtp)[len(SGLANG_BASE) :] == [
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-num-steps",
        "2",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "3",
    ]
    reference = launch_of("sglang", None, tmp_path)
    SGLANG.check(reference.spec)
    assert SGLANG.command(reference) == SGLANG_BASE


def test_sglang_refuses_the_cpu_with_the_reason(tmp_path):
    with pytest.raises(ValueError, match="AMX"):
        SGLANG.command(launch_of("sglang", NGRAM, tmp_path, device="cpu"))


@pytest.mark.parametrize(
    "config, field, words",
    [
        ({"method": "medusa", "num_speculative_tokens": 3, "model": "d"}, "speculative_config.method", "medusa"),
        ({"method": "eagle3", "num_speculative_tokens": 3}, "speculative_config.model", "needs a draft model"),
        ({"method": "ngram", "num_speculative_tokens": 4, "model": "d"}, "speculative_config.model", "ignores"),
        (
            {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4},
            "speculative_config.prompt_lookup_max",
            "#21225",
        ),
        (
            {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2},
            "speculative_config.prompt_lookup_min",
            "#21225",
        ),
        (
            {"method": "eagle", "num_speculative_tokens": 3, "model": "d", "draft_tensor_parallel_size": 1},
            "speculative_config.draft_tensor_parallel_size",
            "has no setting",
        ),
        ({"method": "mtp", "num_speculative_tokens": 1, "model": "d"}, "speculative_config.model", "own layers"),
        ({"method": "ngram", "num_speculative_tokens": 0}, "speculative_config.num_speculative_tokens", ">= 1"),
    ],
)
def test_sglang_refusals_name_the_engine_and_the_field(config, field, words):
    error = refusal(SGLANG, config)
    assert (error.engine, error.field) == ("SGLang", field)
    assert str(error).startswith(f"{field}: SGLang ") and words in str(error)


def test_sglang_refuses_server_args_that_repeat_its_own_flags():
    error = refusal(SGLANG, NGRAM, server_args=["--speculative-num-draft-tokens=8"])
    assert (error.engine, error.field) == ("SGLang", "server_args") and "--speculative-num-draft-tokens" in str(error)


# ---------------------------------------------------------------- SGLang: per-request figures

# Worked example, k=3, histogram h=[2, 1, 0, 3] (index = drafts accepted in one verify step):
# steps = 2+1+0+3 = 6 = spec_verify_ct; accepted = 0*2 + 1*1 + 2*0 + 3*3 = 10; proposed = 6 steps * 3 = 18.
HISTOGRAM = [2, 1, 0, 3]
PER_STEP = {
    "num_spec_steps": 6,
    "num_draft_tokens": 18,
    "num_accepted_draft_tokens": 10,
    "per_step_accepted": [0, 0, 1, 3, 3, 3],
    "per_step_drafted": [3, 3, 3, 3, 3, 3],
    "num_spec_tokens": 3,
}
K3 = {"method": "eagle3", "num_speculative_tokens": 3, "model": DRAFT_NAME}  # the server's k
NAME_VARIANTS = [  # (histogram, proposed, accepted) as successive releases named them
    ("spec_correct_drafts_histogram", "spec_num_proposed_drafts", "spec_num_correct_drafts"),
    ("spec_accept_histogram", "spec_proposed_drafts", "spec_accepted_drafts"),
    ("spec_accept_histogram", "spec_draft_token_num", "spec_accept_token_num"),
]


def generate_shape(meta: dict) -> dict:
    return {"text": "...", "output_ids": [1, 2], "meta_info": {"id": "r1", "completion_tokens": 17, **meta}}


def chat_shape(meta: dict) -> dict:
    return {
        "id": "c1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "..."},
                "meta_info": {"completion_tokens": 17, **meta},
            }
        ],
    }


@pytest.mark.parametrize("shape", [generate_shape, chat_shape])
@pytest.mark.parametrize("histogram_key, proposed_key, accepted_key", NAME_VARIANTS)
def test_sglang_histogram_becomes_vllms_per_step_form(shape, histogram_key, proposed_key, accepted_key):
    meta = {
        "spec_verify_ct": 6,
        histogram_key: HISTOGRAM,
        proposed_key: 18,
        accepted_key: 10,
        "spec_accept_rate": 10 / 18,
        "spec_accept_length": 17 / 6,
    }
    figures = SGLANG.settle_request_sd(SGLANG.request_sd(shape(meta)), ServerSpec(model=TARGET, speculative_config=K3))
    assert figures == PER_STEP
    steps = steps_from_server(figures, output_tokens=17)  # what the per-request analyses read
    assert steps.acceptance_length == pytest.approx(1 + 10 / 6)


@pytest.mark.parametrize("histogram_key", ["spec_correct_drafts_histogram", "spec_accept_histogram"])
def test_sglang_histogram_without_a_proposed_count_gives_the_summary_form(histogram_key):
    raw = SGLANG.request_sd(generate_shape({"spec_verify_ct": 6, histogram_key: HISTOGRAM}))
    figures = SGLANG.settle_request_sd(raw, ServerSpec(model=TARGET, speculative_config=K3))
    # Proposals uncounted: whether each step drafted k is unknown, so no per-step arrays.
    assert figures == {"num_spec_steps": 6, "num_accepted_draft_tokens": 10, "num_spec_tokens": 3}
    assert steps_from_server(figures, output_tokens=17) is None


@pytest.mark.parametrize("proposed_key, accepted_key", [(p, a) for _, p, a in NAME_VARIANTS])
def test_sglang_without_a_histogram_gives_the_summary_form(proposed_key, accepted_key):
    # The research's example: 16 verify steps, 48 proposed, 32 accepted.
    meta = {"spec_verify_ct": 16, proposed_key: 48, accepted_key: 32, "spec_accept_rate": 0.6667}
    assert SGLANG.request_sd(chat_shape(meta)) == {
        "num_spec_steps": 16,
        "num_draft_tokens": 48,
        "num_accepted_draft_tokens": 32,
    }


def test_sglang_figures_that_disagree_are_unreadable_never_an_exception_in_the_stream():
    def problem(meta):
        figures = SGLANG.request_sd(generate_shape(meta))
        return SGLANG.settle_request_sd(figures, ServerSpec(model=TARGET, speculative_config=K3))["problem"]

    assert "spec_correct_drafts_histogram counts 6 verify steps but spec_verify_ct is 7" in problem(
        {"spec_verify_ct": 7, "spec_correct_drafts_histogram": HISTOGRAM, "spec_num_proposed_drafts": 21}
    )
    assert "spec_num_correct_drafts is 11" in problem(  # Σ i·h[i] is 10, not 11
        {"spec_verify_ct": 6, "spec_correct_drafts_histogram": HISTOGRAM, "spec_num_correct_drafts": 11}
    )
    assert "more than the server's k = 3" in problem(  # 19 proposals over 6 steps: more than 3 a step
        {"spec_verify_ct": 6, "spec_correct_drafts_histogram": HISTOGRAM, "spec_num_proposed_drafts": 19}
    )


def test_sglang_payload_without_spec_keys_has_no_figures():
    assert SGLANG.request_sd(generate_shape({})) is None  # a streamed chunk before the last one
    assert SGLANG.request_sd({"choices": [{"message": {"content": "x"}}]}) is None  # no return_meta_info
    assert SGLANG.request_sd({"choices": []}) is None
    assert SGLANG.request_sd(generate_shape({"spec_accept_rate": 0.5})) is None  # a rate is no count


def test_sglang_counters_are_unavailable_with_the_reason():
    text = (
        'sglang:spec_accept_length{engine_type="unified",model_name="sd-target"} 3.05\n'
        'sglang:spec_accept_rate{engine_type="unified",model_name="sd-target"} 0.68\n'
    )
    counters = SGLANG.counters(text, [TARGET], "http://127.0.0.1:8000/metrics")
    assert not counters.present and counters.num_draft_tokens == 0.0
    assert "http://127.0.0.1:8000/metrics" in counters.problem and "gauges" in counters.problem


# ---------------------------------------------------------------- TensorRT-LLM: command and options file

# Iteration stats on, and a queue deep enough for a whole repeat (trtllm-serve keeps 1000 when unset).
STATS = {"enable_iter_perf_stats": True, "iter_stats_max_iterations": 100_000}


def trtllm_base(tmp_path) -> list[str]:
    return [
        "trtllm-serve",
        "/models/target",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--backend",
        "pytorch",
        "--extra_llm_api_options",
        str(tmp_path / "trtllm-options-8000.yaml"),
    ]


def options_of(launch) -> dict:
    files = TRTLLM.launch_files(launch)
    assert list(files) == [launch.work_dir + "/trtllm-options-8000.yaml"]
    return json.loads(files[launch.work_dir + "/trtllm-options-8000.yaml"])


def test_trtllm_eagle3_options_and_command(tmp_path):
    launch = launch_of("trtllm", EAGLE3, tmp_path)
    TRTLLM.check(launch.spec)
    assert TRTLLM.command(launch) == trtllm_base(tmp_path)
    assert options_of(launch) == {
        **STATS,
        "speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": DRAFT_PATH},
    }


def test_trtllm_ngram_sets_every_field_from_the_declared_matcher(tmp_path):
    # NGram tries every size from max_matching_ngram_size down to 1: vLLM's lookup from 4 down to 1.
    launch = launch_of("trtllm", {**NGRAM, "prompt_lookup_min": 1, "prompt_lookup_max": 4}, tmp_path)
    TRTLLM.check(launch.spec)
    assert TRTLLM.command(launch) == trtllm_base(tmp_path)
    ngram = {
        "decoding_type": "NGram",
        "max_draft_len": 4,
        "max_matching_ngram_size": 4,
        "is_keep_all": True,
        "is_use_oldest": True,
        "is_public_pool": False,
    }
    assert options_of(launch) == {**STATS, "speculative_config": ngram}
    window = launch_of("trtllm", {**NGRAM, "prompt_lookup_min": 1, "prompt_lookup_max": 2}, tmp_path)
    TRTLLM.check(window.spec)
    assert options_of(window)["speculative_config"] == {**ngram, "max_matching_ngram_size": 2}


@pytest.mark.parametrize(
    "sizes, declared",
    [({}, "5-5"), ({"prompt_lookup_max": 4}, "4-4"), ({"prompt_lookup_min": 2, "prompt_lookup_max": 4}, "2-4")],
)
def test_trtllm_refuses_a_matcher_its_ngram_drafter_cannot_run(sizes, declared):
    # vLLM resolves no sizes to 5-5 and a lone maximum to min = max; NGram always goes down to 1.
    error = refusal(TRTLLM, {**NGRAM, **sizes})
    assert error.field == "speculative_config.prompt_lookup_min" and f"sizes {declared}" in str(error)
    assert "prompt_lookup_min=1" in str(error)


def test_trtllm_refuses_an_eagle_1_or_2_head():
    error = refusal(TRTLLM, {"method": "eagle", "num_speculative_tokens": 3, "model": DRAFT_NAME})
    assert error.field == "speculative_config.method" and "EAGLE-3 only" in str(error)


def test_trtllm_draft_model_with_tp_and_server_args_last(tmp_path):
    launch = launch_of("trtllm", DRAFT_MODEL, tmp_path, tp=2, server_args=["--max_batch_size", "8"])
    TRTLLM.check(launch.spec)
    assert TRTLLM.command(launch) == trtllm_base(tmp_path) + ["--tp_size", "2", "--max_batch_size", "8"]
    assert options_of(launch)["speculative_config"] == {
        "decoding_type": "Draft_Target",
        "max_draft_len": 2,
        "speculative_model": DRAFT_PATH,
    }


@pytest.mark.parametrize(
    "config, section",
    [({"method": "mtp", "num_speculative_tokens": 1}, {"decoding_type": "MTP", "num_nextn_predict_layers": 1})],
)
def test_trtllm_mtp_section(tmp_path, config, section):
    launch = launch_of("trtllm", config, tmp_path)
    TRTLLM.check(launch.spec)
    assert options_of(launch)["speculative_config"] == section


def test_trtllm_reference_keeps_iteration_stats_without_speculation(tmp_path):
    launch = launch_of("trtllm", None, tmp_path)
    TRTLLM.check(launch.spec)
    assert options_of(launch) == STATS
    assert TRTLLM.command(launch) == trtllm_base(tmp_path)
    with pytest.raises(ValueError, match="gpu"):
        TRTLLM.command(launch_of("trtllm", None, tmp_path, device="cpu"))


@pytest.mark.parametrize(
    "config, field, words",
    [
        ({"method": "suffix", "num_speculative_tokens": 3}, "speculative_config.method", "suffix"),
        ({"method": "draft_model", "num_speculative_tokens": 3}, "speculative_config.model", "needs a draft model"),
        (
            {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2},
            "speculative_config.prompt_lookup_min",
            "down to 1",
        ),
        (
            {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 0},
            "speculative_config.prompt_lookup_max",
            ">= 1",
        ),
        (
            {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "model": "d"},
            "speculative_config.model",
            "has no setting",
        ),
        (
            {"method": "eagle3", "num_speculative_tokens": 3, "model": "d", "draft_tensor_parallel_size": 1},
            "speculative_config.draft_tensor_parallel_size",
            "has no setting",
        ),
        ({"method": "mtp", "num_speculative_tokens": "2"}, "speculative_config.num_speculative_tokens", "integer"),
    ],
)
def test_trtllm_refusals_name_the_engine_and_the_field(config, field, words):
    error = refusal(TRTLLM, config)
    assert (error.engine, error.field) == ("TensorRT-LLM", field)
    assert str(error).startswith(f"{field}: TensorRT-LLM ") and words in str(error)


def test_trtllm_refuses_server_args_that_repeat_its_own_flags():
    error = refusal(TRTLLM, NGRAM, server_args=["--extra_llm_api_options", "mine.yaml"])
    assert (error.engine, error.field) == ("TensorRT-LLM", "server_args")


# ---------------------------------------------------------------- TensorRT-LLM: iteration stats

WHERE = "http://127.0.0.1:8000/metrics"
# Worked example: a prefill iteration without specDecodingStats (skipped), then two decode iterations:
# drafts 1 + 2 = 3 (request, step) pairs; draft tokens 3 + 6 = 9; accepted 2 + 1 = 3.
# Acceptance rate 3/9 = 1/3; acceptance length 1 + 3/3 = 2.0.
ITERATIONS = [
    {"iter": 1, "numActiveRequests": 2},
    {
        "iter": 2,
        "specDecodingStats": {
            "numDraftTokens": 3,
            "numAcceptedTokens": 2,
            "numRequestsWithDraftTokens": 1,
            "acceptanceLength": 3.0,
            "iterLatencyMS": 0.0,
            "draftOverhead": 0.0,
        },
    },
    {
        "iter": 3,
        "specDecodingStats": {
            "numDraftTokens": 6,
            "numAcceptedTokens": 1,
            "numRequestsWithDraftTokens": 2,
            "acceptanceLength": 1.5,
            "iterLatencyMS": 0.0,
            "draftOverhead": 0.0,
        },
    },
]


def test_trtllm_iteration_stats_are_summed():
    counters = type(TRTLLM)().counters(json.dumps(ITERATIONS), [TARGET], WHERE)  # fresh totals
    assert counters == iteration_counters(ITERATIONS, WHERE)
    assert counters.present
    assert (counters.num_drafts, counters.num_draft_tokens, counters.num_accepted_tokens) == (3, 9, 3)
    assert counters.acceptance_rate == pytest.approx(1 / 3) and counters.acceptance_length == pytest.approx(2.0)


# An empty list is a valid reading the first time (the zero a run starts from): see the running-totals test.
@pytest.mark.parametrize(
    "text, words",
    [
        (json.dumps(ITERATIONS[:1]), "specDecodingStats"),
        ("<html>not json</html>", "not TensorRT-LLM's JSON"),
        ('{"iter": 1}', "not TensorRT-LLM's list"),
        (
            json.dumps([{"specDecodingStats": {"numDraftTokens": 3, "numAcceptedTokens": 2}}]),
            "numRequestsWithDraftTokens",
        ),
    ],
)
def test_trtllm_counters_without_stats_are_unavailable_never_zeros(text, words):
    from pytest_specdec.engines.trtllm import TensorRTLLM

    counters = TensorRTLLM().counters(text, [TARGET], WHERE)  # a fresh engine: the totals are per instance
    assert not counters.present
    assert WHERE in counters.problem and words in counters.problem


def test_trtllm_counters_are_running_totals_because_each_read_drains_the_queue():
    import json as _json

    from pytest_specdec.engines.trtllm import TensorRTLLM

    engine = TensorRTLLM()
    where = "http://127.0.0.1:8000/metrics"
    stats = [
        {"specDecodingStats": {"numDraftTokens": 8, "numAcceptedTokens": 5, "numRequestsWithDraftTokens": 2}},
        {"specDecodingStats": {"numDraftTokens": 4, "numAcceptedTokens": 1, "numRequestsWithDraftTokens": 1}},
    ]
    before = engine.counters("[]", ["m"], where)  # nothing ran yet: a zero to subtract from, not unavailable
    assert before.present and before.num_draft_tokens == 0
    after = engine.counters(_json.dumps(stats), ["m"], where)
    run = after.delta(before, where)
    # 8 + 4 draft tokens, 5 + 1 accepted, 2 + 1 drafting steps: the run's, although the read drained the queue.
    assert (run.num_draft_tokens, run.num_accepted_tokens, run.num_drafts) == (12, 6, 3)
    # The next run starts from the totals so far; its own read adds only its iterations.
    again = engine.counters(_json.dumps(stats[:1]), ["m"], where)
    assert again.delta(after, where).num_draft_tokens == 8
    # A server whose iterations never carry the section (iteration stats off) ends unavailable, not zero.
    cold = TensorRTLLM()
    assert cold.counters("[]", ["m"], where).present
    second = cold.counters("[]", ["m"], where)
    assert not second.present and where in second.problem and "empty list" in second.problem
