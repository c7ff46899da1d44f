"""--specdec-shard and `pytest-specdec merge` end to end in pytester runs.

Results are built from given figures (test_gate's conftest): the split, the
report plumbing and the baseline merge are under test, not a measurement.
"""

import json
import subprocess
import sys

from tests.support.inner_results import RESULTS_CONFTEST

SUITE = """
import pytest

NGRAM = {"method": "ngram", "num_speculative_tokens": 4}
DRAFT = {"method": "draft_model", "model": "d", "num_speculative_tokens": 3}

def case(target, config, n):
    return pytest.param(target, n, marks=pytest.mark.specdec(model=target, speculative_config=config),
                        id=f"{target}-{config['method']}-{n}")

@pytest.mark.workload("code_edit")
@pytest.mark.access_pattern("throughput_low")
@pytest.mark.parametrize("target, n", [case(t, c, n) for t in ("a", "b", "c", "d") for c in (NGRAM, DRAFT)
                                       for n in range(2)])
def test_gated(make_result, target, n):
    make_result(sd=(40.0 + n,)).assert_no_regression()

def test_plain():
    pass
"""


def run(pytester, *args):
    return pytester.runpytest_subprocess("--specdec-cpu", "-p", "no:cacheprovider", *args)


def ids_in(report_dir):
    return json.loads((report_dir / "tests.json").read_text())["tests"]


def test_shards_split_by_target_and_merge_into_the_unsharded_report_and_baselines(pytester):
    pytester.makeconftest(RESULTS_CONFTEST)
    pytester.makepyfile(test_sharded=SUITE)
    whole = run(
        pytester, "--specdec-update-baselines", "--specdec-report", "whole", "--specdec-baseline-dir", "whole-baselines"
    )
    whole.assert_outcomes(passed=17)

    shard_ids = []
    for index in (1, 2):
        result = run(
            pytester,
            f"--specdec-shard={index}/2",
            "--specdec-update-baselines",
            "--specdec-report",
            f"shard{index}",
            "--specdec-baseline-dir",
            f"shard{index}-baselines",
        )
        result.assert_outcomes(passed=len(ids_in(pytester.path / f"shard{index}")))
        shard_ids.append(set(ids_in(pytester.path / f"shard{index}")))
        assert json.loads((pytester.path / f"shard{index}" / "tests.json").read_text())["complete"]
    assert not shard_ids[0] & shard_ids[1]
    assert shard_ids[0] | shard_ids[1] == set(ids_in(pytester.path / "whole"))
    for target in "abcd":  # a target's reference and SD servers never start in two shards
        owners = [i for i, ids in enumerate(shard_ids) if any(f"[{target}-" in t for t in ids)]
        assert len(owners) == 1, (target, owners)
    run(pytester, "--specdec-shard=1/2", "--specdec-report", "again")
    assert set(ids_in(pytester.path / "again")) == shard_ids[0]  # stable across runs

    merged = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_specdec",
            "merge",
            "merged",
            "shard1",
            "shard2",
            "--update-baselines",
            "--baseline-dir",
            "merged-baselines",
        ],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert merged.returncode == 0, merged.stderr
    rows = json.loads((pytester.path / "merged" / "results.json").read_text())["results"]
    whole_rows = json.loads((pytester.path / "whole" / "results.json").read_text())["results"]
    assert [r["test"] for r in rows] == sorted(r["test"] for r in whole_rows)
    assert (pytester.path / "merged" / "summary.md").exists()

    def baselines(folder):
        return {p.name: json.loads(p.read_text())["repeats"] for p in (pytester.path / folder).glob("*.json")}

    assert baselines("merged-baselines") == baselines("whole-baselines") and len(baselines("whole-baselines")) == 16


def test_bad_shard_is_a_usage_error(pytester):
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest("--specdec-shard", "3/2")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--specdec-shard: shard index must be between 1 and 2*"])
