"""Assertions, baselines and the update flow, end to end in pytester runs.

The inner tests build `SpecDecResult`s from given figures (the gate's logic
is under test here, not a measurement) and hand them the real gate of the
`specdec` fixture. The gate on real CPU servers is calibrated in
tests/integration and benchmarks/gate_calibration.py.
"""

import json

import pytest

from tests.support.inner_results import MARKS, RESULTS_CONFTEST  # noqa: E402  (tests/ is on sys.path: tests/conftest.py)


@pytest.fixture
def inner(pytester):
    pytester.makeconftest(RESULTS_CONFTEST)
    return pytester


def run_inner(pytester, *args):
    return pytester.runpytest("--specdec-cpu", "-p", "no:cacheprovider", *args)


def test_assertions_pass_and_fail_with_a_table(inner):
    inner.makepyfile(
        MARKS
        + """
def test_speedup_ok(make_result):
    make_result().assert_speedup(min=1.2).assert_speedup(min=1.2, metric="median_tpot_ms")

def test_speedup_fails(make_result):
    make_result(sd=(33.0,)).assert_speedup(min=1.2)

def test_acceptance_ok(make_result):
    make_result().assert_acceptance(min_rate=0.5, min_length=3.0, min_per_position=[0.9, 0.7])

def test_acceptance_fails(make_result):
    make_result(accepted=(100.0,)).assert_acceptance(min_rate=0.5, min_per_position=[0.9, 0.7])

def test_acceptance_percent_is_refused(make_result):
    make_result().assert_acceptance(min_rate=65)

def test_outputs_ok(make_result):
    make_result().assert_outputs_equivalent(min_match=1.0)

def test_outputs_fail(make_result):
    make_result(sd_outputs=[[1, 2, 3, 4], [1, 2, 9, 9], [1, 2, 3, 4], [5, 6, 7, 8]]).assert_outputs_equivalent(min_match=0.9)
"""
    )
    result = run_inner(inner)
    result.assert_outcomes(passed=3, failed=4)
    out = result.stdout.str()
    assert "SD speedup below the required minimum" in out
    result.stdout.fnmatch_lines(
        ["*metric*required*measured*change*tolerance*95% CI*", "*speedup (output_throughput)*1.200*1.100*-8.3%*FAIL*"]
    )
    result.stdout.fnmatch_lines(
        ["*acceptance_rate*0.500*0.250*-50.0%*FAIL*", "*acceptance at position 0*0.900*0.400*FAIL*"]
    )
    assert "is a fraction (0.65 for 65%)" in out
    result.stdout.fnmatch_lines(
        [
            "*output match rate*0.900*0.500*FAIL*",
            "*request 1: first difference at token 2*",
            "*reference: '1 2 3 4'*",
            "*SD:        '1 2 9 9'*",
        ]
    )
    assert "no reference logprobs: run specdec.run(logprobs=2)" in out
    result.stdout.fnmatch_lines(
        [
            "*reproduce by hand:*",
            "*speculative_server: vllm serve m --speculative-config*",
            "*bench: vllm bench serve --model m*",
            "*server log: /tmp/server.log*",
        ]
    )


def test_near_ties_are_told_apart_with_reference_logprobs(inner):
    inner.makepyfile(
        MARKS
        + """
TIE = [{"a": -0.70, "b": -0.72}] * 4      # top two within 0.02 nats everywhere
CLEAR = [{"a": -0.1, "b": -2.5}] * 4

def test_tie_ignored(make_result):
    make_result(sd_outputs=[[1, 2, 3, 4], [1, 2, 9, 9], [1, 2, 3, 4], [1, 2, 3, 4]],
                logprobs=TIE).assert_outputs_equivalent(min_match=1.0)

def test_tie_counted_when_asked(make_result):
    make_result(sd_outputs=[[1, 2, 3, 4], [1, 2, 9, 9], [1, 2, 3, 4], [1, 2, 3, 4]],
                logprobs=TIE).assert_outputs_equivalent(min_match=1.0, ignore_numerical_ties=False)

def test_real_divergence(make_result):
    make_result(sd_outputs=[[1, 2, 3, 4], [1, 2, 9, 9], [1, 2, 3, 4], [1, 2, 3, 4]],
                logprobs=CLEAR).assert_outputs_equivalent(min_match=1.0)
"""
    )
    result = run_inner(inner)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*3 of 4 requests identical over 1 repeat(s), 1 diverged at a numerical near-tie*",
            "*first difference at token 2 (near-tie, top-2 gap 0.020)*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*0 diverged at a numerical near-tie*1 diverged for real*",
            "*first difference at token 2 (real, top-2 gap 2.400)*",
        ]
    )


