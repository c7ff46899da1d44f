"""report.html in a real browser: headless Debian Chromium opens the page and we look at what it shows.

The rows are real-shaped: the results.json of a CPU run (tests/data/v1,
migrated as `load_report` reads it), a result with per-request acceptance
data built by `rows.row_for` (so the per-request figures are drawn), a test
that failed before measuring, and one with a test id that tries to inject a
script.  The trend is a series with a step, judged by Apache Otava and drawn by
`history.trends` as `pytest-specdec history plot` draws it.

(a) ``--dump-dom`` after the page's own inline script ran: the script writes
    into the DOM how many <img> decoded (naturalWidth > 0) and how many
    result rows the table has; with the network cut off (every request sent
    to a proxy that does not exist) every image still decodes.
    The same dump shows the page explaining itself at 1280 px: no sideways
    scrolling (the script writes the page's and the table's overflow), the
    summary and a gate failure's comparison before the table, a pass that
    compared nothing apart from "passed", and the legend of the "!" flag.
(b) ``--screenshot`` at a fixed window size, kept in $SPECDEC_TEST_ARTIFACTS
    (or test-artifacts/ at the repository root) and checked with Pillow: not
    blank, and the figures are painted (solid coloured areas text cannot make).

A missing chromium is an error naming the package, not a skip.
"""

from __future__ import annotations

import html
import os
import shutil
import signal
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.engines.counters import SpecDecodeCounters
from pytest_specdec.analysis.metrics import summarize
from pytest_specdec.measure.result import Run, SpecDecResult, compare_outputs
from pytest_specdec.report.files import load_report, report_title
from pytest_specdec.report.html import TrendFigure, render_html, write_html
from pytest_specdec.report.html_sections import FLAG_LEGEND
from pytest_specdec.report.plots import render_plots
from pytest_specdec.report.row.rows import row_for

ROOT = Path(__file__).resolve().parents[2]
BROWSER_TIMEOUT_S = 60
WINDOW = (1280, 9000)
EVIL_ID = "tests/t.py::test_sd[<script>document.title='owned'</script>]"
SPEC = ServerSpec("HuggingFaceTB/SmolLM2-135M-Instruct", {"method": "ngram", "num_speculative_tokens": 4})
# Accepted drafts per step of each SD request (k=4): requests from poor to good acceptance.
ACCEPTED = ([0, 0, 1, 0], [1, 0, 2, 1], [2, 1, 3, 2], [4, 3, 4, 2], [1, 1, 0, 3], [3, 4, 4, 4])


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.fail(
            "chromium is not installed: this test needs Debian's chromium package "
            "(apt-get install -y --no-install-recommends chromium)",
            pytrace=False,
        )
    return found


def artifacts_dir() -> Path:
    directory = Path(os.environ.get("SPECDEC_TEST_ARTIFACTS") or ROOT / "test-artifacts")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


class Rec:
    """One request as the client records it; SD requests carry the server's per-step arrays."""

    def __init__(self, index, *, step_ms, accepted=None):
        steps = len(accepted) if accepted else 8
        self.index, self.prompt_len, self.ttft = index, 16, 0.05
        self.output_tokens = 1 + (sum(a + 1 for a in accepted) if accepted else steps)
        self.latency = self.ttft + step_ms / 1000 * steps
        self.itl = [0.01] * (self.output_tokens - 1)
        self.token_ids, self.text, self.top_logprobs, self.success = list(range(self.output_tokens)), "x", None, True
        self.chunk_tokens = [1] + [a + 1 for a in accepted] if accepted else []
        self.spec_decoding = (
            {"per_step_accepted": list(accepted), "per_step_drafted": [4] * steps, "num_spec_tokens": 4}
            if accepted
            else None
        )


def per_request_row() -> dict:
    reference = [Rec(i, step_ms=20) for i in range(len(ACCEPTED))]
    speculative = [Rec(i, step_ms=35, accepted=a) for i, a in enumerate(ACCEPTED)]
    drafts = sum(len(a) for a in ACCEPTED)
    by_position = {p: sum(1 for a in ACCEPTED for n in a if n > p) for p in range(4)}
    counters = SpecDecodeCounters(drafts, 4 * drafts, sum(map(sum, ACCEPTED)), by_position)
    ref_run = Run(SPEC.reference(), 0, summarize(reference, 1.0), reference, None, ["vllm"], 0.0)
    sd_run = Run(SPEC, 0, summarize(speculative, 1.0), speculative, counters, ["vllm"], 0.0)
    outputs = compare_outputs(reference, speculative)
    result = SpecDecResult(
        SPEC,
        {"name": "code_edit"},
        {"name": "throughput_low", "request_rate": "inf", "max_concurrency": 1},
        [ref_run],
        [sd_run],
        outputs,
        {},
        outputs_per_repeat=[outputs],
        cost_ratio=0.0,
    )
    return row_for(
        "tests/t.py::test_ngram_per_request",
        SPEC,
        result.workload,
        result.pattern,
        outcome="passed",
        result=result,
        regression="passed",
    )


