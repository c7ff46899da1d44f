"""The reproduce lines of a saved run, run as printed: the server restarted and the load sent to it again.

The saved runs are the README's main job's own (n-gram on code edits, on vLLM's CPU build and on
llama.cpp; tests/integration/conftest.py's `main_job` keeps them): a user reproduces a run a CI log
printed, not one measured for the purpose, and no server is started to make one (a measurement per
engine took three vLLM starts, 171 s).  The printed speculative server line and the printed load line
run in a shell, as a user would paste them.  llama.cpp's load is the plugin's `replay`; vLLM's CPU
build's is `vllm bench serve` through ``python -m pytest_specdec bench``.
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


# The main job's n-gram tests on code edits, per engine.
SAVED = {"llamacpp": "test_llamacpp_ngram_on_code_edits", "vllm": "test_ngram_on_code_edits"}


@pytest.mark.own_servers
@pytest.mark.parametrize("engine", sorted(SAVED))
def test_a_saved_run_replays_from_its_printed_commands(main_job, specdec_pool, tmp_path, engine):
    result = main_job.result(SAVED[engine])
    assert result.spec.engine == engine
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
        assert replayed["failed"] == 0 and replayed["completed"] == len(result.speculative_runs[0].records), replayed
