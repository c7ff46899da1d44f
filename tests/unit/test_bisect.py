"""`pytest-specdec bisect`: the search, each step's pytest command, its verdict by exit code, the files.

The steps' pytest sessions are faked: a runner that answers by a planted first
differing build (and, where a test needs figures, writes a real results.json
into the step's report directory), so no server runs.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from pytest_specdec import bisect as bisect_module
from pytest_specdec.atomic import write_atomic
from pytest_specdec.bisect import bisect_main, read_figures, run_pytest, short_name, Step
from pytest_specdec.cli import COMMANDS, main
from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.report.files import report_document
from pytest_specdec.report.row.rows import row_for

PYTEST_ARGS = ["perf/", "--specdec-cpu", "-k", "ngram"]


def make_builds(tmp_path: Path, n: int) -> list[str]:
    builds = []
    for i in range(n):
        python = tmp_path / "envs" / f"engine-{i}" / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text("#!/bin/sh\n")
        python.chmod(0o755)
        builds.append(str(python))
    return builds


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


class FakePytest:
    """A step's pytest session: exit 1 (the gate failed) from build `first_bad` on, else 0."""

    def __init__(self, builds, first_bad=None, codes=None, versions=None):
        self.builds, self.first_bad = builds, first_bad
        self.codes = codes or {}  # build index -> exit code that overrides the verdict
        self.versions = versions  # build index -> version: write a results.json with figures
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> int:
        self.calls.append(argv)
        index = self.builds.index(option(argv, "--specdec-build"))
        if self.versions is not None:
            write_results(Path(option(argv, "--specdec-report")), self.versions[index], self.versions[0])
        if index in self.codes:
            return self.codes[index]
        return int(self.first_bad is not None and index >= self.first_bad)

    @property
    def tried(self) -> list[int]:
        return [self.builds.index(option(argv, "--specdec-build")) for argv in self.calls]


def builds_row(test_id="tests/test_sd.py::test_ngram", version="0.32.0", baseline_version="0.31.0", builds=True):
    row = row_for(
        test_id,
        ServerSpec("m", {"method": "ngram", "num_speculative_tokens": 4}),
        {"name": "code_edit"},
        {"name": "throughput_low", "request_rate": "inf", "max_concurrency": 1, "num_prompts": 4},
        outcome="passed",
        regression="passed",
    )
    figure = lambda this, base, change: {"this": this, "baseline": base, "change": change, "ci": None}  # noqa: E731
    row["builds"] = (
        {
            "this": {"engine": "vllm", "path": "/b/python", "version": version, "describe": f"vllm {version}"},
            "baseline": {
                "engine": "vllm",
                "path": "/a/python",
                "version": baseline_version,
                "describe": f"vllm {baseline_version}",
            },
            "order": "A B B A",
            "fact_changes": [],
            "flagged": {},
            "figures": {
                "speedup_output_throughput": figure(1.23, 1.30, -0.054),
                "acceptance_rate": figure(0.45, 0.5, -0.1),
                "acceptance_length": figure(2.1, 2.3, -0.087),
                "drafted_per_step": figure(4.0, 4.0, 0.0),
                "median_tpot_ms": figure(12.3, 11.8, -0.045),
                "median_ttft_ms": figure(None, 40.0, None),
            },
            "verdict": "passed",
        }
        if builds
        else None
    )
    return row


