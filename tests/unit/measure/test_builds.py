"""Two builds of one engine in one session (--specdec-baseline-from build:PATH, --specdec-build): the spec's
identity, the options, the engines' build paths, llama.cpp's counters without steps, the gate against the
baseline build and the builds table in every report.  Results are built from given figures."""

import argparse
import json
import math
import os
import sys

import pytest

from pytest_specdec.engines import engine_named, llamacpp
from pytest_specdec.engines.base import EngineConfigError, LaunchRequest, is_python
from pytest_specdec.engines.counters import SpecDecodeCounters, counters_from_requests
from pytest_specdec.engines.per_request import ACCEPTED, DRAFTED, STEPS
from pytest_specdec.engines.server_spec import ServerSpec
from pytest_specdec.history.options import HistorySettings, parse_baseline_source, parse_build_path
from pytest_specdec.measure.build_runs import Build, BuildComparison
from pytest_specdec.analysis.metrics import summarize
from pytest_specdec.measure.result import Run, SpecDecResult, compare_outputs
from pytest_specdec.report.builds import builds_cell, builds_lines, builds_markdown, builds_section
from pytest_specdec.report.files import load_report, report_document, validate_report, write_report
from pytest_specdec.report.row.rows import row_for
from pytest_specdec.verdict.gate import BaselineSession, RegressionGate

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}
OLD = "/envs/old/bin/python"
FLAG = "--specdec-baseline-from build:PATH"

# --- the spec's identity ------------------------------------------------------------------------


def test_the_sessions_own_build_keeps_the_key_it_always_had():
    spec = ServerSpec("m", NGRAM)
    assert spec.key == ServerSpec("m", NGRAM, build=None).key
    assert spec.key == (
        '{"model":"m","server_args":[],"speculative_config":{"method":"ngram","num_speculative_tokens":4,'
        '"prompt_lookup_max":3},"tensor_parallel_size":1}'
    )
    assert "build" not in json.loads(spec.key) and "(build" not in spec.label()


def test_another_build_is_another_server_and_target():
    spec = ServerSpec("m", NGRAM, engine="llamacpp")
    other = spec.on_build(OLD)
    assert other.build == OLD and other != spec and other.key != spec.key
    assert json.loads(other.key)["build"] == OLD
    assert other.target != spec.target and other.reference().target == other.target
    assert f"(build {OLD})" in other.label() and "on llamacpp" in other.label()
    back = other.on_build(None)
    assert back == spec and back.key == spec.key and back.target == spec.target and back.build is None


# --- the options --------------------------------------------------------------------------------


@pytest.fixture
def venv_python(tmp_path):
    """A venv's python: a symlink to the real interpreter, which must be kept, not resolved."""
    link = tmp_path / "envX" / "bin" / "python"
    link.parent.mkdir(parents=True)
    link.symlink_to(sys.executable)
    return link


def test_a_baseline_build_is_an_absolute_unresolved_executable(venv_python, tmp_path, monkeypatch):
    assert parse_baseline_source(f"build:{venv_python}") == f"build:{venv_python}"
    assert os.path.realpath(venv_python) != str(venv_python)
    monkeypatch.chdir(tmp_path)
    assert parse_baseline_source("build:envX/bin/python") == f"build:{venv_python}"
    assert parse_build_path(str(venv_python)) == str(venv_python)
    assert parse_build_path("envX/bin/python") == str(venv_python)


@pytest.mark.parametrize("kind", ["missing", "directory", "not executable"])
def test_a_build_that_cannot_launch_is_refused_naming_the_path_and_the_flag(tmp_path, kind):
    path = tmp_path / "build"
    if kind == "directory":
        path.mkdir()
    elif kind == "not executable":
        path.write_text("#!/bin/sh\n")
        path.chmod(0o644)
    with pytest.raises(argparse.ArgumentTypeError) as baseline:
        parse_baseline_source(f"build:{path}")
    assert str(path) in str(baseline.value) and FLAG in str(baseline.value)
    with pytest.raises(argparse.ArgumentTypeError) as own:
        parse_build_path(str(path))
    assert str(path) in str(own.value) and "--specdec-build" in str(own.value)
    assert ("no such file" in str(own.value)) == (kind == "missing")


def test_file_and_history_are_unchanged_and_anything_else_is_refused():
    assert parse_baseline_source("file") == "file" and parse_baseline_source("history") == "history"
    for value in ("builds", "File", "build", "history:x", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="expected one of file, history, build:PATH"):
            parse_baseline_source(value)


