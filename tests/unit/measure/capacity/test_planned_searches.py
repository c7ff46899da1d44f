"""A capacity test's reference search, planned: it runs with the target's other reference runs, once.

The reference's side of a capacity search does not depend on SD's, so the session announces it with the
reference runs it plans (`capacity_sides.plan_capacity`), and the batch that measures them while the
reference's server is up runs it too: two server starts fewer for a capacity test whose group starts with
another test (the README's main job: an n-gram group of three tests, the capacity test second).
"""

import pytest

from pytest_specdec.engines.server_spec import ServerSpec
from pytest_specdec.measure.reference_runs import ReferenceRuns


def Runs() -> ReferenceRuns:  # noqa: N802 (stands for the part, as the tests read it)
    """The reference side of Measurements with the state it keeps, and nothing measured."""
    return ReferenceRuns(measurements=None)


def spec(model: str) -> ServerSpec:
    return ServerSpec(model=model, speculative_config={"method": "ngram", "num_speculative_tokens": 4})


def test_a_planned_search_runs_in_its_targets_batch_once_and_its_result_is_reused():
    runs, calls = Runs(), []
    runs.plan_reference_search(spec("a"), "capacity a", lambda: calls.append("a") or "found a")
    runs.plan_reference_search(spec("a"), "capacity a", lambda: calls.append("again") or "twice")  # announced twice
    runs.plan_reference_search(spec("b"), "capacity b", lambda: calls.append("b") or "found b")

    runs.measure_planned_references(spec("a"))  # another test of target a, while a's reference server is up
    assert calls == ["a"]
    assert runs.reference_search(spec("a"), "capacity a", lambda: calls.append("late") or "late") == "found a"
    assert calls == ["a"]  # the capacity test reused the batch's search
    # Target b's search was not run with a's batch; unplanned, it runs when its test asks, once.
    assert runs.reference_search(spec("b"), "capacity b", lambda: "never") == "found b" and calls == ["a", "b"]
    assert runs.reference_search(spec("c"), "capacity c", lambda: calls.append("c") or "found c") == "found c"
    assert runs.reference_search(spec("c"), "capacity c", lambda: "never") == "found c" and calls[-1] == "c"


def test_a_planned_search_that_fails_fails_its_own_test_not_the_one_running_the_batch():
    runs = Runs()

    def broken():
        raise ValueError("the SLO has no objective")

    runs.plan_reference_search(spec("a"), "capacity a", broken)
    runs.measure_planned_references(spec("a"))  # the other test's batch goes on
    with pytest.raises(ValueError, match="the SLO has no objective"):
        runs.reference_search(spec("a"), "capacity a", lambda: "never")
