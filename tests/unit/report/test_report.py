"""Report rows, the text renderings and the files, from results built of given figures."""

import csv
import io
import json
import math
import statistics
from dataclasses import replace

import pytest

from pytest_specdec.analysis.theory import cost_ratio_for
from pytest_specdec.report.row.rows import CSV_COLUMNS, row_for
from pytest_specdec.report.files import (
    ReportError,
    append_step_summary,
    load_report,
    report_document,
    validate_report,
    write_report,
)
from pytest_specdec.report.tables import csv_text, markdown_summary, terminal_table
from pytest_specdec.config.spec import ServerSpec
from tests.support.report_results import NGRAM, WORKLOAD, PATTERN, result, run


def test_row_carries_ratios_theory_and_costs():
    row = row_for(
        "t.py::test_ngram",
        NGRAM,
        WORKLOAD,
        PATTERN,
        outcome="passed",
        result=result(),
        regression="passed",
        cost_ratio=0.0,
        gpu_usd_per_hour=3.6,
    )
    assert row["config"] == "ngram k=4 prompt_lookup_max=4 --enforce-eager"
    assert (row["method"], row["k"], row["workload"], row["access_pattern"]) == (
        "ngram",
        4,
        "code_edit",
        "throughput_low",
    )
    assert row["speedup_output_throughput"] == pytest.approx(1.5)
    assert row["speedup_median_tpot"] == pytest.approx(1.5)
    assert row["speedup_median_ttft"] is not None and row["speedup_median_e2el"] is not None
    assert row["acceptance_rate"] == pytest.approx(0.75)
    assert row["acceptance_length"] == pytest.approx(4.0)
    assert row["per_position_acceptance"] == pytest.approx([1.0, 0.9, 0.7, 0.4])
    # c = 0: expected speedup is the acceptance length itself, 4.0 / (4 * 0 + 1).  The counters' 10 drafts and
    # 30 accepted tokens are more than these 2 requests' 20 decode tokens, so c is not measured and U is
    # unknown: the number given stands in, labelled.
    assert row["expected_speedup"] == pytest.approx(4.0)
    assert (row["cost_ratio"], row["cost_ratio_source"]) == (0.0, "given")
    assert "more than the 20 decode tokens" in row["theory"]["cost_ratio_note"]
    # A closed loop (rate inf, concurrency 1): priced at saturation.  1e6 / 30 tok/s * $3.6/h / 3600 s/h
    # = $33.33; with SD 1e6 / 45 * 0.001 = $22.22.
    assert row["cost_operating_point"] == "saturation"
    assert row["reference_usd_per_1m_tokens"] == pytest.approx(33.333, abs=1e-3)
    assert row["speculative_usd_per_1m_tokens"] == pytest.approx(22.222, abs=1e-3)
    assert "spans cut at k=4" in row["oracle_speedup_label"]
    assert row["match_rate"] == 1.0 and row["numerical_ties"] == 0
    assert row["reference"]["output_throughput"] == pytest.approx(30.0)


def test_row_carries_what_its_own_runs_put_into_its_speedup_for_a_results_history():
    # One draw: no spread to read it from.  Two draws sent once: one pair's timing is twice the reference's
    # variance across them (verdict.learned_drift.own_variance), over the two draws.
    assert (
        row_for("t.py::t", NGRAM, WORKLOAD, PATTERN, outcome="passed", result=result())["speedup_own_variance"] is None
    )
    one = result()
    ref_spec = NGRAM.reference()
    two = replace(
        one,
        reference_runs=[run(ref_spec, 30.0, 0.030), replace(run(ref_spec, 33.0, 0.028), repeat=1)],
        speculative_runs=[one.speculative_runs[0], replace(run(NGRAM, 48.0, 0.019), repeat=1)],
    )
    row = row_for("t.py::t", NGRAM, WORKLOAD, PATTERN, outcome="passed", result=two)
    expected = 2 * statistics.variance([math.log(30.0), math.log(33.0)]) / 2
    assert row["speedup_own_variance"] == pytest.approx(expected, rel=1e-6)


def test_row_with_a_draft_cost_and_divergent_outputs():
    row = row_for(
        "t.py::test_x",
        NGRAM,
        WORKLOAD,
        PATTERN,
        outcome="failed",
        result=result(sd_tok_s=20.0, sd_ids=((1, 2, 3), (4, 9, 9))),
        cost_ratio=0.25,
    )
    assert row["expected_speedup"] == pytest.approx(4.0 / (4 * 0.25 + 1))  # 2.0
    assert row["speedup_output_throughput"] == pytest.approx(20 / 30)
    assert row["match_rate"] == 0.5
    assert row["numerical_ties"] is None  # no logprobs were asked for: unknown, not zero
    assert row["regression"] == "not checked"
    assert row["reference_usd_per_1m_tokens"] is None