def test_the_baseline_build_of_the_history_settings():
    assert HistorySettings(baseline_from="build:/x").baseline_build == "/x"
    assert HistorySettings(baseline_from="file").baseline_build is None
    assert HistorySettings(baseline_from="history").baseline_build is None
    assert HistorySettings().baseline_build is None


# --- the engines' build paths -------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, expected",
    [
        ("python", True),
        ("python3", True),
        ("/envs/x/bin/python3.11", True),
        ("llama-server", False),
        ("pythonx", False),
        ("/usr/bin/python-config", False),
    ],
)
def test_is_python(path, expected):
    assert is_python(path) is expected


def test_vllm_launches_only_a_python_and_llama_cpp_both():
    with pytest.raises(EngineConfigError, match="/opt/llama/llama-server") as refused:
        engine_named("vllm").check_build("/opt/llama/llama-server")
    assert refused.value.field == "build"
    engine_named("vllm").check_build(OLD)
    engine_named("llamacpp").check_build(OLD)
    engine_named("llamacpp").check_build("/opt/llama/llama-server")


@pytest.fixture
def no_binary(monkeypatch):
    monkeypatch.delenv(llamacpp.BINARY_ENV, raising=False)
    monkeypatch.setattr(llamacpp.shutil, "which", lambda name: None)


def test_llama_cpp_runs_the_build_it_is_given(monkeypatch):
    monkeypatch.setenv(llamacpp.BINARY_ENV, "/opt/other/llama-server")  # a named build wins over it
    build = "/envs/envX/bin/python"
    assert llamacpp.server_program(sys.executable, build=build) == [build, llamacpp.SHIM_PATH]
    assert llamacpp.server_program(sys.executable, build="/opt/b8929/llama-server") == ["/opt/b8929/llama-server"]


def draft_command(**extra):
    config = {"method": "draft_model", "model": "d.gguf", "num_speculative_tokens": 3, **extra}
    spec = ServerSpec("t.gguf", config, engine="llamacpp")
    llamacpp.ENGINE.check(spec)
    launch = LaunchRequest(spec, "cpu", "127.0.0.1", 8123, "/pkg/t.gguf", config, None, python="/venv/python")
    return llamacpp.ENGINE.command(launch)


def p_min_flag(command):
    return command[command.index("--spec-draft-p-min") + 1] if "--spec-draft-p-min" in command else None


def test_p_min_zero_unless_the_marker_says_and_none_leaves_the_builds_own(no_binary):
    assert p_min_flag(draft_command()) == "0"
    assert p_min_flag(draft_command(p_min=0.5)) == "0.5"
    assert p_min_flag(draft_command(p_min=None)) is None
    assert draft_command(p_min=None)[:2] == ["/venv/python", llamacpp.SHIM_PATH]


@pytest.mark.parametrize("p_min", [2, -0.1, "x", True])
def test_a_p_min_that_is_no_probability_is_refused(p_min):
    spec = ServerSpec(
        "t.gguf",
        {"method": "draft_model", "model": "d.gguf", "num_speculative_tokens": 3, "p_min": p_min},
        engine="llamacpp",
    )
    with pytest.raises(EngineConfigError, match=r"speculative_config\.p_min"):
        llamacpp.ENGINE.check(spec)


def test_the_version_of_a_llama_server_binary(tmp_path):
    binary = tmp_path / "llama-server"
    binary.write_text('#!/bin/sh\necho "version: 8929 (64fbe0fe)" >&2\necho "built with cc" >&2\n')
    binary.chmod(0o755)
    assert llamacpp.ENGINE.build_version(str(binary)) == "llama.cpp b8929-64fbe0fe"
    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\nexit 0\n")
    silent.chmod(0o755)
    assert llamacpp.ENGINE.build_version(str(silent)) is None


# --- counters summed from responses without step counts -----------------------------------------


class Record:
    def __init__(self, index, figures, success=True):
        self.index, self.spec_decoding, self.success = index, figures, success


def test_responses_without_step_counts_give_a_rate_but_no_length():
    records = [Record(0, {DRAFTED: 10, ACCEPTED: 4}), Record(1, {DRAFTED: 6, ACCEPTED: 4})]
    counters = counters_from_requests(records, "http://h:8080")
    assert counters.present and (counters.num_draft_tokens, counters.num_accepted_tokens) == (16.0, 8.0)
    assert counters.acceptance_rate == pytest.approx(0.5)
    assert math.isnan(counters.num_drafts) and math.isnan(counters.acceptance_length)


