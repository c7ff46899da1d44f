"""--specdec-history end to end in pytester runs: what a session records, xdist, concurrent sessions,
the opt-in change-point check and baselines from history.  The inner tests build results from given
figures (tests/support/inner_results.py): the history is under test here, not a measurement."""

import json
import os
import subprocess
import sys

import pytest

from tests.support.inner_results import MARKS, RESULTS_CONFTEST
from pytest_specdec.history.changepoints import DEFAULT_METRICS
from pytest_specdec.history.records import Figure, SessionRecord
from pytest_specdec.history.store import open_history
from pytest_specdec.history.url import parse_history_url
from pytest_specdec.verdict.learned_drift import CONFIDENCE

GATED = (
    MARKS
    + """
import json
import os

def test_gated(make_result):
    scale = float(os.environ.get("SPEEDUP_SCALE", "1"))
    result = make_result(ref=(30.0, 30.6, 29.7), sd=(45.0 * scale, 45.9 * scale, 44.6 * scale),
                         ref_tpot=(33.0, 32.6, 33.4), sd_tpot=(22.0, 22.3, 21.8), accepted=(240.0, 238.0, 242.0))
    if os.environ.get("GATE"):
        result.assert_no_regression()
"""
)

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
    result = run(
        inner,
        f"--specdec-history={history_url}",
        "--specdec-history-commit",
        "abc123",
        "--specdec-history-branch",
        "feature",
    )
    result.assert_outcomes(passed=7)
    result.stdout.fnmatch_lines(["*specdec history*", "history: * figures of this session recorded in *"])
    (session,), figures = sessions(history_url)
    assert (session["commit"], session["branch"], session["outcome"]) == ("abc123", "feature", "passed")
    assert {f["test"] for f in figures} == {
        "test_gated.py::test_gated",
        *(f"test_many.py::test_many[{n}]" for n in range(6)),
    }
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
    assert {f["outcome"] for f in figures if f["test"] == "test_broken.py::test_broken"} == {"failed"}, {
        (f["test"], f["outcome"]) for f in figures
    }


def test_an_xdist_run_records_one_session_with_every_workers_rows(inner, tmp_path):
    url = str(tmp_path / "h.db")
    run(inner, "-n", "2", f"--specdec-history={url}").assert_outcomes(passed=7)
    (session,), figures = sessions(url)
    assert len({f["test"] for f in figures}) == 7 and session["figures"] == len(figures)


def test_sessions_and_an_xdist_run_writing_at_once_lose_nothing(inner, history_url):
    base = [
        sys.executable,
        "-m",
        "pytest",
        "--specdec-cpu",
        "-p",
        "no:cacheprovider",
        "-q",
        f"--specdec-history={history_url}",
    ]
    runs = [base, base, [*base, "-n", "2"]]
    processes = [
        subprocess.Popen(
            command,
            cwd=inner.path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        for command in runs
    ]
    for process in processes:
        out, _ = process.communicate(timeout=300)
        assert process.returncode == 0, out
    recorded, figures = sessions(history_url)
    assert len(recorded) == 3 and all(s["outcome"] == "passed" for s in recorded)
    per_session = {s["figures"] for s in recorded}
    assert len(per_session) == 1, "every session stored the same rows"
    assert len(figures) == 3 * per_session.pop()
    assert len({f["test"] for f in figures}) == 7


def record(inner, url, count, scale="1", runner=None):
    env = {**os.environ, "SPEEDUP_SCALE": scale, "GATE": "", **({"RUNNER": runner} if runner else {})}
    for _ in range(count):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "--specdec-cpu",
                "-p",
                "no:cacheprovider",
                "-q",
                "-k",
                "gated",
                f"--specdec-history={url}",
            ],
            cwd=inner.path,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert result.returncode == 0, result.stdout + result.stderr


SCALED = ("speedup_output_throughput", "speculative_output_throughput")


def earlier_sessions(url, template_uid, scales):
    """Sessions older than every recorded one, copied from a real session's figures with its SD throughput
    scaled (`scales`, relative to the template's): a long history at the cost of one pytest session."""
    with open_history(parse_history_url(url)) as store:
        template = [f for f in store.figures() if f["session_uid"] == template_uid]
        fingerprint = store.fingerprint(template[0]["fingerprint_key"])
        for n, scale in enumerate(scales):
            stamp = f"2026-01-01T{n // 60:02d}:{n % 60:02d}:00+00:00"
            uid = f"{template_uid}-copy{n}"
            figures = [
                Figure(
                    test=f["test"],
                    config=f["config"],
                    engine=f["engine"],
                    engine_version=f["engine_version"],
                    fingerprint_key=f["fingerprint_key"],
                    workload=f["workload"],
                    access_pattern=f["access_pattern"],
                    outcome=f["outcome"],
                    regression=f["regression"],
                    metric=f["metric"],
                    value=f["value"] * (scale if f["metric"] in SCALED else 1.0),
                    repeats=f["repeats"],
                )
                for f in template
            ]
            store.append(SessionRecord(uid, None, None, stamp, stamp, "passed", fingerprint), figures)


