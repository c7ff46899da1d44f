"""Checks measured until decided (--specdec-repeats auto): at the minimum, with sends again on the running SD
server, undecided at the cap (not a pass; strict fails it), and acceptance never counted twice on a draw.

An inner session starts fault servers (tests/support/fault_server.py) through the launch hook: the reference paces
every chunk alike, the SD side faster, and with ``--content-spread`` at a pace that depends on the prompt,
as SD's does on what it can draft.  Each draw of the workload then has its own speedup, and the spread
between two draws is content, not timing: what the sequential rule has to tell apart.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fault_suite import MODEL
from tests.support import SUPPORT

FAULT = str(SUPPORT / "fault_server.py")

CONFTEST = f"""
import json, os, sys


def pytest_specdec_server_command(launch):
    side = "ngram" if launch.speculative_config else "reference"
    with open("launches.jsonl", "a") as handle:
        handle.write(json.dumps({{"side": side}}) + "\\n")
    command = [sys.executable, {FAULT!r}, "--port", str(launch.port), "--model", launch.spec.model]
    if side == "ngram":
        return command + ["--chunk-s", os.environ["SD_CHUNK_S"], "--content-spread", os.environ["SPREAD"]]
    return command + ["--chunk-s", "0.02"]
"""

SUITE = f"""
import pytest


@pytest.mark.specdec(model="{MODEL}", speculative_config={{"method": "ngram", "num_speculative_tokens": 4}})
@pytest.mark.workload("random_s", input_len=24, output_len=32)
@pytest.mark.access_pattern("concurrency_1", num_prompts=4)
def test_pair(specdec):
    result = specdec.run()
    result.assert_speedup(min=float(__import__("os").environ["BOUND"]))
    drafted = sum(run.counters.num_draft_tokens for run in result.speculative_runs)
    print("FIGURES", len(result.speculative_runs), len(result.timing_runs), len(result.outputs_per_repeat),
          drafted, result.runs_note(), "|", result.spread_note(), "|",
          [d.describe() for d in result.decisions.values()])
