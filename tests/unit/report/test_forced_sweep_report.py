"""A forced-acceptance sweep in the report: its rows carry the curve, report.html shows it as a table and
the figure catalog draws it, once per sweep, with the break-even and the theory's line."""

import re

from pytest_specdec.analysis.forced_sweep import ForcedPoint, forced_curve
from pytest_specdec.report.forced_plots import forced_sweep_plot, forced_sweeps
from pytest_specdec.report.html import render_html
from pytest_specdec.report.plots import render_plots

from tests.support.html_page import row

PNG = b"\x89PNG\r\n\x1a\n"
TEST = "examples/cpu/test_forced_acceptance.py::test_llamacpp_acceptance_sweep"


def sweep_rows(test=TEST, cost=4.0, c=0.5):
    points = [ForcedPoint(x, x / cost, x / cost * 0.9, x / cost * 1.1, x / cost, x - 0.02, c) for x in (2, 3, 4, 5)]
    curve = forced_curve(4, points).as_dict()
    return [
        row(
            test,
            config=(
                f"draft_model k=4 synthetic_acceptance_length={p.length} at forced acceptance {p.length:.2f} on llamacpp"
            ),
            engine="llamacpp",
            workload="random_s",
            speedup=p.speedup,
            forced_sweep=curve,
            per_position=(),
        )
        for p in points
    ]


def test_each_sweep_is_found_once_whatever_its_rows():
    rows = sweep_rows() + sweep_rows(test=TEST + "_other", cost=5.0) + [row()]
    found = forced_sweeps(rows)
    assert [title for title, _ in found] == ["draft_model k=4 on llamacpp / random_s (llamacpp)"] * 2
    assert [curve["break_even"]["value"] for _, curve in found] == [4.0, 5.0]
    assert forced_sweeps([row()]) == [] and forced_sweep_plot([row()], None) is None


def test_the_figure_catalog_draws_the_sweep(tmp_path):
    images = {image.name: image for image in render_plots(sweep_rows())}
    assert images["forced_acceptance_sweep.png"].png.startswith(PNG)
    assert len(images["forced_acceptance_sweep.png"].png) > 5000
    path = forced_sweep_plot(sweep_rows(), tmp_path / "forced.png")
    assert path.read_bytes().startswith(PNG)


def test_report_html_shows_each_length_the_break_even_and_the_step_costs():
    page = render_html(sweep_rows(), title="session", generated_at="now", plots=[])
    section = re.search(r'<section id="forced-acceptance">(.*?)</section>', page, re.S).group(1)
    assert "draft_model k=4 on llamacpp / random_s (llamacpp)" in section
    # One table row per forced length: forced, measured, speedup (interval), decode, theory L / (1 + 4 * 0.5).
    cells = re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td></tr>", section)
    assert [c[0] for c in cells] == ["2.00", "3.00", "4.00", "5.00"]
    assert cells[2][2] == "1.000x (0.900-1.100)" and cells[2][4] == "1.333x"
    assert "break-even at forced acceptance 4.00" in section
    assert "step cost fitted 4.00, the theory&#x27;s 1 + k*c 3.00 plain steps" in section
    assert '<section id="forced-acceptance">' not in render_html([row()], title="s", generated_at="now", plots=[])