def write_results(directory: Path, version, baseline_version, rows=None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    rows = rows if rows is not None else [builds_row(version=version, baseline_version=baseline_version)]
    write_atomic(directory / "results.json", json.dumps(report_document(rows), indent=2))


def run(tmp_path, builds, runner, *extra, pytest_args=PYTEST_ARGS):
    argv = [arg for build in builds for arg in ("--build", build)]
    return bisect_main([*argv, "--report-dir", str(tmp_path / "out"), *extra, "--", *pytest_args], runner=runner)


CASES = [(n, bad) for n in range(3, 10) for bad in range(1, n)]


@pytest.mark.parametrize("n, first_bad", CASES, ids=[f"{n}-builds-bad-{bad}" for n, bad in CASES])
def test_the_first_differing_build_is_found_in_at_most_one_plus_log2_steps(tmp_path, capsys, n, first_bad):
    builds = make_builds(tmp_path, n)
    fake = FakePytest(builds, first_bad)
    assert run(tmp_path, builds, fake) == 0
    out = capsys.readouterr().out
    assert f"first build that differs from {builds[0]}: {builds[first_bad]} (-)" in out
    assert f"last build like the first: {builds[first_bad - 1]} (-)" in out
    assert "assumes one change point" in out
    # n - 1 builds may be the answer (any but the first): the last is tried, then ceil(log2(n - 1)) more.
    assert len(fake.calls) <= 1 + math.ceil(math.log2(n - 1))
    assert fake.tried[0] == n - 1 and 0 not in fake.tried and len(set(fake.tried)) == len(fake.tried)
    conclusion = json.loads((tmp_path / "out" / "bisect.json").read_text())["conclusion"]
    assert conclusion["first_differs"] == builds[first_bad]
    assert conclusion["last_like_first"] == builds[first_bad - 1]


def test_progress_lines_name_each_step_its_build_and_the_first(tmp_path, capsys):
    builds = make_builds(tmp_path, 6)
    run(tmp_path, builds, FakePytest(builds, 3))
    out = capsys.readouterr().out
    assert f"bisect step 1/4: {builds[5]} against {builds[0]}" in out
    assert f"bisect step 2/4: {builds[3]} against {builds[0]}" in out


def test_no_build_differs_after_one_step(tmp_path, capsys):
    builds = make_builds(tmp_path, 5)
    fake = FakePytest(builds, first_bad=None)
    assert run(tmp_path, builds, fake) == 0
    out = capsys.readouterr().out
    assert "no build differs from the first" in out
    assert fake.tried == [4]
    conclusion = json.loads((tmp_path / "out" / "bisect.json").read_text())["conclusion"]
    assert conclusion["first_differs"] is None and conclusion["error"] is None


@pytest.mark.parametrize(
    "code, meaning",
    [(2, "interrupted"), (3, "internal error"), (4, "usage error"), (5, "no tests collected"), (-9, "signal 9")],
)
@pytest.mark.parametrize("where", ["last", "middle"])
def test_a_step_that_errors_stops_the_bisect_naming_the_build(tmp_path, capsys, code, meaning, where):
    builds = make_builds(tmp_path, 7)
    broken = 6 if where == "last" else 3  # the last build, then the middle of 1..6
    fake = FakePytest(builds, first_bad=2, codes={broken: code})
    assert run(tmp_path, builds, fake) == 3
    captured = capsys.readouterr()
    assert f"step {len(fake.calls)} ({builds[broken]}) exited with code {code}" in captured.err
    assert meaning in captured.err
    assert fake.tried[-1] == broken  # nothing ran after it
    assert "first build that differs" not in captured.out
    document = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert document["conclusion"]["first_differs"] is None and document["conclusion"]["error"]
    assert document["steps"][-1]["exit_code"] == code and "error" in document["steps"][-1]["verdict"]
    if where == "middle":  # what the steps before it found is kept
        assert f"known so far: {builds[0]} (-) is like the first, {builds[6]} (-) differs" in captured.out


def test_a_build_that_does_not_exist_is_refused_by_name(tmp_path, capsys):
    builds = make_builds(tmp_path, 4)
    missing = str(tmp_path / "envs" / "nope" / "bin" / "python")
    fake = FakePytest(builds)
    assert run(tmp_path, [*builds[:2], missing, builds[3]], fake) == 2
    assert f"--build {missing}: no such file" in capsys.readouterr().err
    assert fake.calls == []


def test_a_build_that_is_not_executable_is_refused_by_name(tmp_path, capsys):
    builds = make_builds(tmp_path, 4)
    Path(builds[2]).chmod(0o644)
    assert run(tmp_path, builds, FakePytest(builds)) == 2
    assert f"--build {builds[2]}: not executable" in capsys.readouterr().err


@pytest.mark.parametrize(
    "count, pytest_args, message",
    [
        (2, PYTEST_ARGS, "at least three --build"),
        (4, [], "no PYTEST_ARGS"),
        (4, ["perf/", "--specdec-build", "x"], "--specdec-build is set by each step"),
        (4, ["perf/", "--specdec-report=r"], "--specdec-report=r is set by each step"),
    ],
)
def test_usage_errors_exit_2_before_any_step(tmp_path, capsys, count, pytest_args, message):
    builds = make_builds(tmp_path, count)
    fake = FakePytest(builds)
    assert run(tmp_path, builds, fake, pytest_args=pytest_args) == 2
    assert message in capsys.readouterr().err
    assert fake.calls == []


def test_a_build_listed_twice_is_refused(tmp_path, capsys):
    builds = make_builds(tmp_path, 3)
    assert run(tmp_path, [*builds, builds[1]], FakePytest(builds)) == 2
    assert "listed twice" in capsys.readouterr().err


@pytest.mark.parametrize("history", [None, "sqlite:///tmp/h.db"])
def test_each_step_runs_pytest_on_the_candidate_against_the_first_build(tmp_path, history):
    builds = make_builds(tmp_path, 6)
    fake = FakePytest(builds, first_bad=2)
    run(tmp_path, builds, fake, *(["--history", history] if history else []))
    for number, argv in enumerate(fake.calls, start=1):
        candidate = option(argv, "--specdec-build")
        assert argv[:3] == [sys.executable, "-m", "pytest"]
        assert argv[3 : 3 + len(PYTEST_ARGS)] == PYTEST_ARGS
        assert candidate in builds[1:]
        assert option(argv, "--specdec-baseline-from") == "build:" + builds[0]
        index = builds.index(candidate)
        assert option(argv, "--specdec-report") == str(tmp_path / "out" / f"step-{number:02d}-engine-{index}")
        if history:
            assert option(argv, "--specdec-history") == history
        else:
            assert "--specdec-history" not in argv


def test_the_table_and_files_carry_versions_and_figures(tmp_path, capsys):
    builds = make_builds(tmp_path, 5)
    versions = ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]
    fake = FakePytest(builds, first_bad=2, versions=versions)
    assert run(tmp_path, builds, fake) == 0
    out = capsys.readouterr().out
    assert f"first build that differs from {builds[0]}: {builds[2]} (0.32.0)" in out
    assert f"last build like the first: {builds[1]} (0.31.0)" in out
    assert "1.23x vs 1.30x (-5.4%)" in out and "45% vs 50% (-10.0%)" in out and "12.3 ms vs 11.8 ms (-4.5%)" in out
    markdown = (tmp_path / "out" / "bisect.md").read_text()
    assert "| step | build | version | verdict | test | speedup | acceptance | TPOT |" in markdown
    assert f"| 1 | {builds[4]} | 0.34.0 | differs | tests/test_sd.py::test_ngram | 1.23x vs 1.30x (-5.4%) |" in markdown
    assert f"first build that differs from {builds[0]}: {builds[2]} (0.32.0)" in markdown
    document = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert [step["build"] for step in document["steps"]] == [builds[4], builds[2], builds[1]]
    assert [step["verdict"] for step in document["steps"]] == ["differs", "differs", "same as the first build"]
    first = document["steps"][0]
    assert first["argv"] == fake.calls[0] and first["exit_code"] == 1 and first["version"] == "0.34.0"
    assert first["rows"][0]["figures"]["speedup_output_throughput"]["this"] == 1.23
    assert not list((tmp_path / "out").glob(".*.tmp"))  # written atomically, nothing left behind