def test_responses_mixing_step_counts_and_none_are_unavailable():
    records = [Record(0, {STEPS: 3, DRAFTED: 10, ACCEPTED: 4}), Record(1, {DRAFTED: 6, ACCEPTED: 4})]
    counters = counters_from_requests(records, "http://h:8080")
    assert not counters.present and "request 1 first" in counters.problem


# --- the gate against the baseline build --------------------------------------------------------

SPEC = ServerSpec("m", NGRAM, engine="llamacpp")
FINGERPRINT = {
    "engine": "vllm",
    "engine_version": "0.32.0",
    "device_kind": "cpu",
    "device_name": "x",
    "device_count": 2,
    "driver": None,
    "torch_version": "2.13.0",
}
THIS_VERSION, BASE_VERSION = "xllamacpp 2026.10", "xllamacpp 2026.4"


class Rec:
    def __init__(self, index, tpot_s=0.02):
        self.index, self.prompt_len, self.output_tokens = index, 16, 4
        self.ttft, self.itl = 0.05, [tpot_s] * 3
        self.latency = 0.05 + tpot_s * 3
        self.token_ids, self.top_logprobs, self.success = [1, 2, 3, 4], None, True
        self.text = "1 2 3 4"


def make_result(accepted=(200, 200, 200), facts=None):
    """Three repeats (seeds by repeat, as every result of one test has them), `accepted` of 400 drafted."""

    def run(spec, tpot, repeat, counters):
        records = [Rec(i, tpot) for i in range(4)]
        return Run(spec, repeat, summarize(records, duration_s=1.0), records, counters, ["llama-server"], 0.0)

    reference = [run(SPEC.reference(), 0.03, r, None) for r in range(len(accepted))]
    speculative = [run(SPEC, 0.02, r, SpecDecodeCounters(100, 400, a)) for r, a in enumerate(accepted)]
    speculative[0].engine_facts = facts
    outputs = [compare_outputs(a.records, b.records) for a, b in zip(reference, speculative)]
    return SpecDecResult(
        SPEC, {"name": "w"}, {"name": "p"}, reference, speculative, outputs[0], {}, outputs_per_repeat=outputs
    )


def pair(this_accepted=(200, 200, 200), base_accepted=(200, 200, 200), this_facts=None, base_facts=None):
    result = make_result(this_accepted, this_facts)
    result.builds = BuildComparison(
        Build("llamacpp", None, THIS_VERSION),
        Build("llamacpp", OLD, BASE_VERSION),
        make_result(base_accepted, base_facts),
        ["this", "baseline", "baseline", "this"],
    )
    return result


def gate(tmp_path):
    def never(*args):
        raise AssertionError("a builds A/B read a baseline from the session")

    session = BaselineSession(base_dir=tmp_path, update=False, fingerprint=FINGERPRINT, loader=never)
    return RegressionGate(session, "t.py::test")


def test_equal_builds_pass_on_the_same_machine_without_reading_a_baseline(tmp_path):
    check = gate(tmp_path)
    check.check(pair())
    assert check.outcome == "passed"
    for words in (THIS_VERSION, BASE_VERSION, "A B B A", "same machine", OLD):
        assert words in check.comparison
    assert check.not_compared == {} and list(tmp_path.iterdir()) == []


def test_a_lower_acceptance_on_this_build_fails_against_the_baseline_build(tmp_path):
    check = gate(tmp_path)
    with pytest.raises(AssertionError) as failed:
        check.check(pair(this_accepted=(140, 140, 140)))
    message = str(failed.value)
    assert "performance regressed against the baseline build of t.py::test" in message
    assert "baseline build (B)" in message and THIS_VERSION in message and BASE_VERSION in message
    assert check.outcome == "failed"
    rate = next(f for f in check.figures if f["figure"] == "acceptance_rate")
    assert rate["baseline"] == pytest.approx(0.5) and rate["measured"] == pytest.approx(0.35)
    assert rate["change"] == pytest.approx(-0.3) and rate["ok"] is False


def test_a_flagged_baseline_build_leaves_its_speedups_uncompared(tmp_path):
    result = pair()
    result.builds.flagged = {"baseline": ["cold"]}
    check = gate(tmp_path)
    check.check(result)
    # Undecided, not passed: a flag that stays may be the regression; each side's own figures were compared.
    assert check.outcome == "undecided"  # its own outcome: --specdec-strict fails it
    assert "speedup_output_throughput" in check.not_compared
    assert check.not_compared["speedup_output_throughput"].startswith("undecided: ")
    assert "cold" in check.not_compared["speedup_output_throughput"]
    assert all(metric.startswith("speedup_") for metric in check.not_compared)
    assert "acceptance_rate" in {f["figure"] for f in check.figures}