def trend_figure(rows: list[dict]) -> TrendFigure:
    """A real trend: a series with a step, judged by Apache Otava and drawn by history.trends."""
    from pytest_specdec.history.changepoints import detect_series, otava_python
    from pytest_specdec.history.store import Point
    from pytest_specdec.history.trends import trend_png

    base = next(row["speedup_output_throughput"] for row in rows if row.get("speedup_output_throughput"))
    values = [base * f for f in (1.0, 1.02, 0.98, 1.01, 0.99, 1.0, 0.8, 0.81, 0.79, 0.8, 0.82)]
    points = tuple(
        Point(
            f"s{n}",
            f"{n:02d}c0ffee",
            "main",
            f"2026-11-25T10:{n:02d}:00+00:00",
            v,
            v * 0.97,
            v * 1.03,
            "passed",
            "passed",
            "ngram k=4",
        )
        for n, v in enumerate(values)
    )
    (report,) = detect_series(
        {("tests/t.py::test_sd", "fp", "speedup_output_throughput"): points}, python=otava_python(None, (ROOT,))
    ).reports
    assert report.newest is not None and report.newest.regression
    return TrendFigure("Throughput speedup by commit", trend_png(report, threshold=0.05), report.newest.describe())


# A gate failure as the gate reports it (figure by figure, with what it can detect), a pass whose baseline
# check compared nothing, and a speedup flagged as not SD alone: what the page must explain.
GATE_FAILURE = (
    "AssertionError: performance regressed against the baseline of tests/t.py::test_gate_fails\n"
    "metric  baseline  measured  change  tolerance"
)
FIGURES = [
    {
        "figure": "speedup_output_throughput",
        "baseline": 2.0,
        "measured": 1.5,
        "change": -0.25,
        "tolerance": 0.15,
        "ci": [1.42, 1.58],
        "ok": False,
        "note": None,
    },
    {
        "figure": "output_throughput (reference)",
        "baseline": 100.0,
        "measured": 98.0,
        "change": -0.02,
        "tolerance": 0.1,
        "ci": [97.0, 99.0],
        "ok": True,
        "note": None,
    },
]
FLAG = {
    "kind": "ttft_at_concurrency_1",
    "message": "TTFT speedup 1.51x one request at a time, where ngram does not touch prefill",
    "fix": "warm both servers",
    "describe": "ttft_at_concurrency_1: TTFT speedup 1.51x one "
    "request at a time, where ngram does not touch prefill (fix: warm both servers)",
}


