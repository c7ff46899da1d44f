"""Every flag the plugin derives from the test is reserved on every engine: a copy in server_args is refused
by name at collection, never left to override the test (``--spec-ngram-simple-size-m 8`` ran k=8 on llama.cpp
while the report showed the test's k)."""

from __future__ import annotations

import pytest

from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.engines import EngineConfigError, engine_named

NGRAM = {"method": "ngram", "num_speculative_tokens": 4}
TRTLLM_NGRAM = {**NGRAM, "prompt_lookup_min": 1, "prompt_lookup_max": 4}
LLAMACPP_NGRAM = {**NGRAM, "prompt_lookup_min": 3, "prompt_lookup_max": 3}

RESERVED = [
    ("llamacpp", LLAMACPP_NGRAM, "--spec-ngram-simple-size-m", "8"),
    ("llamacpp", LLAMACPP_NGRAM, "--spec-ngram-simple-size-n", "2"),
    ("llamacpp", LLAMACPP_NGRAM, "--spec-ngram-simple-min-hits", "3"),
    ("llamacpp", LLAMACPP_NGRAM, "--spec-ngram-size-m", "8"),  # the same setting on builds before 2026.5
    ("llamacpp", LLAMACPP_NGRAM, "--draft-max", "8"),
    ("llamacpp", None, "--no-kv-unified", None),
    ("vllm", NGRAM, "--speculative-config.num_speculative_tokens", "8"),
    ("vllm", NGRAM, "--speculative_config.method", "suffix"),
    ("vllm", NGRAM, "--tensor_parallel_size", "2"),
    ("vllm", NGRAM, "--served_model_name", "other"),
    ("sglang", NGRAM, "--host", "0.0.0.0"),
    ("sglang", NGRAM, "--port", "9000"),
    ("sglang", NGRAM, "--served-model-name", "other"),
    ("trtllm", TRTLLM_NGRAM, "--host", "0.0.0.0"),
    ("trtllm", TRTLLM_NGRAM, "--port", "9000"),
    ("trtllm", TRTLLM_NGRAM, "--served_model_name", "other"),
]


@pytest.mark.parametrize("joined", [False, True], ids=["two-words", "flag=value"])
@pytest.mark.parametrize("engine, config, flag, value", RESERVED, ids=[f"{e}{f}" for e, _, f, _ in RESERVED])
def test_a_server_arg_that_sets_what_the_test_declares_is_refused_by_name(engine, config, flag, value, joined):
    args = [flag] if value is None else ([f"{flag}={value}"] if joined else [flag, value])
    spec = ServerSpec(model="m", speculative_config=config, server_args=tuple(args), engine=engine)
    with pytest.raises(EngineConfigError) as caught:
        engine_named(engine).check(spec)
    assert caught.value.field == "server_args" and flag in str(caught.value)


@pytest.mark.parametrize(
    "engine, config, args",
    [
        ("llamacpp", LLAMACPP_NGRAM, ["-np", "4", "--threads", "2"]),  # the plugin's defaults, not the test's
        ("vllm", NGRAM, ["--enforce-eager", "--max-num-seqs", "4", "--per-request-spec-decode-metrics", "off"]),
        ("sglang", NGRAM, ["--mem-fraction-static", "0.8"]),
        ("trtllm", TRTLLM_NGRAM, ["--max_batch_size", "8"]),
    ],
)
def test_other_server_args_pass(engine, config, args):
    engine_named(engine).check(ServerSpec(model="m", speculative_config=config, server_args=tuple(args), engine=engine))
