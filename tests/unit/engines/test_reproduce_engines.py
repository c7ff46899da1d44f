"""Every engine's reproduce lines run: the server's own program restarts it, and the load goes to it again.

`reproduce` once printed ``trtllm-serve -m pytest_specdec replay ...`` and
``/usr/local/bin/llama-server -m pytest_specdec replay ...`` (every command
whose second word was not ``serve`` was taken for vLLM's CPU build), and a
TensorRT-LLM server line pointing at an options file in pytest's temporary
folder, which pytest deletes.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.engines import ENGINE_MODULES, LaunchRequest, engine_named
from pytest_specdec.engines.base import is_python
from pytest_specdec.load.patterns import resolve_pattern
from pytest_specdec.measure.reproduce import reproduce_commands

NGRAM = {"method": "ngram", "num_speculative_tokens": 4}
# A speculative config each engine runs as given.
CONFIGS = {"trtllm": {**NGRAM, "prompt_lookup_min": 1, "prompt_lookup_max": 4}}
DEVICES = {"vllm": ("gpu", "cpu"), "llamacpp": ("cpu",)}
CASES = [(name, device) for name in sorted(ENGINE_MODULES) for device in DEVICES.get(name, ("gpu",))]


def printed(engine: str, device: str, tmp_path: Path, **options) -> tuple[list[str], dict[str, str]]:
    """The server command an engine launches for an n-gram test, and the reproduce lines for a run of it."""
    spec = ServerSpec(model="m", speculative_config=CONFIGS.get(engine, NGRAM), engine=engine)
    launch = LaunchRequest(
        spec=spec,
        device=device,
        host="127.0.0.1",
        port=8123,
        model_path="/models/m.gguf" if engine == "llamacpp" else "/models/m",
        speculative_config=spec.speculative_config,
        kv_cache_bytes=None,
        python="/envs/engine/bin/python",
        work_dir=str(tmp_path / "specdec-servers"),
    )
    owner = engine_named(engine)
    for path, text in owner.launch_files(launch).items():  # as the server pool writes them before a start
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text, encoding="utf-8")
    command = owner.command(launch)
    run = SimpleNamespace(server_command=command, spec=spec)
    server = SimpleNamespace(command=command, url="http://127.0.0.1:8123", model="m")
    pattern = resolve_pattern("throughput_low", {"num_prompts": 2})
    lines = reproduce_commands(
        run, run, server, pattern, tmp_path / "prompts.jsonl", "tok", 3, True, engine=engine, **options
    )
    return command, lines


@pytest.mark.parametrize("engine, device", CASES)
def test_every_engines_printed_commands_parse_and_name_its_own_program(tmp_path, monkeypatch, engine, device):
    monkeypatch.setenv("SPECDEC_LLAMA_SERVER", "/usr/local/bin/llama-server")  # a llama-server binary
    command, lines = printed(engine, device, tmp_path)
    for side in ("reference_server", "speculative_server"):
        words = shlex.split(lines[side])
        program = command[: 3 if is_python(command[0]) else 1]  # python -m module, or the binary
        start = len(words) - len(command)
        assert words[start : start + len(program)] == program, (engine, lines[side])
    load = shlex.split(lines["bench"])
    # The load runs under a Python holding the plugin, or vLLM's own bench: never under the server's binary.
    assert is_python(load[0]) or load[:3] == ["vllm", "bench", "serve"], lines["bench"]
    assert load[0] not in ("trtllm-serve", "/usr/local/bin/llama-server")
    if load[1:4] == ["-m", "pytest_specdec", "replay"]:
        assert load[load.index("--engine") + 1] == engine and "--base-url" in load
        assert load[0] in (sys.executable, command[0])


@pytest.mark.parametrize("engine, device", CASES)
def test_a_trace_is_replayed_by_the_plugins_client_for_every_engine(tmp_path, engine, device):
    command, lines = printed(engine, device, tmp_path, replay=True)
    load = shlex.split(lines["bench"])
    assert load[1:4] == ["-m", "pytest_specdec", "replay"] and load[load.index("--engine") + 1] == engine


def test_the_trtllm_line_carries_its_options_file_which_pytest_deletes(tmp_path):
    command, lines = printed("trtllm", "gpu", tmp_path)
    options = command[command.index("--extra_llm_api_options") + 1]
    content = Path(options).read_text(encoding="utf-8")
    Path(options).unlink()  # pytest removes old temporary folders; the line must not need it
    words = shlex.split(lines["speculative_server"])
    assert words[:3] == ["printf", "%s", content] and words[3:5] == [">", Path(options).name]
    served = words[words.index("&&") + 1 :]
    assert served[0] == "trtllm-serve" and served[served.index("--extra_llm_api_options") + 1] == Path(options).name
    assert '"speculative_config"' in content and options not in lines["speculative_server"]