def baseline_files(pytester):
    return sorted((pytester.path / "baselines").glob("*.json"))


GATED = (
    MARKS
    + """
import os

def test_gated(make_result):
    scale = float(os.environ.get("SPEEDUP_SCALE", "1"))
    step = float(os.environ.get("REFERENCE_STEP_SCALE", "1"))  # another machine's decode speed
    accepted = float(os.environ.get("ACCEPTED_SCALE", "1"))
    make_result(ref=(30.0, 30.6, 29.7), sd=(45.0 * scale, 45.9 * scale, 44.6 * scale),
                ref_tpot=(33.0 * step, 32.6 * step, 33.4 * step), sd_tpot=(22.0, 22.3, 21.8),
                accepted=(240.0 * accepted, 238.0 * accepted, 242.0 * accepted)).assert_no_regression()
"""
)


def test_missing_baseline_fails_and_says_how_to_record(inner):
    inner.makepyfile(test_gated=GATED)
    result = run_inner(inner)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*--specdec-update-baselines*"])
    assert baseline_files(inner) == []


def test_update_then_rerun_is_green_and_a_real_drop_fails(inner, monkeypatch):
    inner.makepyfile(test_gated=GATED)
    first = run_inner(inner, "--specdec-update-baselines")
    first.assert_outcomes(passed=1)
    (path,) = baseline_files(inner)
    first.stdout.fnmatch_lines(["*specdec baselines*", f"written: {path}"])
    data = json.loads(path.read_text())
    assert data["schema_version"] == 2 and data["test_id"] == "test_gated.py::test_gated"
    assert len(data["repeats"]) == 3 and data["fingerprint"]["device_kind"] == "cpu"
    before = path.read_text()

    run_inner(inner).assert_outcomes(passed=1)  # same figures: green, nothing rewritten
    run_inner(inner, "--specdec-update-baselines").assert_outcomes(passed=1)
    assert path.read_text() == before, "a baseline within tolerance must not be rewritten"

    monkeypatch.setenv("SPEEDUP_SCALE", "0.75")  # SD throughput 25% down
    dropped = run_inner(inner)
    dropped.assert_outcomes(failed=1)
    dropped.stdout.fnmatch_lines(
        [
            "*performance regressed against the baseline of test_gated.py::test_gated*",
            "*metric*baseline*measured*change*tolerance*",
            "*speedup_output_throughput*FAIL*",
            "*output_throughput*FAIL*",
            "*same machine: every gated figure compared, the reference's own tok/s and ms included*",
        ]
    )
    run_inner(inner, "--specdec-update-baselines").assert_outcomes(passed=1)
    assert path.read_text() != before, "an out-of-tolerance baseline is refreshed when updating"


def test_corrupt_and_invalid_baselines_name_the_file_and_field(inner):
    inner.makepyfile(test_gated=GATED)
    run_inner(inner, "--specdec-update-baselines").assert_outcomes(passed=1)
    (path,) = baseline_files(inner)
    data = json.loads(path.read_text())
    data["repeats"][0]["derived"]["acceptance_rate"] = "high"
    path.write_text(json.dumps(data))
    invalid = run_inner(inner)
    invalid.assert_outcomes(failed=1)
    assert path.name in invalid.stdout.str() and "acceptance_rate" in invalid.stdout.str()
    path.write_text('{"schema_version": 1, "test_id": ')
    corrupt = run_inner(inner)
    corrupt.assert_outcomes(failed=1)
    assert path.name in corrupt.stdout.str() and "line 1" in corrupt.stdout.str()