def explained_rows(measured: dict) -> list[dict]:
    failed = {
        **measured,
        "test": "tests/t.py::test_gate_fails",
        "outcome": "failed",
        "regression": "failed",
        "regression_figures": FIGURES,
        "failure": GATE_FAILURE,
        "detection": {
            "speedup_output_throughput": {
                "tolerance": 0.15,
                "spread": 0.04,
                "smallest_drop": 0.19,
                "false_alarm_rate": 0.0,
                "power": 0.9,
            }
        },
        "regression_comparison": "same machine: every gated figure compared, the reference's own tok/s and ms "
        "included\nengine changed since the baseline: engine_version 0.31.0 -> 0.32.0",
    }
    not_compared = {
        **measured,
        "test": "tests/t.py::test_other_box",
        "outcome": "passed",
        "regression": "not compared",
        "regression_not_compared": {"speedup_output_throughput": "another machine"},
    }
    flagged = {**measured, "test": "tests/t.py::test_flagged", "outcome": "passed", "fairness_flags": [FLAG]}
    return [failed, not_compared, flagged]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The rendered report.html, with what it should show."""
    document = load_report(ROOT / "tests" / "data" / "v1")  # a real CPU run's results
    rows = document["results"] + [per_request_row()]
    rows.append(row_for(EVIL_ID, SPEC, {"name": "sharegpt"}, {"name": "throughput_low"}, outcome="failed"))
    rows += explained_rows(rows[0])
    plots = render_plots(rows)
    names = [p.name for p in plots]
    assert "request_acceptance_length.png" in names and "tokens_per_step.png" in names
    trends = [trend_figure(rows)]
    text = render_html(
        rows,
        title=report_title(document["fingerprint"]),
        generated_at=document["generated_at"],
        trends=trends,
        notes=["rendered by tests/integration/test_html_browser.py"],
        plots=plots,
        fingerprint=document["fingerprint"],
    )
    path = write_html(tmp_path_factory.mktemp("html") / "report.html", text)
    shutil.copyfile(path, artifacts_dir() / "report-html.html")
    return {"path": path, "rows": len(rows), "images": len(plots) + len(trends)}


def run_chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess:
    """Headless chromium with a fresh profile; the whole process group is killed past the timeout."""
    command = [
        chromium(),
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=10000",
        *args,
    ]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )  # its own group: renderer and zygote go with it
    try:
        out, err = proc.communicate(timeout=BROWSER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"chromium did not finish within {BROWSER_TIMEOUT_S} s: {' '.join(command)}")
    assert proc.returncode == 0, f"chromium exited {proc.returncode}:\n{err[-3000:]}"
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


class PageCheck(HTMLParser):
    """The attributes the page's script wrote on #page-check, and how many <script> elements there are."""

    def __init__(self, text):
        super().__init__()
        self.check, self.scripts = None, 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.scripts += tag == "script"
        if attrs.get("id") == "page-check":
            self.check = attrs


# With the network cut off, every fetch would go to a proxy on the discard port and fail.
OFFLINE = ["--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]


@pytest.mark.parametrize("network", [[], OFFLINE], ids=["default", "offline"])
def test_every_image_decodes_and_every_row_is_in_the_table(page, tmp_path, network):
    done = run_chromium(
        [*network, f"--window-size={WINDOW[0]},{WINDOW[1]}", "--dump-dom", page["path"].as_uri()], tmp_path / "profile"
    )
    seen = PageCheck(done.stdout)
    assert seen.check is not None and "data-images" in seen.check, (
        f"the page's script did not run: {done.stdout[-2000:]}"
    )
    assert int(seen.check["data-images"]) == page["images"]
    assert int(seen.check["data-decoded"]) == page["images"], seen.check
    assert int(seen.check["data-rows"]) == page["rows"]
    assert seen.scripts == 1  # the test id's <script> stayed text
    assert "<title>owned</title>" not in done.stdout
    # At 1280 px neither the page nor the results table scrolls sideways.
    assert int(seen.check["data-page-overflow"]) <= 0 and int(seen.check["data-table-overflow"]) <= 0, seen.check
    # The page says why: the failure's comparison, "not compared" apart from "passed", the flag legend.
    dom = done.stdout
    assert dom.index('id="summary"') < dom.index('id="failures"') < dom.index('id="results"')
    assert "performance regressed against the baseline of tests/t.py::test_gate_fails" in dom
    assert "engine changed since the baseline: engine_version 0.31.0 -&gt; 0.32.0" in dom
    assert "passed, baseline not compared" in dom
    assert html.escape(FLAG_LEGEND) in dom and "where ngram does not touch prefill (fix: warm both servers)" in dom


def test_screenshot_shows_the_table_and_painted_figures(page, tmp_path):
    import numpy as np
    from PIL import Image

    shot = artifacts_dir() / "report-html.png"
    shot.unlink(missing_ok=True)
    run_chromium(
        ["--hide-scrollbars", f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--screenshot={shot}", page["path"].as_uri()],
        tmp_path / "profile",
    )
    image = Image.open(shot).convert("RGB")
    assert image.size == WINDOW
    pixels = np.asarray(image, dtype=np.int16)  # height x width x RGB
    non_white = float((pixels.min(axis=2) < 235).mean())
    assert non_white > 0.05, f"the page looks blank: {non_white:.1%} of the pixels are not white"
    # Coloured pixels (not grey text or borders), line by line: a figure paints wide runs of colour
    # (heatmap cells, bars, the colour bar); a coloured word in the table ("passed") makes a few per line.
    coloured = (pixels.max(axis=2) - pixels.min(axis=2)) > 60
    wide_lines = int((coloured.sum(axis=1) > 120).sum())
    assert wide_lines > 50, f"no figure painted: {wide_lines} lines with over 120 coloured pixels"
