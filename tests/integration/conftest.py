"""What the integration tests share: the README's main job, run once for every test that reads it.

The main job (examples/cpu, the default auto repeats, a CI log) measures n-gram, suffix and a poor draft on vLLM
and n-gram and a poor draft on llama.cpp, on the traffic other tests would measure them on.  It runs
once, in a process of its own as a user would run it, and its output, report and measured results
(kept by main_job_results.py) serve test_examples_cpu.py, test_measure_cpu.py and
test_llamacpp_cpu.py: one measurement of each configuration, every check made on it.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from main_job_results import KEEP_ENV

from pytest_specdec.serving.server import SERVER_TAG_ENV

ROOT = Path(__file__).resolve().parents[2]
# The main job took 21-29 minutes on boxes of this kind (a slower one timed out at 25 minutes).
MAIN_JOB_TIMEOUT_S = 2400


@dataclass(frozen=True)
class MainJob:
    returncode: int
    out: str  # the terminal output (stdout), as a CI log shows it
    err: str
    report: Path  # --specdec-report folder
    results_dir: Path
    left_running: list  # "pid: command" of every server process alive once the main job had ended

    def results(self, test_name: str) -> list:
        """The results one example measured (SpecDecResult, CapacityResult), in order."""
        kept = self.results_dir / f"{test_name}.pickle"
        assert kept.is_file(), f"the main job kept no results for {test_name}: {sorted(self.results_dir.iterdir())}"
        return pickle.loads(kept.read_bytes())

    def result(self, test_name: str):
        (only,) = self.results(test_name)
        return only


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "own_servers: the test stops the session's pool and starts servers of its own (a pytester session, a "
        "deployment started by hand, a server killed on purpose); it runs after every test that uses the pool",
    )


def pytest_collection_modifyitems(items):
    """Tests with servers of their own run last, in file order, after the plugin grouped the pooled ones.

    Each stops the pool first (one server at a time).  Where such a test stood between two tests of one
    pooled configuration, that configuration started twice: the vLLM reference, up for the agreement test,
    was stopped by the builds test and started again for test_cpu_servers.py (30-55 s a start here).
    """
    own = [item for item in items if item.get_closest_marker("own_servers")]
    if own:
        items[:] = [item for item in items if not item.get_closest_marker("own_servers")] + own


@pytest.fixture(scope="session")
def main_job(specdec_pool, tmp_path_factory) -> MainJob:
    specdec_pool.stop_running()  # one server at a time on this machine
    folder = tmp_path_factory.mktemp("main-job")
    report, kept = folder / "report", folder / "results"
    kept.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "GITHUB_STEP_SUMMARY")}
    env["CI"] = "true"
    env[KEEP_ENV] = str(kept)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "examples/cpu",
            "--specdec-cpu",
            "--specdec-report",
            str(report),
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.integration.main_job_results",
            f"--basetemp={folder / 'inner'}",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=MAIN_JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        # Interrupted as a user would (Ctrl-C): the inner session stops its servers on the way out; a
        # SIGKILL would leave them running beside every later test.
        process.send_signal(signal.SIGINT)
        try:
            out, err = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        err += f"\n[main job stopped after {MAIN_JOB_TIMEOUT_S} s]"
    (folder / "main-job.log").write_text(out + err)  # the whole output, for reading later
    # The outer session's servers were stopped above, so any process the plugin tagged is the main job's.
    return MainJob(process.returncode, out, err, report, kept, server_processes())


def server_processes() -> list[str]:
    """Live processes of any server the plugin started (each carries SERVER_TAG_ENV), as "pid: command"."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):  # gone meanwhile, or not ours to read
            continue
        if state != "Z" and any(item.startswith(f"{SERVER_TAG_ENV}=".encode()) for item in environ):
            found.append(f"{entry.name}: {command[:200]}")
    return found