def newest_session(url):
    with open_history(parse_history_url(url)) as store:
        return store.sessions()[-1]["session_uid"]


# Two runner types in one CI, told apart the documented way: a field the fingerprint hook adds.
RUNNER_HOOK = """

def pytest_specdec_fingerprint(config, fingerprint):
    if os.environ.get("RUNNER"):
        fingerprint["runner"] = os.environ["RUNNER"]
    return fingerprint
"""


def test_each_runner_is_judged_on_its_own_series(pytester, tmp_path, monkeypatch):
    """Runners a and b record one shared history, interleaved; b's speedup drops 30%, a's stays."""
    pytester.makeconftest(RESULTS_CONFTEST + RUNNER_HOOK)
    pytester.makepyfile(test_gated=GATED, test_plain="def test_plain():\n    pass\n")
    url = str(tmp_path / "shared.db")
    record(pytester, url, 1, "1", runner="a")
    earlier_sessions(url, newest_session(url), [1.0] * 8)
    record(pytester, url, 1, "0.7", runner="b")
    earlier_sessions(url, newest_session(url), [1 / 0.7] * 6 + [1.0] * 2)  # b: 6 at the old level, then 0.7
    with open_history(parse_history_url(url)) as store:
        series = [
            (key, metric, count)
            for test, key, metric, count in store.series_keys()
            if test == "test_gated.py::test_gated" and metric in DEFAULT_METRICS
        ]
    assert len({key for key, _, _ in series}) == 2, "two runner types are two series"
    per_runner = len(series) // 2
    monkeypatch.setenv("RUNNER", "a")
    on_a = run(pytester, "-k", "gated", f"--specdec-history={url}", "--specdec-history-detect")
    on_a.assert_outcomes(passed=1)
    assert on_a.ret == 0, "runner a's own series is flat; b's regression is not a's verdict"
    assert "REGRESSION" not in on_a.stdout.str()
    on_a.stdout.fnmatch_lines([f"*change points (Apache Otava*): {per_runner} series checked*"])
    monkeypatch.setenv("RUNNER", "b")
    monkeypatch.setenv("SPEEDUP_SCALE", "0.7")
    on_b = run(pytester, "-k", "gated", f"--specdec-history={url}", "--specdec-history-detect")
    on_b.assert_outcomes(passed=1)
    assert on_b.ret == 1
    on_b.stdout.fnmatch_lines(["*FAILED: test_gated.py::test_gated * speedup_output_throughput: REGRESSION -30.0%*"])
    # A session that recorded no row of its own (a plain test only) judges nothing.
    plain = run(pytester, "-k", "plain", f"--specdec-history={url}", "--specdec-history-detect")
    plain.assert_outcomes(passed=1)
    assert plain.ret == 0 and "FAILED" not in plain.stdout.str()
    plain.stdout.fnmatch_lines(["*: 0 series checked*"])


def test_a_newer_history_is_refused_before_any_test_runs(inner, tmp_path):
    url = str(tmp_path / "h.db")
    record(inner, url, 1)
    with open_history(parse_history_url(url)) as store:
        with store._transaction() as cursor:
            cursor.execute("UPDATE specdec_meta SET value = '99' WHERE key = 'schema_version'")
    result = run(inner, "-k", "gated", f"--specdec-history={url}")
    assert result.ret == 4, result.stdout.str()
    result.stderr.fnmatch_lines(["*h.db: history schema version 99 is newer than this pytest-specdec writes*"])
    assert "passed" not in result.stdout.str() and "failed" not in result.stdout.str()


