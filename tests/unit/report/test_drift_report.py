"""The drift each stored-baseline gate allowed for, in the reports: one line per figure and drift, with its
source and the smallest drop it lets a gate fail, and the tests gated with it."""

from pytest_specdec.report.drift_report import drift_lines, drift_markdown, drift_section
from pytest_specdec.verdict.learned_drift import built_in_drift, learn_drift

BUILT_IN = built_in_drift(0.042).as_dict()
LEARNED = learn_drift([1.0, 1.01, 0.99, 1.0, 1.02], since="session 3 (2026-11-20)").as_dict()


def test_each_figure_and_drift_is_said_once_with_the_tests_gated_with_it():
    rows = [
        {"test": "t.py::test_a", "drift": {"speedup_output_throughput": BUILT_IN}},
        {"test": "t.py::test_b", "drift": {"speedup_output_throughput": BUILT_IN}},
        {"test": "t.py::test_c", "drift": {"speedup_output_throughput": LEARNED}},
        {"test": "t.py::test_d", "drift": {}},
    ]
    lines = drift_lines(rows)
    assert lines[0] == (
        "speedup_output_throughput: drift: the CPU build's figure (4.2%), not this machine's; no measured drop "
        "under 12.5% can fail (2 tests)"
    )
    assert lines[1].startswith(
        f"speedup_output_throughput: drift {LEARNED['value']:.1%} (history: 5 sessions since the change point"
    )
    assert len(lines) == 2
    page = "\n".join(drift_section(rows))
    assert 'id="drift"' in page and "built-in: the CPU build&#x27;s figure" in page and "test_a, test_b" in page
    table = "\n".join(drift_markdown(rows, lambda text: text))
    assert f"| speedup_output_throughput | {LEARNED['value']:.1%} | history: 5 sessions since the change point" in table
    assert drift_lines([{"test": "x", "drift": {}}]) == [] and drift_section([]) == []
