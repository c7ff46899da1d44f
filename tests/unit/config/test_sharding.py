"""Shard selection: every test in exactly one shard, servers never split, same answer everywhere."""

import argparse
import json
import random
import subprocess
import sys

import pytest

from pytest_specdec.config.sharding import assign_shards, parse_shard, select
from pytest_specdec.config.spec import ServerSpec

# 9 SD configurations of two targets with uneven test counts (35 tests), plus 5 plain tests.
SIZES = (9, 7, 5, 4, 3, 3, 2, 1, 1)
KEYS = [
    ServerSpec(f"target-{i % 2}", {"method": "ngram", "num_speculative_tokens": i + 1}).key for i in range(len(SIZES))
]
SUITE = [
    (f"tests/specdec/test_config_{i}.py::test_case[{j}]", KEYS[i]) for i, size in enumerate(SIZES) for j in range(size)
] + [(f"tests/test_plain.py::test_plain_{j}", None) for j in range(5)]
LARGEST_GROUP = max(SIZES)


def loads(assignment, count):
    totals = [0] * count
    for shard in assignment.values():
        totals[shard - 1] += 1
    return totals


def test_suite_is_forty_tests():
    assert len(SUITE) == 40 and len({nodeid for nodeid, _ in SUITE}) == 40


@pytest.mark.parametrize("count", range(1, 7))
def test_every_test_is_in_exactly_one_shard(count):
    assignment = assign_shards(SUITE, count)
    assert set(assignment) == {nodeid for nodeid, _ in SUITE}
    assert set(assignment.values()) <= set(range(1, count + 1))
    shards = [select(SUITE, index, count) for index in range(1, count + 1)]
    everything = [nodeid for shard in shards for nodeid in shard]
    assert sorted(everything) == sorted(nodeid for nodeid, _ in SUITE)  # no test twice, none missing


@pytest.mark.parametrize("count", range(1, 7))
def test_a_server_configuration_is_never_split(count):
    assignment = assign_shards(SUITE, count)
    for key in KEYS:
        assert len({assignment[nodeid] for nodeid, k in SUITE if k == key}) == 1


@pytest.mark.parametrize("count", range(1, 7))
def test_balance_is_within_the_largest_group(count):
    totals = loads(assign_shards(SUITE, count), count)
    assert max(totals) - min(totals) <= LARGEST_GROUP
    assert sum(totals) == len(SUITE)


def test_greedy_rule_gives_the_documented_assignment():
    # Groups 9,7,5,4,3,3,2,1,1 and five plain tests of 1, placed biggest first on the lightest shard.
    assert loads(assign_shards(SUITE, 2), 2) == [20, 20]
    assert loads(assign_shards(SUITE, 3), 3) == [14, 13, 13]
    assert loads(assign_shards(SUITE, 4), 4) == [10, 10, 10, 10]


@pytest.mark.parametrize("count", range(1, 7))
def test_assignment_does_not_depend_on_input_order(count):
    expected = assign_shards(SUITE, count)
    rng = random.Random(20261122)
    for _ in range(8):
        shuffled = list(SUITE)
        rng.shuffle(shuffled)
        assert assign_shards(shuffled, count) == expected
        assert sorted(select(shuffled, 1, count)) == sorted(select(SUITE, 1, count))
    assert assign_shards(SUITE, count) == expected  # and across calls


def test_assignment_is_identical_in_another_interpreter_with_other_hash_seeds():
    code = (
        "import json, sys; from pytest_specdec.config.sharding import assign_shards; "
        "suite = [tuple(t) for t in json.load(sys.stdin)]; print(json.dumps(assign_shards(suite, 4), sort_keys=True))"
    )
    outputs = set()
    for seed in ("1", "2"):
        proc = subprocess.run(
            [sys.executable, "-c", code],
            input=json.dumps(SUITE),
            capture_output=True,
            text=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            check=True,
            timeout=60,
        )
        outputs.add(proc.stdout)
    assert len(outputs) == 1
    assert json.loads(outputs.pop()) == assign_shards(SUITE, 4)


def test_select_keeps_input_order():
    for index in (1, 2, 3):
        chosen = select(SUITE, index, 3)
        assert chosen == [nodeid for nodeid, _ in SUITE if nodeid in set(chosen)]


def test_more_shards_than_groups_leaves_some_empty():
    tests = [("a.py::t1", "k"), ("a.py::t2", "k")]
    assert assign_shards(tests, 3) == {"a.py::t1": 1, "a.py::t2": 1}
    assert select(tests, 2, 3) == [] and select(tests, 1, 3) == ["a.py::t1", "a.py::t2"]
    assert assign_shards([], 2) == {}


def test_plain_tests_are_groups_of_their_own():
    tests = [(f"t.py::p{i}", None) for i in range(4)]
    assert loads(assign_shards(tests, 4), 4) == [1, 1, 1, 1]


def test_grouping_by_target_keeps_each_reference_server_in_one_shard():
    assignment = assign_shards(SUITE, 4)
    for target in {k for _, k in SUITE if k is not None}:
        assert len({assignment[n] for n, k in SUITE if k == target}) == 1


def test_bad_arguments():
    with pytest.raises(ValueError, match="listed twice"):
        assign_shards([("a", None), ("a", "k")], 2)
    with pytest.raises(ValueError, match="at least 1"):
        assign_shards(SUITE, 0)
    with pytest.raises(ValueError, match="between 1 and 3"):
        select(SUITE, 4, 3)
    with pytest.raises(ValueError, match="between 1 and 3"):
        select(SUITE, 0, 3)


@pytest.mark.parametrize("text, expected", [("1/1", (1, 1)), ("2/4", (2, 4)), ("4/4", (4, 4)), (" 3/10 ", (3, 10))])
def test_parse_shard_accepts(text, expected):
    assert parse_shard(text) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("0/4", "between 1 and 4"),
        ("5/4", "between 1 and 4"),
        ("1/0", "at least 1"),
        ("-1/3", "between 1 and 3"),
        ("2", "expected I/N"),
        ("a/b", "expected I/N"),
        ("1/2/3", "expected I/N"),
        ("", "expected I/N"),
        ("1.5/2", "expected I/N"),
    ],
)
def test_parse_shard_rejects(text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        parse_shard(text)


def test_parse_shard_works_as_an_argparse_type(capsys):
    parser = argparse.ArgumentParser()
    parser.add_argument("--specdec-shard", type=parse_shard)
    assert parser.parse_args(["--specdec-shard", "2/3"]).specdec_shard == (2, 3)
    with pytest.raises(SystemExit):
        parser.parse_args(["--specdec-shard", "3/2"])
    assert "between 1 and 2" in capsys.readouterr().err