def test_the_check_at_the_end_fails_on_a_regressing_change_point_or_warns(inner, tmp_path, monkeypatch):
    url = str(tmp_path / "h.db")
    record(inner, url, 6, "1")
    record(inner, url, 3, "0.7")
    monkeypatch.setenv("SPEEDUP_SCALE", "0.7")
    failed = run(inner, "-k", "gated", f"--specdec-history={url}", "--specdec-history-detect")
    failed.assert_outcomes(passed=1)  # every test passed ...
    assert failed.ret == 1  # ... and the session failed on the history
    failed.stdout.fnmatch_lines(
        [
            "*change points (Apache Otava 0.8.0, E-divisive means)*",
            "*FAILED: test_gated.py::test_gated * speedup_output_throughput: REGRESSION -30.0%*",
        ]
    )
    warned = run(
        inner, "-k", "gated", f"--specdec-history={url}", "--specdec-history-detect", "--specdec-history-warn-only"
    )
    assert warned.ret == 0
    warned.stdout.fnmatch_lines(["*WARNING: test_gated.py::test_gated * speedup_output_throughput: REGRESSION*"])
    relaxed = run(
        inner,
        "-k",
        "gated",
        f"--specdec-history={url}",
        "--specdec-history-detect",
        "--specdec-history-threshold",
        "0.5",
    )
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
    too_few.stdout.fnmatch_lines(["*has 1 session(s) in all (no change point); a baseline from history needs 3*"])
    record(inner, url, 3, "1")
    run(inner, "-k", "gated", f"--specdec-history={url}", "--specdec-baseline-from", "history").assert_outcomes(
        passed=1
    )
    monkeypatch.setenv("SPEEDUP_SCALE", "0.75")
    dropped = run(inner, "-k", "gated", f"--specdec-history={url}", "--specdec-baseline-from", "history")
    dropped.assert_outcomes(failed=1)
    dropped.stdout.fnmatch_lines(
        [
            "*performance regressed against the baseline of test_gated.py::test_gated*",
            "*speedup_output_throughput*FAIL*",
            "*baseline from the history *, each figure its own segment:*",
        ]
    )
    # Each gated figure's own segment, and only the gated ones: the run's own sessions were recorded too.
    dropped.stdout.fnmatch_lines(["*  speedup_output_throughput: sessions 1-6 (6, ?..?), no change point*"])
    assert "reference_median_dispatch_lag_ms:" not in dropped.stdout.str()


def test_a_regression_in_the_history_is_not_the_baseline_until_someone_accepts_it(pytester, tmp_path, monkeypatch):
    pytester.makeconftest(RESULTS_CONFTEST + RUNNER_HOOK)
    pytester.makepyfile(test_gated=GATED)
    url = str(tmp_path / "h.db")
    record(pytester, url, 1, "0.7", runner="a")
    # Six sessions at the old level, then the regression four times: long enough to be a level.
    earlier_sessions(url, newest_session(url), [1 / 0.7] * 6 + [1.0] * 3)
    monkeypatch.setenv("GATE", "1")
    monkeypatch.setenv("RUNNER", "a")
    monkeypatch.setenv("SPEEDUP_SCALE", "0.7")
    held = run(pytester, "-k", "gated", f"--specdec-history={url}", "--specdec-baseline-from", "history")
    held.assert_outcomes(failed=1)  # the level before the regression is still the baseline
    held.stdout.fnmatch_lines(
        [
            "*speedup_output_throughput*FAIL*",
            "*speedup_output_throughput: sessions 1-6 (6, *): the level before the regression at "
            "session 7 (-30.0%), which nobody accepted (pytest-specdec history accept)*",
        ]
    )

    def accept(*args):
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest_specdec",
                "history",
                "accept",
                url,
                "--test",
                "test_gated.py::test_gated",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )

    # Accepting one figure's step accepts no other's: the speedup's regression still fails.
    one = accept("--metric", "speculative_output_throughput", "--by", "carol")
    assert one.returncode == 0 and "speculative_output_throughput" in one.stdout, one.stdout + one.stderr
    still = run(pytester, "-k", "gated", f"--specdec-history={url}", "--specdec-baseline-from", "history")
    still.assert_outcomes(failed=1)
    still.stdout.fnmatch_lines(["*speedup_output_throughput: sessions 1-6 (6, *): the level before the regression*"])
    accepted = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_specdec",
            "history",
            "accept",
            url,
            "--test",
            "test_gated.py::test_gated",
            "--by",
            "alice@example.com",
            "--reason",
            "PR 123: k=2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "accepted by alice@example.com at " in accepted.stdout and "speedup_output_throughput" in accepted.stdout
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_specdec",
            "history",
            "accept",
            url,
            "--test",
            "test_gated.py::test_gated",
            "--by",
            "bob",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 2 and "no regressing change point waits to be accepted" in again.stderr
    passes = run(pytester, "-k", "gated", f"--specdec-history={url}", "--specdec-baseline-from", "history")
    passes.assert_outcomes(passed=1)
    # A runner type the history has never seen has no baseline yet: not the other runner's level.
    monkeypatch.setenv("RUNNER", "c")
    new_runner = run(pytester, "-k", "gated", f"--specdec-history={url}", "--specdec-baseline-from", "history")
    new_runner.assert_outcomes(failed=1)
    new_runner.stdout.fnmatch_lines(
        [
            "*no baseline yet for this environment: test_gated.py::test_gated was recorded "
            "on 1 other environment(s), never on this one*"
        ]
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--specdec-history-detect"], "*--specdec-history-detect needs a history*"),
        (["--specdec-baseline-from", "history"], "*--specdec-baseline-from history needs a history*"),
        (["--specdec-baseline-from", "files"], "*expected one of file, history*"),
        (["--specdec-history", "ftp://x/y"], "*unsupported history store*"),
        (["--specdec-history-threshold", "5"], "*a fraction is between 0 and 1*"),
        (
            ["--specdec-history", "h.db", "--specdec-baseline-from", "history", "--specdec-update-baselines"],
            "*the history is the baseline*",
        ),
        (
            ["--specdec-history", "postgresql://u:hunter2@127.0.0.1:9/db"],
            "*postgresql://u:[*][*][*]@127.0.0.1:9/db: the server is unreachable*",
        ),
        # Malformed: urlsplit itself refuses these; argparse used to echo the raw value, password and all.
        (
            ["--specdec-history", "postgresql://ci:hunter2@[::1:1/perf"],
            "*postgresql://ci:[*][*][*]@[[]::1:1/perf: not a valid URL: Invalid IPv6 URL*",
        ),
        (
            ["--specdec-history", "postgresql://ci:hunter2@db:port/perf"],
            "*postgresql://ci:[*][*][*]@db:port/perf: not a valid URL*",
        ),
        (
            ["--specdec-history", "postgresql://ci:hunter2@db:99999/perf?password=hunter2"],
            "*postgresql://ci:[*][*][*]@db:99999/perf?password=[*][*][*]: not a valid URL: Port out of range*",
        ),
    ],
)
def test_bad_history_options_are_usage_errors(inner, args, message):
    result = run(inner, *args)
    assert result.ret == 4
    result.stderr.fnmatch_lines([message])
    assert "hunter2" not in result.stdout.str() + result.stderr.str()


