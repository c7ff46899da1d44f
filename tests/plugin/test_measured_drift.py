"""--specdec-measure-drift through the plugin: the cost said before the first test, each side's server started once
more and sent its first draw again, and the stored-baseline gate's drift measured from those starts, said as such.

An inner session starts fault servers (tests/support/fault_server.py) through the launch hook, as
test_sequential_checks.py does, and records which side each start was for."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support import SUPPORT
from tests.support.fault_suite import MODEL

FAULT = str(SUPPORT / "fault_server.py")

CONFTEST = f"""
import json, sys


def pytest_specdec_server_command(launch):
    side = "ngram" if launch.speculative_config else "reference"
    with open("launches.jsonl", "a") as handle:
        handle.write(json.dumps({{"side": side}}) + "\\n")
    command = [sys.executable, {FAULT!r}, "--port", str(launch.port), "--model", launch.spec.model]
    return command + ["--chunk-s", "0.006" if side == "ngram" else "0.01"]
"""

SUITE = f"""
import pytest


@pytest.mark.specdec(model="{MODEL}", speculative_config={{"method": "ngram", "num_speculative_tokens": 4}})
@pytest.mark.workload("random_s", input_len=24, output_len=32)
@pytest.mark.access_pattern("concurrency_1", num_prompts=4)
def test_pair(specdec):
    result = specdec.run()
    print("MEASURED AGAIN", int(bool(result.remeasured)))
    result.assert_no_regression(metrics=["speedup_output_throughput"], tolerance=0.5)
"""


def _session(directory: Path, *args: str):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "CI")}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", "--specdec-cpu", "--specdec-repeats=1"]
    # Fault servers beside another worker's tests: the client's dispatch lag is not what this test is about
    # (tests/support/fault_suite.py says why 250 ms).
    command += ["--specdec-request-timeout", "5", "--specdec-max-dispatch-lag-ms", "250"]
    command += ["--specdec-report", str(directory / "report"), *args]
    command += [f"--specdec-log-dir={directory / 'logs'}", f"--basetemp={directory / 'tmp'}"]
    (directory / "launches.jsonl").unlink(missing_ok=True)
    run = subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True, timeout=300)
    launches = [json.loads(line)["side"] for line in (directory / "launches.jsonl").read_text().splitlines()]
    report = directory / "report" / "results.json"
    rows = json.loads(report.read_text())["results"] if report.is_file() else []
    return run, launches, (rows[0] if rows else {})


def again(out: str) -> int:
    return int(next(line for line in out.splitlines() if line.startswith("MEASURED AGAIN")).split()[-1])


def test_the_gate_reads_its_drift_from_servers_started_anew_and_says_so(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_pair.py").write_text(SUITE)
    # One start a side, and two more where the comparison was flagged cold beside other work and measured again
    # on servers started anew (measure.fairness): what each session's result says it did.
    recorded, launches, _ = _session(tmp_path, "--specdec-update-baselines")
    assert recorded.returncode == 0, recorded.stdout[-4000:]
    assert launches == ["reference", "ngram"] * (1 + again(recorded.stdout))  # without the flag, no more

    run, launches, row = _session(tmp_path, "--specdec-measure-drift")
    out = run.stdout
    assert run.returncode == 0, out[-4000:] + run.stderr[-2000:]
    assert launches == ["reference", "ngram"] * (2 + again(out))  # then each side started once more
    cost = out.index("--specdec-measure-drift: each test's reference and SD servers are started once more")
    assert "2 more server starts a test, up to 2 for the 1 test(s) here" in out and cost < out.index("test_pair.py")
    assert "reference started anew, its first draw again: output_throughput" in out
    drift = row["drift"]["speedup_output_throughput"]
    # One test: its two starts anew, a bound on two degrees of freedom, said with its source.
    assert drift["source"] == "measured" and drift["sessions"] == 2, drift
    assert (
        drift["value"] > drift["estimate"] and "measured: 2 servers started anew in this session" in drift["describe"]
    )
    assert "measured: 2 servers started anew" in out