def test_row_without_a_result_keeps_the_configuration():
    row = row_for("t.py::test_y", NGRAM, WORKLOAD, PATTERN, outcome="error")
    assert row["speedup_output_throughput"] is None and row["repeats"] == 0 and row["config"].startswith("ngram k=4")
    validate_report(report_document([row]), "here")


def test_cost_ratio_from_local_model_directories(tmp_path):
    target, draft = tmp_path / "target", tmp_path / "draft"
    for path, layers, size in ((target, 30, 3000), (draft, 8, 800)):
        path.mkdir()
        (path / "config.json").write_text(json.dumps({"num_hidden_layers": layers}))
        (path / "model.safetensors").write_bytes(b"\0" * size)
    names = {"target": str(target), "draft": str(draft)}
    spec = ServerSpec("target", {"method": "draft_model", "model": "draft", "num_speculative_tokens": 3})
    estimate = cost_ratio_for(spec, names.get)
    assert estimate.value == pytest.approx(800 / 3000) and estimate.source == "estimated (parameter ratio)"
    assert (cost_ratio_for(NGRAM, names.get).value, cost_ratio_for(NGRAM, names.get).source) == (0.0, "method default")
    hub = ServerSpec("org/big", {"method": "draft_model", "model": "org/small", "num_speculative_tokens": 3})
    unknown = cost_ratio_for(hub, lambda name: name)  # not on disk: unknown, and why
    assert unknown.value is None and unknown.source == "unavailable" and "FileNotFoundError" in unknown.note


def rows():
    passed = row_for(
        "t.py::test_ngram",
        NGRAM,
        WORKLOAD,
        PATTERN,
        outcome="passed",
        result=result(),
        regression="passed",
        cost_ratio=0.0,
    )
    failed = row_for("t.py::test_y", NGRAM, WORKLOAD, PATTERN, outcome="error")
    return [passed, failed]


def test_terminal_table_has_one_aligned_row_per_result():
    lines = terminal_table(rows(), full=True)
    assert len(lines) == 4  # header, rule, two rows
    assert lines[0].split()[:5] == ["test", "SD", "config", "workload", "pattern"]
    assert "test_ngram" in lines[2] and "1.50x" in lines[2] and "4.00x" in lines[2] and "75%" in lines[2]
    assert lines[2].count("1.50x") == 2 and "100%" in lines[2] and "passed" in lines[2]  # TPOT 30 -> 20 ms: 1.50x
    assert lines[3].count("–") >= 6 and lines[3].rstrip().endswith("error")
    starts = [line.index("code_edit") for line in (lines[0].replace("workload", "code_edit"), lines[2], lines[3])]
    assert len(set(starts)) == 1  # columns line up


def test_csv_has_fixed_columns_and_empty_cells_for_missing_figures():
    parsed = list(csv.DictReader(io.StringIO(csv_text(rows()))))
    assert list(parsed[0]) == list(CSV_COLUMNS)
    assert float(parsed[0]["speedup_output_throughput"]) == pytest.approx(1.5)
    assert float(parsed[0]["reference_output_throughput"]) == pytest.approx(30.0)
    assert parsed[1]["speedup_output_throughput"] == "" and parsed[1]["outcome"] == "error"


def test_markdown_summary_table_and_notes():
    below = row_for(
        "t.py::test_slow",
        NGRAM,
        WORKLOAD,
        PATTERN,
        outcome="passed",
        result=result(sd_tok_s=31.0),
        cost_ratio=0.0,
        gpu_usd_per_hour=2.0,
    )
    text = markdown_summary(rows() + [below])
    assert text.startswith("## pytest-specdec results\n")
    assert "| test | SD config | workload | pattern | speedup |" in text
    assert "| test_ngram | ngram k=4 prompt_lookup_max=4 --enforce-eager | code_edit | throughput_low | 1.50x |" in text
    # Decode against decode: TPOT 30 -> 20 ms is 1.50x against 4.00x expected, short beyond the 15% margin
    # of one repeat (the line is 4.0 * 0.85 = 3.4); the throughput's 1.03x plays no part.
    assert "**Theory**" in text
    line = next(line for line in text.splitlines() if line.startswith("| t.py::test_slow | 0 | given: c not measured"))
    assert line.endswith(
        "| unknown | 1.000 | 4.00 | 4.00x | 1.50x | yes (beyond the 15% margin, the default speedup "
        "tolerance (one repeat: noise unknown)) |"
    )
    assert "USD per 1M output tokens" in text and "| saturation: closed loop, 1 request in flight" in text
    assert markdown_summary([]).endswith("No specdec test ran.\n")


