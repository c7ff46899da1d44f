"""--specdec-history end to end in pytester runs: what a session records, xdist, concurrent sessions,
the opt-in change-point check and baselines from history.  The inner tests build results from given
figures (tests/inner_results.py): the history is under test here, not a measurement."""

import os
import subprocess
import sys

import pytest

from inner_results import MARKS, RESULTS_CONFTEST
from pytest_specdec.history.store import open_history
from pytest_specdec.history.url import parse_history_url

GATED = MARKS + """
import os

def test_gated(make_result):
    scale = float(os.environ.get("SPEEDUP_SCALE", "1"))
    result = make_result(ref=(30.0, 30.6, 29.7), sd=(45.0 * scale, 45.9 * scale, 44.6 * scale),
                         ref_tpot=(33.0, 32.6, 33.4), sd_tpot=(22.0, 22.3, 21.8), accepted=(240.0, 238.0, 242.0))
    if os.environ.get("GATE"):
        result.assert_no_regression()
"""

MANY = """
import pytest

NGRAM = {"method": "ngram", "num_speculative_tokens": 4}

@pytest.mark.workload("code_edit")
@pytest.mark.access_pattern("throughput_low")
@pytest.mark.parametrize("n", [pytest.param(n, marks=pytest.mark.specdec(model=f"m{n % 2}", speculative_config=NGRAM))
                               for n in range(6)])
def test_many(make_result, n):
    make_result(sd=(40.0 + n,))
"""


@pytest.fixture
def inner(pytester):
    pytester.makeconftest(RESULTS_CONFTEST)
    pytester.makepyfile(test_gated=GATED, test_many=MANY)
    return pytester


def run(pytester, *args):
    return pytester.runpytest("--specdec-cpu", "-p", "no:cacheprovider", *args)


def sessions(url):
    with open_history(parse_history_url(url)) as store:
        return store.sessions(), store.figures()


def test_a_session_is_recorded_with_its_commit_and_every_row(inner, history_url):
    result = run(inner, f"--specdec-history={history_url}", "--specdec-history-commit", "abc123",
                 "--specdec-history-branch", "feature")
    result.assert_outcomes(passed=7)
    result.stdout.fnmatch_lines(["*specdec history*", "history: * figures of this session recorded in *"])
    (session,), figures = sessions(history_url)
    assert (session["commit"], session["branch"], session["outcome"]) == ("abc123", "feature", "passed")
    assert {f["test"] for f in figures} == {"test_gated.py::test_gated",
                                             *(f"test_many.py::test_many[{n}]" for n in range(6))}
    gated = {f["metric"]: f["value"] for f in figures if f["test"] == "test_gated.py::test_gated"}
    assert gated["speedup_output_throughput"] == pytest.approx(1.5, rel=0.01)
    assert gated["acceptance_rate"] == pytest.approx(0.6) and gated["reference_median_tpot_ms"] == pytest.approx(33.0)
    assert session["figures"] == len(figures)


def test_a_failed_session_is_recorded_as_failed_and_a_second_session_appends(inner, tmp_path):
    url = str(tmp_path / "h.db")
    run(inner, f"--specdec-history={url}", "-k", "gated").assert_outcomes(passed=1)
    inner.makepyfile(test_broken=MARKS + "\ndef test_broken(make_result):\n    make_result()\n    assert False\n")
    run(inner, f"--specdec-history={url}", "-k", "broken").assert_outcomes(failed=1)
    recorded, figures = sessions(url)
    assert [s["outcome"] for s in recorded] == ["passed", "failed"]
    assert {f["outcome"] for f in figures if f["test"] == "test_broken.py::test_broken"} == {"failed"}, {(f["test"], f["outcome"]) for f in figures}


def test_an_xdist_run_records_one_session_with_every_workers_rows(inner, tmp_path):
    url = str(tmp_path / "h.db")
    run(inner, "-n", "2", f"--specdec-history={url}").assert_outcomes(passed=7)
    (session,), figures = sessions(url)
    assert len({f["test"] for f in figures}) == 7 and session["figures"] == len(figures)


def test_sessions_and_an_xdist_run_writing_at_once_lose_nothing(inner, history_url):
    base = [sys.executable, "-m", "pytest", "--specdec-cpu", "-p", "no:cacheprovider", "-q",
            f"--specdec-history={history_url}"]
    runs = [base, base, [*base, "-n", "2"]]
    processes = [subprocess.Popen(command, cwd=inner.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}) for command in runs]
    for process in processes:
        out, _ = process.communicate(timeout=300)
        assert process.returncode == 0, out
    recorded, figures = sessions(history_url)
    assert len(recorded) == 3 and all(s["outcome"] == "passed" for s in recorded)
    per_session = {s["figures"] for s in recorded}
    assert len(per_session) == 1, "every session stored the same rows"
    assert len(figures) == 3 * per_session.pop()
    assert len({f["test"] for f in figures}) == 7


