"""The session's false alarms stated from its rows: what each check used, under the budget each row names, so
that shards merged state the whole session's."""

import pytest

from pytest_specdec.report.false_alarms import false_alarm_lines, false_alarms
from pytest_specdec.report.files import report_document, validate_report
from pytest_specdec.report.merge import merge_reports
from pytest_specdec.report.files import write_report
from pytest_specdec.report.row.rows import row_for
from pytest_specdec.config.spec import ServerSpec

SPEC = ServerSpec("m", {"method": "ngram", "num_speculative_tokens": 4})

BUDGET = {"false_fail": 0.05, "false_pass": 0.05, "session": 0.05, "tests": 4}


def row(test, *rates):
    decisions = {f"check {i}": {"outcome": "passed", "false_fail": rate} for i, rate in enumerate(rates)}
    return {"test": test, "decisions": decisions, "alarm_budget": BUDGET}


def test_rows_state_the_sum_of_their_checks_rates_and_the_budget_they_ran_under():
    found = false_alarms([row("a::t", 0.0076, 0.0019), row("b::t", 0.0076), row("c::t", None)])
    assert found["checks"] == 3 and found["checks_without_rate"] == 1
    assert found["any_false_fail_at_most"] == pytest.approx(0.0171)
    assert found["session"] == 0.05 and found["tests"] == 4
    (line,) = false_alarm_lines([row("a::t", 0.0076)])
    assert "the session budget 5.0% split over 4 tests" in line and "at most 0.76%" in line
    assert false_alarms([{"test": "x", "decisions": {}}]) is None
    # A row from before rates were kept: the rule's own 5%, never none.
    assert false_alarms([{"test": "x", "decisions": {"c": {"outcome": "passed"}}}])["any_false_fail_at_most"] == 0.05


def test_shards_merged_state_the_whole_sessions_false_alarms(tmp_path):
    shards = []
    for index, rates in enumerate(((0.0076,), (0.0076, 0.0019))):
        made = row_for(
            f"t{index}.py::test_x", SPEC, {"name": "code_edit"}, {"name": "throughput_low"}, outcome="passed"
        )
        rows = [{**made, "decisions": row("", *rates)["decisions"], "alarm_budget": BUDGET}]
        validate_report(report_document(rows), "shard")
        write_report(tmp_path / f"shard{index}", rows)
        shards.append(tmp_path / f"shard{index}")
    merged = merge_reports(shards)
    assert merged["false_alarms"]["checks"] == 3
    assert merged["false_alarms"]["any_false_fail_at_most"] == pytest.approx(0.0171)