def test_write_report_files_validate_and_leave_no_temp_files(tmp_path):
    written = write_report(tmp_path / "out", rows(), {"device_kind": "cpu"})
    names = sorted(p.name for p in written)
    assert {"results.json", "results.csv", "summary.md"} <= set(names)
    document = load_report(tmp_path / "out")
    assert document["schema_version"] == 3 and len(document["results"]) == 2
    assert document["results"][0]["speedup_output_throughput"] == pytest.approx(1.5)
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]
    assert "![speedup_heatmap](speedup_heatmap.png)" in (tmp_path / "out" / "summary.md").read_text()


def test_nan_becomes_null_and_an_invalid_row_names_the_field(tmp_path):
    row = rows()[0]
    assert json.dumps(report_document([row]), allow_nan=False)
    bad = dict(row, acceptance_rate=1.5)
    with pytest.raises(ReportError, match=r"results/0/acceptance_rate"):
        validate_report(report_document([bad]), "results.json")
    with pytest.raises(ReportError, match="not written"):
        write_report(tmp_path / "bad", [bad])
    assert not (tmp_path / "bad" / "results.json").exists()


def test_the_schema_declares_every_field_a_row_carries_and_refuses_others():
    from pytest_specdec.schemas import REPORT, load_schema

    declared = set(load_schema(REPORT)["$defs"]["row"]["properties"])
    measured = row_for(
        "t.py::test_ngram",
        NGRAM,
        WORKLOAD,
        PATTERN,
        outcome="passed",
        result=result(),
        regression="passed",
        cost_ratio=0.0,
        gpu_usd_per_hour=3.6,
    )
    before_measuring = row_for("t.py::test_x", NGRAM, WORKLOAD, PATTERN, outcome="failed")
    for row in (measured, before_measuring):
        assert set(row) <= declared, f"undeclared in report.schema.json: {sorted(set(row) - declared)}"
        validate_report(report_document([row]), "results.json")
    # A consumer learns every field from the schema: an unknown one is refused, naming it.
    with pytest.raises(ReportError, match="'speedup' was unexpected"):
        validate_report(report_document([dict(measured, speedup=1.5)]), "results.json")


def test_load_report_errors_name_the_file(tmp_path):
    with pytest.raises(ReportError, match="no such report file"):
        load_report(tmp_path)
    (tmp_path / "results.json").write_text("{oops")
    with pytest.raises(ReportError, match=r"results.json: not JSON \(line 1"):
        load_report(tmp_path)


def test_step_summary_is_appended_only_when_the_variable_is_set(tmp_path):
    target = tmp_path / "step_summary.md"
    target.write_text("earlier step\n")
    assert append_step_summary("## ours\n", environ={}) is None
    assert append_step_summary("## ours", environ={"GITHUB_STEP_SUMMARY": str(target)}) == target
    assert target.read_text() == "earlier step\n## ours\n"


def test_nan_figures_are_null():
    res = result()
    res.speculative_runs[0].counters = None  # a server without SD counters
    row = row_for("t.py::t", NGRAM, WORKLOAD, PATTERN, outcome="passed", result=res, cost_ratio=0.0)
    assert row["acceptance_rate"] is None and row["expected_speedup"] is None
    assert not any(isinstance(v, float) and math.isnan(v) for v in row.values())


def test_a_dynamic_k_schedule_has_no_single_k_theory():
    dynamic = replace(
        NGRAM,
        speculative_config={
            **NGRAM.speculative_config,
            "num_speculative_tokens_per_batch_size": [[1, 1, 4], [2, 8, 2]],
        },
    )
    row = row_for(
        "t.py::test_dynamic",
        dynamic,
        WORKLOAD,
        PATTERN,
        outcome="passed",
        result=result(),
        regression="passed",
        cost_ratio=0.0,
    )
    assert row["speedup_output_throughput"] == pytest.approx(1.5) and row["acceptance_rate"] == pytest.approx(0.75)
    for name in ("expected_speedup", "best_k", "oracle_speedup"):
        assert row[name] is None and "dynamic k schedule" in row["unavailable"][name]
