"""Grouping for pytest-xdist: one group per target, written by workers, read by the scheduler."""

from pytest_specdec.plugin import canonical_id, xdist_group_of
from pytest_specdec.spec import ServerSpec
from pytest_specdec.xdist_scheduling import TargetScheduling, read_groups, write_groups

NGRAM = {"method": "ngram", "num_speculative_tokens": 4}
SUFFIX = {"method": "suffix", "num_speculative_tokens": 4}


def test_a_targets_configs_share_a_group_and_targets_do_not():
    a_ngram, a_suffix = ServerSpec("a", NGRAM), ServerSpec("a", SUFFIX)
    assert xdist_group_of(a_ngram) == xdist_group_of(a_suffix) == xdist_group_of(a_ngram.reference())
    assert xdist_group_of(ServerSpec("b", NGRAM)) != xdist_group_of(a_ngram)
    assert xdist_group_of(ServerSpec("a", NGRAM, server_args=("--enforce-eager",))) != xdist_group_of(a_ngram)


def test_group_suffixes_leave_test_ids_alone():
    group = xdist_group_of(ServerSpec("a", NGRAM))
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