"""


def _session(directory: Path, *args: str, sd_chunk_s: float, spread: float, bound: float):
    (directory / "conftest.py").write_text(CONFTEST)
    (directory / "test_pair.py").write_text(SUITE)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "CI")}
    env.update(SD_CHUNK_S=str(sd_chunk_s), SPREAD=str(spread), BOUND=str(bound))
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", "-rA", "--specdec-cpu"]
    command += ["--specdec-repeats=auto"]  # the default, said: the logic suites' inner runs pin one draw
    command += ["--specdec-request-timeout", "5", "--specdec-report", str(directory / "report"), *args]
    command += [f"--specdec-log-dir={directory / 'logs'}", f"--basetemp={directory / 'tmp'}"]
    run = subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True, timeout=300)
    report = directory / "report" / "results.json"
    rows = json.loads(report.read_text())["results"] if report.is_file() else []
    figures = next((line.split() for line in run.stdout.splitlines() if line.startswith("FIGURES")), None)
    launches = [json.loads(line)["side"] for line in (directory / "launches.jsonl").read_text().splitlines()]
    return run, (rows[0] if rows else {}), figures, launches


def test_a_wide_margin_is_decided_at_the_minimum(tmp_path):
    # SD about 1.7x faster on every prompt (the fault server yields two tokens a step: at most ~2x), against a
    # bound of 0.5x: two draws decide it while their timing differs by less than ~9% (the first look's t with
    # one degree of freedom is 25.5; a neighbour on a shared box moved two such runs 3%).
    run, row, figures, launches = _session(tmp_path, sd_chunk_s=0.012, spread=0.0, bound=0.5)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert figures[1:3] == ["2", "0"], figures  # two draws, nothing sent again
    assert row["runs"] == "2 (decided at the minimum)" and row["outcome"] == "passed"
    (decision,) = row["decisions"].values()
    assert decision["outcome"] == "passed" and decision["stopped"] == "decided at the minimum"
    assert launches == ["reference", "ngram"]
    # No session budget: the check at the rule's own 5%, and the session's chance of a false fail said at its end.
    assert decision["false_fail"] == 0.05
    assert "1 timing check at 5.00% false fails each, no session budget" in run.stdout


def test_a_session_budget_splits_its_false_fails_over_the_tests_and_states_the_sessions_chance(tmp_path):
    run, row, _, _ = _session(tmp_path, "--specdec-session-false-fail=5%", sd_chunk_s=0.012, spread=0.0, bound=0.5)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    (decision,) = row["decisions"].values()
    share = 0.05 * 6 / math.pi**2  # one test: its first check gets 6/pi^2 of the whole budget
    assert decision["false_fail"] == pytest.approx(share) and decision["outcome"] == "passed"
    assert row["alarm_budget"] == {"false_fail": 0.05, "false_pass": 0.05, "session": 0.05, "tests": 1}
    document = json.loads((tmp_path / "report" / "results.json").read_text())
    alarms = document["false_alarms"]
    assert alarms["checks"] == 1 and alarms["any_false_fail_at_most"] == pytest.approx(share)
    assert (
        "1 timing check at 3.04% false fails each, the session budget 5.0% split over 1 test: the chance that any "
        "false-failed an unchanged build is at most 3.04%"
    ) in run.stdout
    assert 'id="false-alarms"' in (tmp_path / "report" / "report.html").read_text()


def test_an_undecided_check_sends_the_draws_again_on_the_running_server_and_counts_acceptance_once(tmp_path):
    # SD's pace depends on the prompt (+-30% around 1.5x): the two draws' speedups differ by content, and two of them
    # cannot bound the speedup; the same draws sent again show timing alone, which decides it.
    run, row, figures, launches = _session(tmp_path, sd_chunk_s=0.013, spread=0.3, bound=1.1)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    draws, again, compared, drafted = (int(float(v)) for v in figures[1:5])
    assert draws == 2 and again >= 2 and again % 2 == 0, figures  # every draw sent again, a round at a time
    assert launches == ["reference", "ngram"]  # no server started again for the extra runs
    # Acceptance and outputs are counted on each draw's first send only: 2 draws of 4 requests, 32 tokens each
    # (the fault server drafts 4 tokens per 2-token step: 16 steps, 64 draft tokens a request).
    assert compared == 2 and drafted == 2 * 4 * 64
    assert row["runs"] == f"{2 + again} (decided)" and row["outcome"] == "passed"
    (decision,) = row["decisions"].values()
    assert decision["basis"] == "timing from draws sent again" and decision["runs"] == 2 + again
    assert "between draws" in row["spread"] and "same draw sent again" in row["spread"]


def test_undecided_at_the_cap_is_not_a_pass_and_strict_fails_it(tmp_path):
    # The same servers with a cap of two runs a side: the draws alone cannot decide, and nothing more may be sent.
    run, row, figures, launches = _session(tmp_path, "--specdec-max-repeats=2", sd_chunk_s=0.013, spread=0.3, bound=1.1)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert figures[1:3] == ["2", "0"], figures
    assert row["outcome"] == "undecided" and row["runs"] == "2 (undecided)"
    (decision,) = row["decisions"].values()
    assert decision["outcome"] == "undecided" and decision["stopped"] == "undecided at the cap (2 runs a side)"
    assert "would decide it" in decision["why"]
    assert "undecided" in run.stdout  # the terminal table's outcome column
    # The session ends by naming the check and what would decide it, and counts it in its last line.
    lines = run.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "specdec undecided: 1 checks not passed" in line)
    assert lines[at + 1].startswith("test_pair: speedup") and "would decide it" in lines[at + 1], lines[at:]
    assert "1 passed, 1 undecided in" in lines[-1], lines[-1]
    strict_dir = tmp_path / "strict"
    strict_dir.mkdir()
    run, row, _, _ = _session(
        strict_dir, "--specdec-max-repeats=2", "--specdec-strict", sd_chunk_s=0.013, spread=0.3, bound=1.1
    )
    assert run.returncode == 1, run.stdout[-4000:]
    assert "undecided, and --specdec-strict fails an undecided check" in run.stdout
