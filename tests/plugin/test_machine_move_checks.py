"""A bound check against the reference when the machine moves between the reference's runs and SD's: the
reference's draws are sent again after SD's (verdict.sequential.evidence), on fault servers paced by the launch hook.

These are judged by their timing (a bound a few percent from the speedup must be decidable without the move),
so they run in the serial session with the other timed fakes (scripts/test's SERIAL), never beside a worker.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.fault_suite import FAULT_SERVER, MODEL

FAULT = str(FAULT_SERVER)

MOVE_CONFTEST = f"""
import json, os, sys


def pytest_specdec_server_command(launch):
    side = "ngram" if launch.speculative_config else "reference"
    with open("launches.jsonl", "a") as handle:
        handle.write(json.dumps({{"side": side}}) + "\\n")
    # The machine gets SLOWER times slower once SD's runs are done: the reference's server started again
    # after SD's runs at the slower pace.  (Slowing SD's own server too can get the comparison flagged and
    # measured again, both sides, before any verdict, which carries the move into the reference on its own.)
    slower = float(os.environ["SLOWER"])
    later = [json.loads(line)["side"] for line in open("launches.jsonl")][:-1]
    pace = slower if side == "reference" and "ngram" in later else 1.0
    command = [sys.executable, {FAULT!r}, "--port", str(launch.port), "--model", launch.spec.model]
    return command + ["--chunk-s", str((0.013 if side == "ngram" else 0.02) * pace)]
"""

MOVE_SUITE = f"""
import pytest


@pytest.mark.specdec(model="{MODEL}", speculative_config={{"method": "ngram", "num_speculative_tokens": 4}})
@pytest.mark.workload("random_s", input_len=24, output_len=32)
@pytest.mark.access_pattern("concurrency_1", num_prompts=4)
def test_pair(specdec):
    result = specdec.run()
    # A bound ABOVE times the speedup against the reference's first runs: a plain reading fails it at once.
    try:
        result.assert_speedup(min=result.speedup() * float(__import__("os").environ["ABOVE"]))
    finally:
        print("MOVE", [d.describe() for d in result.decisions.values()])
"""


def _move_session(directory: Path, slower: float, above: float):
    (directory / "conftest.py").write_text(MOVE_CONFTEST)
    (directory / "test_pair.py").write_text(MOVE_SUITE)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "CI")}
    env.update(SLOWER=str(slower), ABOVE=str(above))
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", "-rA", "--specdec-cpu"]
    # The move is made where the reference's server is launched again: parked and resumed (serving.pool), it
    # would keep its first pace, so this session stops each server as a GPU session does.
    command += ["--specdec-repeats=auto", "--specdec-request-timeout", "5", "--specdec-cpu-parked-servers=0"]
    command += ["--specdec-report", str(directory / "report"), f"--specdec-log-dir={directory / 'logs'}"]
    command += [f"--basetemp={directory / 'tmp'}"]
    run = subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True, timeout=300)
    rows = json.loads((directory / "report" / "results.json").read_text())["results"]
    launches = [json.loads(line)["side"] for line in (directory / "launches.jsonl").read_text().splitlines()]
    return run, rows[0], launches


def _percent(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    assert found, (pattern, text)
    return float(found.group(1))


def test_a_machine_that_moved_around_sds_runs_is_measured_by_sending_the_reference_again(tmp_path):
    # The check cannot decide against the move it allows for unseen, so the reference's draws are sent again
    # after SD's (one more start of its server): the machine is 12% slower by then, the two sends of the
    # reference read that shift, and which side of SD's runs it fell on is what the zone turns on.
    run, row, launches = _move_session(tmp_path, slower=1.12, above=1.03)
    # One bracket a result: the reference's server starts once more.  Where the runs the bracket read were
    # too noisy to show the move alone decides nothing, SD's draws are sent again after it (its server again).
    assert launches[:3] == ["reference", "ngram", "reference"] and set(launches[3:]) <= {"ngram"}, launches
    (decision,) = row["decisions"].values()
    assert decision["outcome"] == "undecided", run.stdout[-3000:]
    # The move read is the injected one within the runs' own noise: 1/1.12 is -10.7%, and a box that slows
    # a fake's paced chunks by a few percent reads it a few points either side (CI read -9.2%).  What must
    # hold is that the move was read, in its direction and of its size, not its second digit.
    moved = _percent(r"the machine moved (-?[\d.]+)% between the reference's runs and SD's", decision["why"])
    read = _percent(r"the reference sent again after SD read the machine (-?[\d.]+)%", decision["basis"])
    injected = 100 * (1 / 1.12 - 1)
    for figure in (moved, read):
        assert 1.5 * injected < figure < 0.5 * injected, (figure, decision)


def test_a_steady_machine_sends_the_reference_again_and_then_decides(tmp_path):
    # The same check on a steady machine, its bound 4% above the speedup: within the move allowed for unseen
    # (10%), so the first look cannot fail it however tight its runs; the reference sent again reads no move,
    # and the check fails.  (At 6% above, a quiet first look failed it at once with the move allowed for.)
    run, row, launches = _move_session(tmp_path, slower=1.0, above=1.04)
    # SD's draws may be sent again after it where its own runs were too noisy to decide (its server again).
    assert launches[:3] == ["reference", "ngram", "reference"] and set(launches[3:]) <= {"ngram"}, launches
    (decision,) = row["decisions"].values()
    assert decision["outcome"] == "failed", run.stdout[-3000:]
    assert "the reference sent again after SD read the machine" in decision["basis"], decision
    assert run.returncode == 1