def test_stale_baselines_are_reported_then_deleted_when_updating(inner):
    inner.makeini("[pytest]\ntestpaths = suite\n")
    (inner.path / "suite").mkdir()
    (inner.path / "suite" / "test_gated.py").write_text(GATED)
    run_inner(inner, "--specdec-update-baselines").assert_outcomes(passed=1)
    (kept,) = baseline_files(inner)
    data = json.loads(kept.read_text())
    stale = kept.with_name("gone.json")
    stale.write_text(json.dumps({**data, "test_id": "suite/test_gated.py::test_removed_long_ago"}))
    other_suite = kept.with_name("elsewhere.json")
    other_suite.write_text(json.dumps({**data, "test_id": "examples/test_x.py::test_y"}))

    narrowed = inner.runpytest("--specdec-cpu", "-p", "no:cacheprovider", "suite/test_gated.py")
    narrowed.assert_outcomes(passed=1)
    assert "gone.json" not in narrowed.stdout.str()  # not a full-suite run: no verdict on stale files
    deselecting = run_inner(inner, "-k", "nothing_matches")
    assert "gone.json" not in deselecting.stdout.str()

    reported = run_inner(inner)
    reported.stdout.fnmatch_lines([f"stale baseline (no test uses it; --specdec-update-baselines deletes it): {stale}"])
    assert "elsewhere.json" not in reported.stdout.str()  # outside testpaths: another suite's baseline
    assert stale.exists()
    deleted = run_inner(inner, "--specdec-update-baselines")
    deleted.stdout.fnmatch_lines([f"deleted stale baseline: {stale}"])
    assert not stale.exists() and kept.exists() and other_suite.exists()


def test_xdist_workers_update_different_baselines(inner):
    # Two targets: the plugin groups each target's tests onto one worker
    # (xdist loadgroup), so the two workers write different baselines at once.
    inner.makepyfile(
        test_many="""
import os
import pytest

NGRAM = {"method": "ngram", "num_speculative_tokens": 4}

@pytest.mark.workload("code_edit")
@pytest.mark.access_pattern("throughput_low")
@pytest.mark.parametrize("n", [pytest.param(n, marks=pytest.mark.specdec(model=f"m{n % 2}", speculative_config=NGRAM))
                               for n in range(6)])
def test_gated(make_result, n):
    make_result(sd=(40.0 + n,)).assert_no_regression()
    with open(f"worker-{n}", "w") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "none"))
"""
    )
    run_inner(inner, "-n", "2", "--specdec-update-baselines").assert_outcomes(passed=6)
    files = baseline_files(inner)
    assert len(files) == 6
    ids = {json.loads(f.read_text())["test_id"] for f in files}
    assert ids == {f"test_many.py::test_gated[{n}]" for n in range(6)}  # no xdist group suffix
    workers = {n: (inner.path / f"worker-{n}").read_text() for n in range(6)}
    assert {workers[0], workers[2], workers[4]} != {workers[1], workers[3], workers[5]}
    assert len({workers[0], workers[2], workers[4]}) == 1 and len({workers[1], workers[3], workers[5]}) == 1
    run_inner(inner, "-n", "2").assert_outcomes(passed=6)
    run_inner(inner).assert_outcomes(passed=6)  # the same baselines serve a run without xdist


def test_results_reach_junit_xml_and_benchmark_json(inner):
    inner.makepyfile(MARKS + "\ndef test_one(make_result):\n    make_result().assert_speedup(min=1.2)\n")
    result = run_inner(inner, "--junitxml=junit.xml", "--benchmark-json=bench.json")
    result.assert_outcomes(passed=1)
    junit = (inner.path / "junit.xml").read_text()
    assert 'name="specdec_speedup_output_throughput" value="1.5"' in junit
    assert 'name="specdec_acceptance_rate" value="0.6"' in junit
    bench = json.loads((inner.path / "bench.json").read_text())
    (entry,) = bench["benchmarks"]
    assert entry["group"] == "specdec" and entry["fullname"].endswith(".py::test_one")
    assert entry["extra_info"]["specdec_speedup_output_throughput"] == 1.5
