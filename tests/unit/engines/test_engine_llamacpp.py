"""llama.cpp by construction: command lines, refusals, its response and metrics formats, GGUF drafts.

The real server runs in tests/integration/test_llamacpp_cpu.py; here every
payload is one llama-server sends (shapes from its server-task.cpp and
server-common.cpp), built by hand.
"""

import numpy as np
import pytest

from pytest_specdec.config.spec import MarkerError, parse_specdec_marker
from pytest_specdec.engines import llamacpp
from pytest_specdec.engines.base import LaunchRequest
from pytest_specdec.engines.llamacpp_serve import parser
from pytest_specdec.serving.gguf_models import GgufModelError, resolve_gguf, write_truncated_gguf

ENGINE = llamacpp.ENGINE
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 3}
DRAFT = {"method": "draft_model", "model": "specdec:smollm2-135m@layers=8", "num_speculative_tokens": 3}


def launch(config=None, server_args=(), monkeypatch=None):
    spec = parse_specdec_marker(
        (),
        {
            "model": "specdec:smollm2-135m",
            "engine": "llamacpp",
            "speculative_config": config,
            "server_args": list(server_args),
        },
    )
    resolved = dict(config, model="/cache/draft.gguf") if config and "model" in config else config
    return LaunchRequest(spec, "cpu", "127.0.0.1", 8123, "/pkg/target.gguf", resolved, None, python="/venv/python")


@pytest.fixture(autouse=True)
def no_binary(monkeypatch):
    monkeypatch.delenv(llamacpp.BINARY_ENV, raising=False)
    monkeypatch.setattr(llamacpp.shutil, "which", lambda name: None)


def test_the_n_gram_command_is_llama_servers_own_flags_run_by_the_shim_without_a_binary():
    command = ENGINE.command(launch(NGRAM))
    assert command == [
        "/venv/python",  # another environment's Python runs the shim by its file
        llamacpp.SHIM_PATH,
        "-m",
        "/pkg/target.gguf",
        "--alias",
        "specdec:smollm2-135m",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--metrics",
        "-np",
        "16",
        "-c",
        "8192",
        "--kv-unified",
        "--spec-type",
        "ngram-simple",
        "--spec-ngram-simple-size-n",
        "3",
        "--spec-ngram-simple-size-m",
        "4",
        "--spec-ngram-simple-min-hits",
        "1",
    ]
    # The shim takes exactly what the engine emits.
    args = parser().parse_args(command[2:])
    assert (args.spec_type, args.spec_ngram_simple_size_n, args.spec_ngram_simple_size_m) == ("ngram-simple", 3, 4)
    assert args.kv_unified  # one 8192-token context for all 16 slots, not 512 tokens each


@pytest.mark.parametrize("sizes, n", [({}, 5), ({"prompt_lookup_max": 4}, 4), ({"prompt_lookup_min": 2}, 2)])
def test_n_gram_sizes_resolve_as_vllm_resolves_them(sizes, n):
    # vLLM 0.32: both 5 when neither is given, one given stands for both (3 was this engine's own default).
    command = ENGINE.command(launch({"method": "ngram", "num_speculative_tokens": 4, **sizes}))
    assert command[command.index("--spec-ngram-simple-size-n") + 1] == str(n)


def test_a_draft_model_needs_its_spec_type_and_a_real_binary_is_preferred(monkeypatch):
    monkeypatch.setattr(llamacpp.shutil, "which", lambda name: "/usr/bin/llama-server")
    command = ENGINE.command(launch(DRAFT, server_args=["-t", "2"]))
    assert command[0] == "/usr/bin/llama-server"
    tail = command[command.index("--spec-type") :]
    assert tail == [
        "--spec-type",
        "draft-simple",
        "-md",
        "/cache/draft.gguf",
        "--spec-draft-n-max",
        "3",
        "--spec-draft-n-min",
        "0",
        "--spec-draft-p-min",
        "0",
        "-t",
        "2",
    ]
    assert parser().parse_args(command[1 : command.index("-t")]).spec_draft_p_min == 0.0  # drafts all k, as vLLM
    monkeypatch.setenv(llamacpp.BINARY_ENV, "/opt/llama/bin/llama-server")
    assert ENGINE.command(launch(DRAFT))[0] == "/opt/llama/bin/llama-server"
    assert "--spec-type" not in ENGINE.command(launch(None))  # the reference drafts nothing