def record(inner, url, count, scale="1"):
    for _ in range(count):
        result = subprocess.run([sys.executable, "-m", "pytest", "--specdec-cpu", "-p", "no:cacheprovider", "-q",
                                 "-k", "gated", f"--specdec-history={url}"], cwd=inner.path, capture_output=True,
                                text=True, env={**os.environ, "SPEEDUP_SCALE": scale, "GATE": ""}, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr


def test_the_check_at_the_end_fails_on_a_regressing_change_point_or_warns(inner, tmp_path, monkeypatch):
    url = str(tmp_path / "h.db")
    record(inner, url, 6, "1")
    record(inner, url, 3, "0.7")
    monkeypatch.setenv("SPEEDUP_SCALE", "0.7")
    failed = run(inner, "-k", "gated", f"--specdec-history={url}", "--specdec-history-detect")
    failed.assert_outcomes(passed=1)  # every test passed ...
    assert failed.ret == 1  # ... and the session failed on the history
    failed.stdout.fnmatch_lines(["*change points (Apache Otava 0.8.0, E-divisive means)*",
                                 "*FAILED: test_gated.py::test_gated * speedup_output_throughput: REGRESSION -30.0%*"])
    warned = run(inner, "-k", "gated", f"--specdec-history={url}", "--specdec-history-detect",
                 "--specdec-history-warn-only")
    assert warned.ret == 0
    warned.stdout.fnmatch_lines(["*WARNING: test_gated.py::test_gated * speedup_output_throughput: REGRESSION*"])
    relaxed = run(inner, "-k", "gated", f"--specdec-history={url}", "--specdec-history-detect",
                  "--specdec-history-threshold", "0.5")
    assert relaxed.ret == 0, "a 30% loss is within a 50% threshold"


def test_a_steady_history_passes_the_check(inner, tmp_path):
    url = str(tmp_path / "h.db")
    record(inner, url, 6, "1")
    result = run(inner, "-k", "gated", f"--specdec-history={url}", "--specdec-history-detect")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*series checked, threshold 5%*"])
    assert "REGRESSION" not in result.stdout.str()


def test_baselines_from_history_gate_against_the_latest_stable_segment(inner, tmp_path, monkeypatch):
    url = str(tmp_path / "h.db")
    missing = run(inner, "-k", "gated", f"--specdec-history={url}", "--specdec-baseline-from", "history")
    missing.assert_outcomes(passed=1)  # GATE unset: no assertion yet
    monkeypatch.setenv("GATE", "1")
    too_few = run(inner, "-k", "gated", f"--specdec-history={url}", "--specdec-baseline-from", "history")
    too_few.assert_outcomes(failed=1)
    too_few.stdout.fnmatch_lines(["*has 1 session(s) since the newest change point; a baseline from history needs 3*"])
    record(inner, url, 3, "1")
    run(inner, "-k", "gated", f"--specdec-history={url}", "--specdec-baseline-from", "history").assert_outcomes(passed=1)
    monkeypatch.setenv("SPEEDUP_SCALE", "0.75")
    dropped = run(inner, "-k", "gated", f"--specdec-history={url}", "--specdec-baseline-from", "history")
    dropped.assert_outcomes(failed=1)
    dropped.stdout.fnmatch_lines(["*performance regressed against the baseline of test_gated.py::test_gated*",
                                  "*speedup_output_throughput*FAIL*",
                                  "*baseline from the history * sessions since its newest change point*"])


@pytest.mark.parametrize("args, message", [
    (["--specdec-history-detect"], "*--specdec-history-detect needs a history*"),
    (["--specdec-baseline-from", "history"], "*--specdec-baseline-from history needs a history*"),
    (["--specdec-baseline-from", "files"], "*expected one of file, history*"),
    (["--specdec-history", "ftp://x/y"], "*unsupported history store*"),
    (["--specdec-history-threshold", "5"], "*a fraction is between 0 and 1*"),
    (["--specdec-history", "h.db", "--specdec-baseline-from", "history", "--specdec-update-baselines"],
     "*the history is the baseline*"),
    (["--specdec-history", "postgresql://u:hunter2@127.0.0.1:9/db"],
     "*postgresql://u:[*][*][*]@127.0.0.1:9/db: the server is unreachable*"),
])
def test_bad_history_options_are_usage_errors(inner, args, message):
    result = run(inner, *args)
    assert result.ret == 4
    result.stderr.fnmatch_lines([message])
    assert "hunter2" not in result.stdout.str() + result.stderr.str()
