import pytest

from pytest_specdec.serving.pool import order_for_reuse


def test_groups_move_to_their_first_member():
    keys = ["a", None, "b", "a", None, "c", "b", "a"]
    order = order_for_reuse(keys)
    assert [keys[i] for i in order] == ["a", "a", "a", None, "b", "b", None, "c"]
    assert sorted(order) == list(range(len(keys)))


def test_already_grouped_order_is_unchanged():
    assert order_for_reuse(["a", "a", None, "b"]) == [0, 1, 2, 3]
    assert order_for_reuse([]) == []


def test_a_lead_group_moves_ahead_of_its_targets_first_group_only():
    keys = ["x", "a", None, "b", "lead", "c"]
    targets = ["other", "t", None, "t", "t", "t2"]
    order = order_for_reuse(keys, targets, lead=frozenset({"lead"}))
    assert [keys[i] for i in order] == ["x", "lead", "a", None, "b", "c"]


def _marks(*marks):
    by_name = {mark.mark.name: mark.mark for mark in marks}
    return by_name.get


def test_a_sweep_goes_first_so_its_references_share_the_reference_start(tmp_path):
    """A sweep announces no reference runs (its levels are picked when it runs): after the announced batch
    the reference server would start again for it.  Ahead of its target's other groups, its reference
    runs come while the reference is up for the batch."""
    from pytest_specdec.config.settings import Settings
    from pytest_specdec.session import SpecdecSession

    ngram = {"method": "ngram", "num_speculative_tokens": 4}
    code_edit, one_at_a_time = pytest.mark.workload("code_edit"), pytest.mark.access_pattern("throughput_low")
    items = [
        (
            "t.py::test_planned",
            _marks(pytest.mark.specdec(model="m", speculative_config=ngram), code_edit, one_at_a_time),
        ),
        (
            "t.py::test_elsewhere",
            _marks(pytest.mark.specdec(model="n", speculative_config=ngram), code_edit, one_at_a_time),
        ),
        (
            "t.py::test_server_only",
            _marks(pytest.mark.specdec(model="m", speculative_config={**ngram, "num_speculative_tokens": 3})),
        ),
        (
            "t.py::test_sweep",
            _marks(
                pytest.mark.specdec(model="m", speculative_config={**ngram, "num_speculative_tokens": 2}), code_edit
            ),
        ),
        (
            "t.py::test_sweep_with_a_planned_sibling",
            _marks(pytest.mark.specdec(model="m", speculative_config=ngram), code_edit),
        ),
    ]
    session = SpecdecSession(Settings(device="cpu"), rootpath=tmp_path, basetemp=tmp_path)
    collected = session.collect(items, [], [])
    assert [items[i][0].split("::")[1] for i in collected.order] == [
        "test_sweep",  # its group announces nothing and measures: ahead of m's first group
        "test_planned",
        "test_sweep_with_a_planned_sibling",  # its group announces references: it stays with them
        "test_elsewhere",  # another target: unmoved
        "test_server_only",  # no workload, so nothing to measure: stays where it stood
    ]