@pytest.mark.parametrize(
    "config, server_args, field, words",
    [
        (
            {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2},
            (),
            "speculative_config.prompt_lookup_min",
            "matches one n-gram length",
        ),
        (
            {"method": "suffix", "num_speculative_tokens": 4},
            (),
            "speculative_config.method",
            "cannot run method 'suffix'",
        ),
        ({"method": "eagle3", "model": "x", "num_speculative_tokens": 3}, (), "speculative_config.method", "eagle3"),
        (
            {"method": "ngram", "num_speculative_tokens": 4, "model": "d"},
            (),
            "speculative_config.model",
            "n-gram lookup takes no draft model",
        ),
        (NGRAM, ("-md", "x.gguf"), "server_args", "flag -md is set by the plugin"),
        (DRAFT, ("--spec-draft-n-max=8",), "server_args", "flag --spec-draft-n-max"),
        (DRAFT, ("--spec-draft-p-min", "0.75"), "server_args", "flag --spec-draft-p-min"),
    ],
)
def test_what_llama_cpp_cannot_run_is_refused_at_collection(config, server_args, field, words):
    with pytest.raises(MarkerError) as refused:
        parse_specdec_marker(
            (),
            {
                "model": "specdec:smollm2-135m",
                "engine": "llamacpp",
                "speculative_config": config,
                "server_args": list(server_args),
            },
        )
    assert refused.value.field == field and "llama.cpp" in str(refused.value) and words in str(refused.value)


def test_the_final_chunk_carries_the_requests_drafted_and_accepted_tokens():
    # The last /v1/completions chunk (finish_reason set) has timings; draft_n appears once something was drafted.
    final = {
        "choices": [{"text": "", "finish_reason": "length"}],
        "usage": {"completion_tokens": 32, "prompt_tokens": 192},
        "timings": {"predicted_n": 32, "predicted_ms": 900.0, "draft_n": 40, "draft_n_accepted": 23},
    }
    assert ENGINE.request_sd(final) == {"num_draft_tokens": 40, "num_accepted_draft_tokens": 23}
    final["timings"] = {"predicted_n": 32, "predicted_ms": 900.0}  # nothing drafted: zero, not unknown
    assert ENGINE.request_sd(final) == {"num_draft_tokens": 0, "num_accepted_draft_tokens": 0}
    assert ENGINE.request_sd({"choices": [{"text": "a"}]}) is None  # a partial chunk
    with pytest.raises(ValueError, match="draft_n_accepted = 5 exceeds timings.draft_n = 4"):
        ENGINE.request_sd({"timings": {"predicted_n": 3, "draft_n": 4, "draft_n_accepted": 5}})
    # Token ids come per chunk under "verbose", which the engine asks for in every request, and every
    # prompt is prefilled in full: a slot's reused KV made an SD side that had seen the prompts before
    # 33.7x faster to the first token than a reference measured cold.
    assert ENGINE.completion_payload({"prompt": "p", "max_tokens": 4}) == {
        "prompt": "p",
        "max_tokens": 4,
        "verbose": True,
        "cache_prompt": False,
    }


METRICS = """# HELP llamacpp:spec_decode_num_drafts_total Total speculative decoding verification steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 10
llamacpp:spec_decode_num_draft_tokens_total 40
llamacpp:spec_decode_num_accepted_tokens_total 22
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 9
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 7
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 4
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="3"} 2
llamacpp:tokens_predicted_total 320
"""