def test_figures_that_cannot_be_read_are_unavailable_and_the_verdict_stands(tmp_path, capsys):
    builds = make_builds(tmp_path, 4)

    def runner(argv):
        report = Path(option(argv, "--specdec-report"))
        if builds.index(option(argv, "--specdec-build")) == 3:
            report.mkdir(parents=True)
            (report / "results.json").write_text("{not json")
        return 1

    assert run(tmp_path, builds, runner) == 0
    out = capsys.readouterr().out
    assert "unavailable (" in out and "not JSON" in out and "no such report file" in out
    steps = json.loads((tmp_path / "out" / "bisect.json").read_text())["steps"]
    assert all(step["rows"] == [] and step["unavailable"] for step in steps)
    assert [step["verdict"] for step in steps] == ["differs"] * len(steps)


def test_an_earlier_bisects_results_are_not_taken_for_this_steps(tmp_path):
    builds = make_builds(tmp_path, 3)
    write_results(tmp_path / "out" / "step-01-engine-2", "9.9.9", "0.30.0")
    assert run(tmp_path, builds, FakePytest(builds, first_bad=None)) == 0
    step = json.loads((tmp_path / "out" / "bisect.json").read_text())["steps"][0]
    assert step["version"] is None and "no such report file" in step["unavailable"]


def test_read_figures_from_a_real_report(tmp_path):
    rows = [builds_row("t::a"), builds_row("t::b", builds=False)]
    write_results(tmp_path, None, None, rows=rows)
    step = Step(1, "/b/python", [], tmp_path)
    read_figures(step)
    assert step.unavailable is None and (step.version, step.baseline_version) == ("0.32.0", "0.31.0")
    assert step.rows[0]["figures"]["median_tpot_ms"] == {"this": 12.3, "baseline": 11.8, "change": -0.045, "ci": None}
    assert set(step.rows[0]["figures"]) == {"speedup_output_throughput", "acceptance_rate", "median_tpot_ms"}
    assert step.rows[1]["figures"] is None and "no second build" in step.rows[1]["unavailable"]


def test_a_step_folder_is_named_by_the_build():
    assert short_name("/opt/envs/vllm-0.32/bin/python3.12") == "vllm-0.32"
    assert short_name("/src/llama.cpp-b4500/build/bin/llama-server") == "llama.cpp-b4500"
    assert short_name("./my build/server") == "server"
    assert short_name("python") == "python"


def test_the_real_runner_returns_pytests_exit_code():
    assert run_pytest([sys.executable, "-c", "raise SystemExit(5)"]) == 5


def test_the_command_line_dispatches_bisect(tmp_path, capsys):
    assert "bisect" in COMMANDS
    missing = str(tmp_path / "missing")
    assert main(["bisect", "--build", missing, "--build", missing, "--build", missing, "--", "perf/"]) == 2
    assert f"--build {missing}: no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        main(["bisect", "--help"])
    assert stop.value.code == 0
    assert "one change point" in " ".join(capsys.readouterr().out.split())


def test_the_default_report_directory(tmp_path, monkeypatch):
    builds = make_builds(tmp_path, 3)
    monkeypatch.chdir(tmp_path)
    argv = [arg for build in builds for arg in ("--build", build)]
    assert bisect_module.bisect_main([*argv, "--", "perf/"], runner=FakePytest(builds)) == 0
    assert (tmp_path / "specdec-bisect" / "bisect.md").is_file()
    assert (tmp_path / "specdec-bisect" / "bisect.json").is_file()
