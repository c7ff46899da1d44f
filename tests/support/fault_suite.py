"""Fault servers (tests/support/fault_server.py) started and stopped for a test, and an inner pytest
session run against them."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


FAULT_SERVER = Path(__file__).resolve().parent / "fault_server.py"


MODEL = "specdec:smollm2-135m"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FaultServers:
    """Fault servers started for one test, stopped (and checked gone) at its end."""

    def __init__(self):
        self.processes: list[subprocess.Popen] = []

    def start(
        self, mode: str, variant: int = 0, facts: dict | None = None, chunk_s: float = 0.002, dialect: str = "vllm"
    ) -> str:
        port = free_port()
        process = subprocess.Popen(
            [
                sys.executable,
                str(FAULT_SERVER),
                "--port",
                str(port),
                "--model",
                MODEL,
                "--mode",
                mode,
                "--variant",
                str(variant),
                "--facts",
                json.dumps(facts or {}),
                "--chunk-s",
                str(chunk_s),
                "--dialect",
                dialect,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.processes.append(process)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    return url
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError(f"fault server {mode} did not start")

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def run_suite(directory: Path, urls: dict, *extra: str) -> subprocess.CompletedProcess:
    (directory / "urls.json").write_text(json.dumps(urls))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "CI")}
    env["FAULT_URLS"] = str(directory / "urls.json")
    # Sixteen fault servers share two cores with the client here, so its dispatch lag can pass 10 ms
    # (27 ms seen while other work ran) and mark a run client-bound: not what this matrix is about, and
    # the client-bound verdict has its own tests (tests/unit/report/test_unavailable.py).
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-s",
            "-rA",
            "--specdec-repeats=1",  # one draw: the matrix is about faults, not about deciding
            "--specdec-request-timeout",
            "3",
            "--specdec-max-dispatch-lag-ms",
            "250",
            f"--basetemp={directory / 'tmp'}",
            *extra,
        ],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


ENGINE_SUITE = f"""
import json, os
import pytest

URLS = json.loads(open(os.environ["FAULT_URLS"]).read())


@pytest.mark.specdec(model="{MODEL}", engine=os.environ["FAULT_ENGINE"], endpoints={{"reference": URLS["reference"],
                     "speculative": URLS["speculative"]}},
                     speculative_config={{"method": "ngram", "num_speculative_tokens": 4,
                                         **json.loads(os.environ.get("FAULT_NGRAM", "{{}}"))}})
@pytest.mark.workload("random_s", input_len=24, output_len=8, endpoint=os.environ.get("FAULT_ENDPOINT", "completions"))
@pytest.mark.access_pattern("throughput_low", num_prompts=4)
def test_engine(specdec):
    result = specdec.run()
    run = result.speculative_runs[0]
    print("FIGURES acceptance=%.3f drafted=%s counted=%s ids=%s match=%.3f version=%s" % (
        result.acceptance_rate, [r.spec_decoding for r in run.records], run.counters.num_draft_tokens,
        [len(r.token_ids) for r in run.records], result.match_rate, run.engine_facts.get("version")))
    result.assert_acceptance(min_rate=0.0)
    result.assert_outputs_equivalent(min_match=1.0)
"""
