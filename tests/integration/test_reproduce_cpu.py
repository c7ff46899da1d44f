"""The reproduce lines of a saved run, run as printed: the server restarted and the load sent to it again.

One short measurement per engine (two prompts of 8 tokens), its servers
stopped, then the printed speculative server line and the printed load line
run in a shell, as a user would paste them.  llama.cpp's load is the plugin's
`replay`; vLLM's CPU build's is `vllm bench serve` through ``python -m
pytest_specdec bench``.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
import urllib.request

import pytest

BUNDLED = "specdec:smollm2-135m"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 3, "prompt_lookup_max": 3}
START_TIMEOUT_S = 180


def wait_ready(base_url: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the printed server line exited with {process.returncode}"
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"the printed server line was not ready at {base_url} within {START_TIMEOUT_S} s")


@pytest.mark.own_servers
@pytest.mark.workload("random_s", input_len=24, output_len=8)
@pytest.mark.access_pattern("throughput_low", num_prompts=2, max_concurrency=1)
@pytest.mark.parametrize(
    "engine",
    [
        pytest.param(
            engine,
            marks=pytest.mark.specdec(model=BUNDLED, engine=engine, speculative_config=NGRAM, server_args=args),
            id=engine,
        )
        for engine, args in (("llamacpp", []), ("vllm", ["--enforce-eager"]))
    ],
)
def test_a_saved_run_replays_from_its_printed_commands(specdec, specdec_pool, tmp_path, engine):
    result = specdec.run()
    lines = result.reproduce
    specdec_pool.stop_running()  # the printed line starts the server on the port the run used
    bench = shlex.split(lines["bench"])
    base_url = bench[bench.index("--base-url") + 1]
    server = subprocess.Popen(
        ["bash", "-c", lines["speculative_server"]],
        cwd=tmp_path,
        stdout=open(tmp_path / "server.log", "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    try:
        wait_ready(base_url, server)
        done = subprocess.run(["bash", "-c", lines["bench"]], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    assert done.returncode == 0, (lines["bench"], done.stdout[-2000:], done.stderr[-3000:])
    if engine == "llamacpp":  # the plugin's replay prints the run's metrics
        replayed = json.loads(done.stdout)
        assert replayed["failed"] == 0 and replayed["completed"] == 2, replayed
