"""The throughput-interactivity frontier in the reports: found once per sweep, drawn, and tabled in report.html
and summary.md with the per-user speeds its checks read."""

import re

from pytest_specdec.analysis.frontier import Frontier, FrontierReport, OperatingPoint, worth_at
from pytest_specdec.report.frontier_report import frontier_markdown, frontier_plot, frontiers
from pytest_specdec.report.html import render_html
from pytest_specdec.report.plots import render_plots

from tests.support.html_page import row

PNG = b"\x89PNG\r\n\x1a\n"
TEST = "examples/cpu/test_frontier.py::test_ngram_frontier"


def report(scale=1.0):
    def side(label, points, wobble):
        return Frontier(label, tuple(tuple(OperatingPoint(c, u, g * (1 + w)) for c, u, g in points) for w in wobble))

    ref = side("reference", [(1, 50, 50), (2, 45, 90), (4, 38, 152), (8, 28, 140)], (0.0, 0.02))
    sd = side(
        "SD", [(1, 80, 80 * scale), (2, 70, 140 * scale), (4, 55, 220 * scale), (8, 40, 240 * scale)], (0.01, -0.01)
    )
    made = FrontierReport(ref, sd)
    made.targets += [worth_at(ref, sd, 45.0, usd_per_gpu_hour=3.6), worth_at(ref, sd, 70.0)]
    return made.as_dict()


def sweep_rows(test=TEST, scale=1.0):
    frontier = report(scale)
    return [row(test, config="ngram k=4", workload="code_edit", frontier=frontier, per_position=()) for _ in range(4)]


def test_each_sweep_is_found_once_and_drawn_with_both_sides():
    rows = sweep_rows() + sweep_rows(test=TEST + "_other", scale=0.5) + [row()]
    found = frontiers(rows)
    assert len(found) == 2 and found[0][0] == "ngram k=4 / code_edit"
    # Concurrency 8 of the reference is past its knee: slower per user and less per GPU than 4, off the frontier.
    assert [p["on_frontier"] for p in found[0][1]["reference"]["points"]] == [True, True, True, False]
    assert frontiers([row()]) == [] and frontier_plot([row()], None) is None
    images = {image.name: image for image in render_plots(sweep_rows())}
    assert images["throughput_interactivity_frontier.png"].png.startswith(PNG)


def test_report_html_and_summary_table_each_level_and_each_target():
    page = render_html(sweep_rows(), title="session", generated_at="now", plots=[])
    section = re.search(r'<section id="frontier">(.*?)</section>', page, re.S).group(1)
    assert "1000 / the run&#x27;s median TPOT" in section
    levels = re.findall(r"<tr><td>(\d+)</td>(.*?)</tr>", section)[:4]
    assert [level for level, _ in levels] == ["1", "2", "4", "8"]
    assert levels[-1][1] == "<td>28</td><td>141.4</td><td>40 *</td><td>240 *</td>"  # the reference's past its knee
    # The priced target: both sides' tok/s per GPU at 45 tok/s per user (SD's read between its concurrency 8 and
    # 4: 240 - 5/15 * 20), the ratio and each draw's, USD per 1M output tokens at $3.60 an hour.
    cells = re.search(r"<tr><td>45</td>(.*?)</tr>", section).group(1)
    assert cells.startswith("<td>90.9</td><td>233.3</td><td>2.567x (2.619, 2.516)</td><td>11 / 4.29</td>"), cells
    # The target only SD reaches: no ratio, and why.
    assert "reference: not reached: the fastest operating point measured gives 50 tok/s per user" in section
    summary = "\n".join(frontier_markdown(sweep_rows(), str))
    assert summary.startswith("**Throughput-interactivity frontier**") and "| 45 | 90.9 | 233.3 | 2.567x" in summary
    assert '<section id="frontier">' not in render_html([row()], title="s", generated_at="now", plots=[])
