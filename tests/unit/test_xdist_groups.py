"""Grouping for pytest-xdist: one group per target, written by workers, read by the scheduler."""

from pytest_specdec.config.spec import ServerSpec, canonical_id
from pytest_specdec.config.sharding import read_groups, write_groups
from pytest_specdec.xdist_scheduler import TargetScheduling

NGRAM = {"method": "ngram", "num_speculative_tokens": 4}
SUFFIX = {"method": "suffix", "num_speculative_tokens": 4}


def test_a_targets_configs_share_a_group_and_targets_do_not():
    a_ngram, a_suffix = ServerSpec("a", NGRAM), ServerSpec("a", SUFFIX)
    assert a_ngram.target == a_suffix.target == a_ngram.reference().target
    assert ServerSpec("b", NGRAM).target != a_ngram.target
    assert ServerSpec("a", NGRAM, server_args=("--enforce-eager",)).target != a_ngram.target


def test_group_suffixes_leave_test_ids_alone():
    group = ServerSpec("a", NGRAM).target
    assert canonical_id(f"t.py::test[x]@{group}") == "t.py::test[x]"
    assert canonical_id("t.py::test[user@host]") == "t.py::test[user@host]"


def test_workers_write_groups_the_scheduler_reads(tmp_path):
    write_groups(tmp_path, "gw0", {"t.py::a": "specdec-1", "t.py::b": "specdec-1"})
    write_groups(tmp_path, "gw1", {"t.py::a": "specdec-1", "t.py::b": "specdec-1"})
    assert read_groups(tmp_path) == {"t.py::a": "specdec-1", "t.py::b": "specdec-1"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["groups-gw0.json", "groups-gw1.json"]  # no temp files
    scheduler = TargetScheduling.__new__(TargetScheduling)  # only the scope rule is under test here
    scheduler._groups_dir, scheduler._groups = tmp_path, None
    assert scheduler._split_scope("t.py::a") == scheduler._split_scope("t.py::b") == "specdec-1"
    assert scheduler._split_scope("t.py::plain") == "t.py::plain"  # ungrouped tests go one by one