def test_a_flag_the_test_accepted_is_accepted_on_the_baseline_builds_comparison_too(tmp_path):
    result = pair()
    result.builds.flagged = {"baseline": ["ttft_at_concurrency_1: TTFT speedup 0.78x one request at a time"]}
    result.builds.flagged_kinds = {"this": [], "baseline": ["ttft_at_concurrency_1"]}
    result.accepted_flags = ("ttft_at_concurrency_1",)
    check = gate(tmp_path)
    check.check(result)
    assert check.outcome == "passed" and check.not_compared == {}
    # A flag of another kind still leaves the speedups uncompared, and so does one whose kind is not known.
    for kinds in ({"baseline": ["ttft_at_concurrency_1", "above_ceiling"]}, None):
        result.builds.flagged_kinds = kinds
        check = gate(tmp_path)
        check.check(result)
        assert check.outcome == "undecided" and "speedup_output_throughput" in check.not_compared


def test_engine_facts_that_differ_besides_the_version_are_named():
    result = pair(
        this_facts={"async_scheduling": True, "version": "b9000"},
        base_facts={"async_scheduling": False, "version": "b8000"},
    )
    assert result.builds.fact_changes(result) == [("SD", "async_scheduling", False, True)]
    assert "async_scheduling False (B) -> True (A)" in result.builds.describe(result)
    same = pair(this_facts={"version": "b9000"}, base_facts={"version": "b8000"})
    assert same.builds.fact_changes(same) == []


# --- the builds table in the reports ------------------------------------------------------------


def report_row(result):
    return row_for(
        "t.py::test_ngram", SPEC, {"name": "w"}, {"name": "p"}, outcome="passed", result=result, regression="passed"
    )


def varied_pair():
    return pair(this_accepted=(150, 160, 170), base_accepted=(200, 190, 210))


def test_the_builds_cell_has_both_builds_the_order_and_paired_changes():
    cell = builds_cell(varied_pair(), "passed")
    assert cell["this"]["version"] == THIS_VERSION and cell["baseline"]["path"] == OLD
    assert cell["this"]["describe"] == f"llama.cpp {THIS_VERSION} (this environment)"
    assert cell["order"] == "A B B A" and cell["verdict"] == "passed"
    rate = cell["figures"]["acceptance_rate"]
    assert rate["this"] == pytest.approx(0.4) and rate["baseline"] == pytest.approx(0.5)
    assert rate["change"] < 0 and rate["change"] == pytest.approx(-0.2, abs=0.03)
    low, high = rate["ci"]
    assert low <= rate["change"] <= high
    assert builds_cell(make_result(), "passed") is None


def test_the_builds_table_in_the_terminal_summary_md_and_html():
    rows = [report_row(varied_pair())]
    lines = builds_lines(rows)
    assert lines[0].split()[:2] == ["test", "figure"] and "baseline build (B)" in lines[0]
    text = "\n".join(lines)
    assert THIS_VERSION in text and BASE_VERSION in text and "A B B A" in text
    markdown = builds_markdown(rows, lambda s: s.replace("|", "\\|"))
    assert any(line.startswith("| test | figure | this build (A) |") for line in markdown)
    assert any(line.startswith("| t.py::test_ngram | speedup |") for line in markdown)
    assert '<table id="builds-table">' in "\n".join(builds_section(rows))
    plain = [report_row(make_result())]
    assert builds_lines(plain) == [] and builds_markdown(plain, str) == [] and builds_section(plain) == []


def test_a_row_with_builds_validates_and_a_version_2_report_migrates(tmp_path):
    row = report_row(varied_pair())
    assert row["builds"]["order"] == "A B B A"
    validate_report(report_document([row]), "results.json")
    write_report(tmp_path / "out", [row, report_row(make_result())])
    path = tmp_path / "out" / "results.json"
    document = json.loads(path.read_text())
    assert document["schema_version"] == 3 and document["results"][1]["builds"] is None
    document["schema_version"] = 2
    for stored in document["results"]:
        del stored["builds"]
    path.write_text(json.dumps(document))
    loaded = load_report(tmp_path / "out")
    assert loaded["schema_version"] == 3 and loaded["migrated_from"] == 2
    assert [stored["builds"] for stored in loaded["results"]] == [None, None]