def test_a_malformed_url_in_the_ini_names_the_setting_and_no_password(inner):
    inner.makeini("[pytest]\nspecdec_history = postgresql://ci:hunter2@[::1:1/perf\n")
    result = run(inner)
    assert result.ret == 4
    result.stderr.fnmatch_lines(
        ["*ini setting specdec_history: postgresql://ci:[*][*][*]@[[]::1:1/perf: not a valid URL*"]
    )
    assert "hunter2" not in result.stdout.str() + result.stderr.str()


def test_a_stored_baseline_gate_learns_the_drift_from_the_history_and_says_so(inner, tmp_path, monkeypatch):
    url, report = str(tmp_path / "h.db"), tmp_path / "report"
    monkeypatch.setenv("GATE", "1")
    first = run(inner, "-k", "gated", "--specdec-update-baselines", f"--specdec-history={url}")
    first.assert_outcomes(passed=1)
    # No history of this test yet: the built-in figure, labelled as the CPU build's, with why nothing was learned.
    plain = run(inner, "-k", "gated", f"--specdec-history={url}", f"--specdec-report={report}")
    plain.assert_outcomes(passed=1)
    plain.stdout.fnmatch_lines(
        [
            "*specdec drift between sessions (stored baselines)*",
            "speedup_output_throughput: drift: the CPU build's figure (4.2%), not this machine's; the history has 1 "
            "session(s) of this test on this machine and build, 3 needed; no measured drop under 12.5% can fail "
            "(1 test)",
        ]
    )
    for scale in ("1.01", "0.99", "1.0"):
        monkeypatch.setenv("SPEEDUP_SCALE", scale)
        run(inner, "-k", "gated", f"--specdec-history={url}").assert_outcomes(passed=1)
    monkeypatch.delenv("SPEEDUP_SCALE")
    learned = run(inner, "-k", "gated", f"--specdec-history={url}", f"--specdec-report={report}")
    learned.assert_outcomes(passed=1)
    learned.stdout.fnmatch_lines(
        [f"speedup_output_throughput: drift *% (history: 5 sessions, upper {CONFIDENCE:.0%} bound*"]
    )
    row = json.loads((report / "results.json").read_text())["results"][0]
    drift = row["drift"]["speedup_output_throughput"]
    assert drift["source"] == "history" and drift["sessions"] == 5 and drift["value"] < 0.042
    assert drift["smallest_failable_drop"] < 0.125
    assert "history: 5 sessions" in row["regression_comparison"]
    page = (report / "report.html").read_text()
    assert 'id="drift"' in page and "history: 5 sessions" in page
    # The learned figure still fails a slower SD: the drift is the machine's, not a wider tolerance.
    monkeypatch.setenv("SPEEDUP_SCALE", "0.6")
    slower = run(inner, "-k", "gated", f"--specdec-history={url}")
    slower.assert_outcomes(failed=1)
    slower.stdout.fnmatch_lines(["*performance regressed against the baseline*", "*history: * sessions*"])
