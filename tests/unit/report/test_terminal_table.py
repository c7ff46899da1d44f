"""The terminal's results table fits the terminal; the full table stays in the report; a session that left a
check undecided ends by naming it, and counts it in its last line."""

from tests.support.report_results import PATTERN, WORKLOAD, result

from pytest_specdec.config.settings import terminal_width
from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.report.row.rows import row_for
from pytest_specdec.report.tables import markdown_summary, session_counts, summary_sections, terminal_table

# The README's widest row: the dynamic-k schedule's config label alone is 126 characters.
WIDE = ServerSpec(
    "specdec:smollm2-135m",
    {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "num_speculative_tokens_per_batch_size": [[1, 1, 4], [2, 4, 2]],
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
    },
    server_args=("--enforce-eager",),
)
LONG_NAME = "examples/cpu/test_dynamic_k.py::test_throughput_holds_across_the_k_switch_on_every_level_of_the_sweep"


def wide_rows() -> list[dict]:
    measured = row_for(LONG_NAME, WIDE, WORKLOAD, PATTERN, outcome="passed", result=result(), regression="passed")
    error = row_for("t.py::test_y", WIDE, WORKLOAD, PATTERN, outcome="error")
    return [measured, error]


def test_the_full_table_is_wider_than_a_terminal():
    # What the compact table is for: every column, as the report keeps it.
    assert max(len(line) for line in terminal_table(wide_rows(), full=True)) > 200


def test_on_a_terminal_of_unknown_width_rows_keep_to_120_columns():
    lines = terminal_table(wide_rows())
    assert max(len(line) for line in lines) <= 120, "\n".join(lines)
    header = lines[0].split()
    assert header == ["test", "SD", "workload", "pattern", "speedup", "accept", "baseline", "runs", "outcome"]
    # The figures are never cut: the speedup and acceptance as measured, the outcome at the end.
    assert "1.50x" in lines[2] and "75%" in lines[2] and lines[2].rstrip().endswith("passed")
    assert "ngram k=4" in lines[2] and "num_speculative_tokens_per_batch_size" not in lines[2]
    assert lines[2].startswith("test_throughput_hol")  # a test's name stays readable on 120 columns


def test_on_a_narrow_terminal_the_names_are_cut_and_marked():
    for width in (110, 100):
        lines = terminal_table(wide_rows(), width)
        assert max(len(line) for line in lines) <= width, (width, lines)
        assert "…" in lines[2] and "1.50x" in lines[2]


def test_the_full_table_is_still_in_the_markdown_summary():
    summary = markdown_summary(wide_rows())
    assert "num_speculative_tokens_per_batch_size" in summary and "| same output |" in summary.replace("  ", " ")


def test_the_terminal_width_is_the_terminals_or_none_in_a_log():
    # pytest's stdout here is not a terminal (a log, a captured session): no width, whatever COLUMNS says.
    assert terminal_width({"COLUMNS": "97"}) is None and terminal_width({}) is None


def undecided_row() -> dict:
    row = row_for("t.py::test_suffix", WIDE, WORKLOAD, PATTERN, outcome="undecided", result=result())
    row["decisions"] = {
        "speedup": {
            "outcome": "undecided",
            "stopped": "undecided at the cap (8 runs a side)",
            "why": "still undecided: more prompts per draw (the draws differ by 12% on their own) would decide it",
        },
        "acceptance": {"outcome": "passed", "stopped": "decided at the minimum", "why": None},
    }
    row["regression"] = "partly compared"
    return row


def test_a_session_with_an_undecided_check_ends_by_naming_it_and_what_would_decide_it():
    rows = [undecided_row(), wide_rows()[0]]
    sections = summary_sections(rows, None, [], [], False, [])
    title, lines = sections[-1]
    assert title == "specdec undecided: 1 checks not passed"
    assert lines == [
        "test_suffix: speedup undecided (undecided at the cap (8 runs a side)): still undecided: more prompts per "
        "draw (the draws differ by 12% on their own) would decide it"
    ]
    # Counted beside pytest's own in the session's last line ("2 passed, 1 undecided").
    assert session_counts(rows) == {"undecided": 1}


def test_a_session_with_every_check_decided_has_no_such_section():
    rows = wide_rows()
    assert not any(title and "undecided" in title for title, _ in summary_sections(rows, None, [], [], False, []))
    assert session_counts(rows) == {}


def test_a_baseline_check_decided_by_the_rule_is_named_once():
    row = undecided_row()
    row["decisions"]["speedup_output_throughput against the baseline"] = {
        "outcome": "undecided",
        "stopped": "undecided after 4 runs a side",
        "why": "a quieter box would decide it",
    }
    row["regression"] = "undecided"
    lines = summary_sections([row], None, [], [], False, [])[-1][1]
    assert len(lines) == 2 and not any("baseline check undecided" in line for line in lines), lines
