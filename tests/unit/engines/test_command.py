import json

import pytest

from pytest_specdec.engines.base import LaunchRequest
from pytest_specdec.engines.vllm import build_command
from pytest_specdec.config.spec import parse_specdec_marker
from tests.support.fake_vllm import python_with_vllm_files


def launch(device, **marker):
    spec = parse_specdec_marker((), {"model": "openai/gpt-oss-120b", **marker})
    return LaunchRequest(
        spec=spec,
        device=device,
        host="127.0.0.1",
        port=41234,
        model_path="/models/gpt-oss-120b" if device == "cpu" else spec.model,
        speculative_config=spec.speculative_config,
        kv_cache_bytes=1 << 30 if device == "cpu" else None,
        python="/venv/bin/python",
    )


EAGLE3 = {"method": "eagle3", "model": "nvidia/gpt-oss-120b-Eagle3-throughput", "num_speculative_tokens": 1}


def test_gpu_command_is_vllm_serve_with_json_speculative_config():
    command = build_command(
        launch("gpu", speculative_config=EAGLE3, server_args=["--kv-cache-dtype", "fp8"], tensor_parallel_size=2)
    )
    assert command[:3] == ["vllm", "serve", "openai/gpt-oss-120b"]
    assert command[command.index("--served-model-name") + 1] == "openai/gpt-oss-120b"
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert command[command.index("--port") + 1] == "41234"
    assert command[command.index("--tensor-parallel-size") + 1] == "2"
    assert json.loads(command[command.index("--speculative-config") + 1]) == EAGLE3
    assert command[-2:] == ["--kv-cache-dtype", "fp8"]
    assert "--kv-cache-memory-bytes" not in command


def test_gpu_command_uses_the_vllm_script_beside_python(tmp_path):
    (tmp_path / "vllm").write_text("")
    request = launch("gpu")
    request = LaunchRequest(**{**request.__dict__, "python": str(tmp_path / "python")})
    assert build_command(request)[0] == str(tmp_path / "vllm")


def test_cpu_command_runs_the_api_server_module_with_a_kv_cache_size():
    command = build_command(launch("cpu", speculative_config={"method": "ngram", "num_speculative_tokens": 4}))
    assert command[:5] == [
        "/venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/gpt-oss-120b",
    ]
    assert command[command.index("--kv-cache-memory-bytes") + 1] == str(1 << 30)
    assert "--tensor-parallel-size" not in command
    assert json.loads(command[command.index("--speculative-config") + 1]) == {
        "method": "ngram",
        "num_speculative_tokens": 4,
    }


def test_reference_command_has_no_speculative_config():
    assert "--speculative-config" not in build_command(launch("cpu"))


def test_resolved_draft_path_goes_into_the_json():
    request = launch(
        "cpu",
        speculative_config={
            "method": "draft_model",
            "model": "specdec:smollm2-135m@layers=8",
            "num_speculative_tokens": 3,
        },
    )
    request = LaunchRequest(
        **{**request.__dict__, "speculative_config": {**request.speculative_config, "model": "/cache/layers8"}}
    )
    config = json.loads(build_command(request)[build_command(request).index("--speculative-config") + 1])
    assert config["model"] == "/cache/layers8"


def test_unknown_device_is_an_error():
    with pytest.raises(ValueError, match="device must be one of"):
        build_command(launch("tpu"))


def test_bundled_models_are_served_in_float32_on_the_cpu_build():
    def command_for(model, device="cpu", server_args=()):
        spec = parse_specdec_marker((), {"model": model, "server_args": list(server_args)})
        return build_command(
            LaunchRequest(
                spec=spec,
                device=device,
                host="127.0.0.1",
                port=1,
                model_path="/m",
                speculative_config=None,
                kv_cache_bytes=1 << 30,
                python="/py",
            )
        )

    bundled = command_for("specdec:smollm2-135m")
    assert bundled[bundled.index("--dtype") + 1] == "float32"
    assert "--dtype" not in command_for("openai/gpt-oss-120b")  # other models keep vLLM's choice
    assert "--dtype" not in command_for("specdec:smollm2-135m", device="gpu")
    chosen = command_for("specdec:smollm2-135m", server_args=["--dtype=bfloat16"])
    assert chosen.count("--dtype=bfloat16") == 1 and "float32" not in chosen  # the test's own choice wins


def test_sd_servers_get_detailed_per_request_metrics_when_the_engine_has_them():
    ngram = {"method": "ngram", "num_speculative_tokens": 4}
    request = launch("cpu", speculative_config=ngram)
    with_flag = build_command(LaunchRequest(**{**request.__dict__, "per_request_metrics": True}))
    assert with_flag[with_flag.index("--per-request-spec-decode-metrics") + 1] == "detailed"
    assert "--per-request-spec-decode-metrics" not in build_command(request)  # an engine without it: not passed
    reference = build_command(LaunchRequest(**{**launch("cpu").__dict__, "per_request_metrics": True}))
    assert "--per-request-spec-decode-metrics" not in reference  # nothing to report without SD
    own = launch("cpu", speculative_config=ngram, server_args=["--per-request-spec-decode-metrics", "summary"])
    own_flag = build_command(LaunchRequest(**{**own.__dict__, "per_request_metrics": True}))
    assert own_flag.count("--per-request-spec-decode-metrics") == 1 and "summary" in own_flag  # the user's wins


def test_the_per_request_metrics_probe_reads_the_engine_without_importing_it(tmp_path):
    from pytest_specdec.engines.vllm import supports_per_request_metrics

    def engine(name, text):
        return python_with_vllm_files(tmp_path, name, {"engine/arg_utils.py": text})

    assert supports_per_request_metrics(engine("new", "'--per-request-spec-decode-metrics'")) is True
    assert supports_per_request_metrics(engine("old", "no such flag here")) is False
    assert supports_per_request_metrics(str(tmp_path / "no-python")) is False
