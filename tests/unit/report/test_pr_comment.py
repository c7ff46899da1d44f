"""pr-comment.md: every failed, undecided and partly compared check, under GitHub's limit for any session."""

from tests.support.report_results import NGRAM, PATTERN, WORKLOAD, result

from pytest_specdec.report.files import write_report
from pytest_specdec.report.pr_comment import GITHUB_LIMIT, MARKER, pr_comment, run_link
from pytest_specdec.report.row.rows import row_for


def passed(name="test_fast") -> dict:
    return row_for(f"t.py::{name}", NGRAM, WORKLOAD, PATTERN, outcome="passed", result=result(), regression="passed")


def failed(name="test_slow", failure="AssertionError: speedup 0.67x is below 1.15x") -> dict:
    row = row_for(f"t.py::{name}", NGRAM, WORKLOAD, PATTERN, outcome="failed", result=result(sd_tok_s=20.0))
    row["failure"] = failure
    return row


def undecided(name="test_suffix") -> dict:
    row = row_for(f"t.py::{name}", NGRAM, WORKLOAD, PATTERN, outcome="undecided", result=result())
    row["decisions"] = {
        "speedup (output_throughput) >= 1.15": {
            "outcome": "undecided",
            "stopped": "undecided at the cap (8 runs a side)",
            "why": "still undecided: a quieter box would decide it",
        }
    }
    row["regression"] = "partly compared"
    row["regression_comparison"] = "another machine: only acceptance-type figures compared\nmachine: ..."
    return row


def test_the_comment_lists_every_check_a_reviewer_must_read():
    text = pr_comment([passed(), failed(), undecided()], link="https://example.org/run/7")
    assert text.startswith(MARKER + "\n### pytest-specdec: 3 results: 1 failed, 1 passed, 1 undecided\n")
    assert "- `test_slow` (ngram k=4, code_edit/throughput_low): speedup 0.67x; AssertionError: speedup 0.67x" in text
    assert "test_suffix: speedup (output_throughput) >= 1.15 undecided" in text and "quieter box" in text
    assert "- `test_suffix` [partly compared]: another machine: only acceptance-type figures compared" in text
    assert "test_fast" not in text  # a passed, fully compared check needs no line
    assert text.rstrip().endswith("Full report: https://example.org/run/7")


def test_a_green_session_says_so():
    text = pr_comment([passed(), passed("test_other")])
    assert "### pytest-specdec: 2 results: 2 passed" in text and "Every check decided and passed." in text
    assert "Full report: report.html" in text


def test_any_session_stays_under_githubs_limit_and_says_what_it_left_out():
    failure = "AssertionError: " + "a long reason " * 40
    # 800 rows whose failures alone run past three times the limit: what is cut is the same for any longer session.
    rows = [failed(f"test_{i}", failure) for i in range(400)] + [undecided(f"test_u{i}") for i in range(400)]
    assert sum(len(row["test"]) + len(failure) for row in rows[:400]) > 3 * GITHUB_LIMIT
    text = pr_comment(rows)
    assert len(text) < GITHUB_LIMIT
    assert "### pytest-specdec: 800 results: 400 failed, 400 undecided" in text
    assert "more (the full report lists them)" in text


def test_the_link_is_the_actions_runs_page_where_its_variables_are_set():
    env = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "team/infer", "GITHUB_RUN_ID": "42"}
    assert run_link(env) == "https://github.com/team/infer/actions/runs/42"
    assert run_link({"GITHUB_RUN_ID": "42"}) is None


def test_every_report_directory_has_the_comment(tmp_path):
    write_report(tmp_path, [passed(), failed()])
    text = (tmp_path / "pr-comment.md").read_text()
    assert text.startswith(MARKER) and "`test_slow`" in text