def test_the_counters_and_their_positions_come_from_llamacpp_metrics():
    counters = ENGINE.counters(METRICS, ["specdec:smollm2-135m"], "http://h/metrics")
    assert (counters.num_drafts, counters.num_draft_tokens, counters.num_accepted_tokens) == (10, 40, 22)
    # 9 + 7 + 4 + 2 = 22: each step's accepted tokens counted at every position below its count.
    assert counters.accepted_per_position == {0: 9, 1: 7, 2: 4, 3: 2}
    assert counters.acceptance_length == pytest.approx(1 + 22 / 10)
    missing = ENGINE.counters("llamacpp:tokens_predicted_total 3\n", ["m"], "http://h/metrics")
    assert (
        not missing.present
        and "no llamacpp:spec_decode_num_accepted_tokens_total at http://h/metrics" in missing.problem
        and "--metrics" in missing.problem
    )


def test_gguf_names_resolve_to_files_and_anything_else_is_named(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    assert resolve_gguf(str(model)) == str(model)
    for name in ("meta-llama/Llama-3.1-8B", str(tmp_path / "missing.gguf")):
        with pytest.raises(GgufModelError, match="llama.cpp serves GGUF files"):
            resolve_gguf(name)


def test_a_truncated_gguf_keeps_the_first_blocks_byte_for_byte(tmp_path):
    import gguf  # a dependency of the [cpu] extra

    source = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(source), "llama")
    writer.add_block_count(4)
    writer.add_string("general.name", "tiny")
    writer.add_array("tokenizer.ggml.tokens", ["<s>", "a", "b"])
    rng = np.random.default_rng(0)
    names = ["token_embd.weight", *(f"blk.{i}.attn_q.weight" for i in range(4)), "output_norm.weight"]
    tensors = {name: rng.standard_normal((8, 4)).astype(np.float32) for name in names}
    for name, tensor in tensors.items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    write_truncated_gguf(source, tmp_path / "draft.gguf", 2)
    reader = gguf.GGUFReader(str(tmp_path / "draft.gguf"))
    count = reader.get_field("llama.block_count")
    assert count.parts[count.data[0]][0] == 2
    kept = {t.name: t for t in reader.tensors}
    assert sorted(kept) == sorted(
        ["token_embd.weight", "blk.0.attn_q.weight", "blk.1.attn_q.weight", "output_norm.weight"]
    )
    for name, tensor in kept.items():
        assert np.array_equal(np.asarray(tensor.data).reshape(8, 4), tensors[name])
    tokens = reader.get_field("tokenizer.ggml.tokens")
    assert [bytes(tokens.parts[i]).decode() for i in tokens.data] == ["<s>", "a", "b"]
    with pytest.raises(ValueError, match="layers must be from 1 to 3, got 4"):
        write_truncated_gguf(source, tmp_path / "bad.gguf", 4)
    assert not (tmp_path / "bad.gguf").exists() or (tmp_path / "bad.gguf").stat().st_size == 0


def test_the_version_is_the_servers_build_or_else_the_package_that_ran_it():
    engine = llamacpp.ENGINE
    assert engine.version_from("/props", {"build_info": "b7702-1a2b3c4"}) == "b7702-1a2b3c4"
    # Built outside llama.cpp's git tree (as the xllamacpp wheel is): build 0 says nothing.
    assert engine.version_from("/props", {"build_info": "b0-unknown"}) is None
    assert engine.version_from("/props", ["not", "a", "dict"]) is None
    from importlib.metadata import version

    shim = ["python", "-m", llamacpp.SHIM_MODULE, "-m", "model.gguf"]
    assert engine.local_version(shim) == f"xllamacpp {version('xllamacpp')}"
    assert engine.local_version(["/usr/bin/llama-server", "-m", "model.gguf"]) is None
