"""The session report end to end in pytester runs: table, files, xdist, CI summary, progress.

Results are built from given figures by test_gate's conftest (the report
plumbing is under test, not a measurement); examples/cpu's run on real
servers is in tests/integration/test_examples_cpu.py.
"""

import json
import os
import pty
import subprocess
import sys

import pytest
from tests.support.inner_results import MARKS, RESULTS_CONFTEST

TWO_TESTS = (
    MARKS
    + """
def test_fast(make_result):
    make_result().assert_speedup(min=1.2)

def test_slow(make_result):
    make_result(sd=(20.0,)).assert_speedup(min=1.2)
"""
)


@pytest.fixture
def suite(pytester):
    pytester.makeconftest(RESULTS_CONFTEST)
    pytester.makepyfile(test_report_suite=TWO_TESTS)
    return pytester


def test_report_directory_and_terminal_table(suite, monkeypatch):
    summary = suite.path / "step_summary.md"
    summary.write_text("earlier\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = suite.runpytest(
        "--specdec-cpu", "-p", "no:cacheprovider", "--specdec-report", "out", "--specdec-gpu-usd-per-hour", "3.6"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*= specdec results =*",
            "test*SD*workload*pattern*speedup*accept*baseline*runs*outcome",
            "test_fast*ngram k=4*code_edit*throughput_low*1.50x*60%*not checked*passed",
            "test_slow*ngram k=4*code_edit*throughput_low*0.67x*failed",
            "report: written * files to */out; summary appended to *step_summary.md",
        ]
    )
    assert "SD config" not in result.stdout.str()  # the full table is the report's (and -v's)
    out = suite.path / "out"
    document = json.loads((out / "results.json").read_text())
    rows = {row["test"].split("::")[1]: row for row in document["results"]}
    assert set(rows) == {"test_fast", "test_slow"}
    assert (
        rows["test_fast"]["speedup_output_throughput"] == pytest.approx(1.5)
        and rows["test_slow"]["outcome"] == "failed"
    )
    # 1e6 / 30 tok/s * $3.6 / 3600 s = $33.33 per 1M output tokens without SD, $22.22 with.
    assert rows["test_fast"]["reference_usd_per_1m_tokens"] == pytest.approx(33.333, abs=1e-3)
    assert (out / "results.csv").read_text().count("\n") == 3
    assert "| test_fast |" in (out / "summary.md").read_text()
    assert (out / "speedup_heatmap.png").read_bytes().startswith(b"\x89PNG")
    appended = summary.read_text()
    assert appended.startswith("earlier\n## pytest-specdec results") and "| test_slow |" in appended


def test_the_full_table_on_the_terminal_with_verbose(suite):
    result = suite.runpytest("--specdec-cpu", "-p", "no:cacheprovider", "-v")
    result.stdout.fnmatch_lines(
        [
            "test*SD config*workload*pattern*speedup*expected*accept*length*TPOT*TTFT*same output*baseline*outcome",
            "test_fast*ngram k=4*code_edit*throughput_low*1.50x*3.40x*60%*3.40*1.50x*1.00x*100%*not checked*passed",
        ]
    )


def test_rows_from_xdist_workers_reach_one_report(suite):
    pytest.importorskip("xdist")
    result = suite.runpytest_subprocess("--specdec-cpu", "-p", "no:cacheprovider", "-n", "2", "--specdec-report", "out")
    result.assert_outcomes(passed=1, failed=1)
    document = json.loads((suite.path / "out" / "results.json").read_text())
    assert sorted(row["test"].split("::")[1] for row in document["results"]) == ["test_fast", "test_slow"]
    result.stdout.fnmatch_lines(["*= specdec results =*"])


def test_results_hook_receives_the_rows(suite):
    suite.makeconftest(
        RESULTS_CONFTEST
        + """
def pytest_specdec_results(config, rows, report_dir):
    print(f"exported {len(rows)} rows, report_dir={report_dir}, speedups "
          f"{sorted(round(r['speedup_output_throughput'], 2) for r in rows)}")
"""
    )
    result = suite.runpytest("--specdec-cpu", "-p", "no:cacheprovider", "-s")
    assert "exported 2 rows, report_dir=None, speedups [0.67, 1.5]" in result.stdout.str()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--specdec-gpu-price", "cheap"], "*--specdec-gpu-price: expected a price in USD per hour*"),
        (["--specdec-gpu-price", "-1"], "*--specdec-gpu-price: must be a finite number >= 0*"),
        (["--specdec-report", "a_file.txt"], "*--specdec-report *a_file.txt: exists and is not a directory*"),
    ],
)
def test_bad_report_options_are_usage_errors(suite, args, message):
    (suite.path / "a_file.txt").write_text("not a directory")
    result = suite.runpytest("--specdec-cpu", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_bad_price_in_the_ini_names_the_key(suite):
    suite.makeini("[pytest]\nspecdec_gpu_usd_per_hour = lots\n")
    result = suite.runpytest("--specdec-cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini setting specdec_gpu_usd_per_hour: expected a price*"])


PROGRESS_TEST = (
    MARKS
    + """
import time

def test_progress(specdec):
    live = specdec.measurements.progress.start("SD on code_edit/throughput_low", 3)
    for done in (1, 2, 3):
        time.sleep(0.6)
        live.update(done, 3)
    live.stop()
    print("progress kind:", type(specdec.measurements.progress).__name__)
"""
)


def run_in_terminal(directory, env, *args):
    """Run pytest with a pseudo-terminal as stdout, as a developer's shell would."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "--specdec-cpu", "-p", "no:cacheprovider", "-s", *args],
        cwd=directory,
        stdout=terminal,
        stderr=terminal,
        env=env,
    )
    os.close(terminal)
    chunks = []
    while True:
        try:
            data = os.read(controller, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    process.wait(timeout=120)
    os.close(controller)
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.fixture
def progress_suite(pytester):
    pytester.makepyfile(test_progress_suite=PROGRESS_TEST)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "BUILD_NUMBER", "PYTEST_ADDOPTS")}
    return pytester.path, env


def test_progress_line_is_rewritten_in_place_on_a_terminal(progress_suite):
    directory, env = progress_suite
    out = run_in_terminal(directory, env)
    assert "progress kind: LiveProgress" in out
    # Each update rewrites the same line: a carriage return, the text, no newline in between.
    assert "\r[specdec] SD on code_edit/throughput_low: 1/3 requests, 1 s elapsed" in out
    assert "\r[specdec] SD on code_edit/throughput_low: 3/3 requests, 2 s elapsed" in out
    between = out.split("1/3 requests")[1].split("3/3 requests")[0]
    assert "\n" not in between


def test_progress_stays_quiet_in_ci_logs_and_under_q(progress_suite):
    directory, env = progress_suite
    ci = run_in_terminal(directory, dict(env, CI="true"))
    assert "progress kind: QuietProgress" in ci and "requests," not in ci
    quiet = run_in_terminal(directory, env, "-q")
    assert "progress kind: QuietProgress" in quiet and "requests," not in quiet
