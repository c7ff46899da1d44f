"""measure.forced_sweep: a sweep's results in length order, each given the curve (its row's), a length the
sweep did not measure refused by name, and the break-even checks decided as assert_speedup decides them."""

from dataclasses import replace

import pytest

from pytest_specdec.engines.counters import SpecDecodeCounters
from pytest_specdec.engines.forced_acceptance import forced_at
from pytest_specdec.engines.server_spec import ServerSpec
from pytest_specdec.measure.forced_sweep import AcceptanceSweep
from pytest_specdec.measure.result import SpecDecResult, compare_outputs
from tests.support.report_results import PATTERN, WORKLOAD, run

FORCED = {
    "method": "draft_model",
    "num_speculative_tokens": 4,
    "model": "m@layers=2",
    "rejection_sample_method": "synthetic",
    "synthetic_acceptance_length": 3.0,
}
STEP_COST = 3.5  # a drafted step costs 3.5 plain ones: SD pays above 3.5 tokens a step


def at_length(length: float) -> SpecDecResult:
    """Two draws at `length`, the speedup L / STEP_COST within 1% between draws; the server honoured it."""
    spec = ServerSpec("m", forced_at(FORCED, length))
    drafts = 200
    counters = SpecDecodeCounters(drafts, 4 * drafts, round((length - 1) * drafts), {})
    refs, sds = [], []
    for draw, wobble in enumerate((0.995, 1.005)):
        ref = replace(run(spec.reference(), 30.0, 0.030), repeat=draw)
        sd = replace(run(spec, 30.0 * length / STEP_COST * wobble, 0.030 * STEP_COST / length, counters), repeat=draw)
        refs.append(ref)
        sds.append(sd)
    return SpecDecResult(spec, WORKLOAD, PATTERN, refs, sds, compare_outputs(refs[0].records, sds[0].records), {})


def test_the_sweep_orders_its_lengths_and_gives_every_result_the_curve():
    sweep = AcceptanceSweep([at_length(x) for x in (5.0, 2.0, 3.0, 4.0)])
    assert sweep.lengths == [2.0, 3.0, 4.0, 5.0]
    curve = sweep.curve()
    assert all(result.forced_sweep == curve for result in sweep.results)
    assert curve.break_even.value == pytest.approx(STEP_COST, rel=0.01)
    assert curve.step_cost == pytest.approx(STEP_COST, rel=0.01)  # the decode speedup is L / 3.5 exactly
    assert sweep.at(4.0) is sweep.results[2]
    with pytest.raises(ValueError, match=r"forced acceptance 2.5 was not measured; the sweep measured 2, 3, 4, 5"):
        sweep.at(2.5)
    assert "break-even at forced acceptance 3.50" in repr(sweep)
    assert sweep.table().splitlines()[1].startswith("  2.00      2.00  0.571x")


def test_the_break_even_checks_are_decided_at_the_lengths_measured():
    sweep = AcceptanceSweep([at_length(x) for x in (2.0, 3.0, 4.0, 5.0)])
    assert sweep.assert_break_even(min_length=2.0, max_length=5.0) is sweep  # 0.57x and 1.43x: both decided
    assert sweep.assert_pays_from(5.0) is sweep
    decision = sweep.at(5.0).decisions["speedup (output_throughput) >= 1"]
    assert decision.outcome == "passed"
    with pytest.raises(AssertionError, match=r"(?s)break-even above forced acceptance 2 for .*decision: failed"):
        sweep.assert_break_even(max_length=2.0)
    with pytest.raises(AssertionError, match=r"(?s)break-even below forced acceptance 5 for .*decision: failed"):
        sweep.assert_break_even(min_length=5.0)
    with pytest.raises(AssertionError, match=r"SD does not pay at forced acceptance 2 \(asked from 2 up\)"):
        sweep.assert_pays_from(2.0)
    with pytest.raises(ValueError, match="takes max_length=, min_length= or both"):
        sweep.assert_break_even()


def test_sweep_acceptance_refuses_before_any_server_starts():
    from pytest_specdec.engines.server_spec import MarkerError
    from pytest_specdec.load.patterns import resolve_pattern
    from pytest_specdec.load.workloads import resolve_workload
    from pytest_specdec.measure.measurements import RunError
    from pytest_specdec.measure.specdec_test import SpecDecTest

    class NoServers:  # anything measured here would be a bug: every refusal comes first
        def __getattr__(self, name):
            raise AssertionError(f"measured {name} before refusing")

    workload = resolve_workload("random_s", {"input_len": 8, "output_len": 4})
    pattern = resolve_pattern("throughput_low", {"num_prompts": 2})
    forced = ServerSpec("m", FORCED, engine="llamacpp")
    with pytest.raises(ValueError, match=r"needs at least two forced lengths, got \[3.0\]"):
        SpecDecTest(forced, NoServers(), workload, pattern).sweep_acceptance([3.0])
    with pytest.raises(MarkerError, match="synthetic_acceptance_length: must be a mean acceptance length in"):
        SpecDecTest(forced, NoServers(), workload, pattern).sweep_acceptance([2.0, 6.0])
    unforced = ServerSpec("m", {key: FORCED[key] for key in ("method", "num_speculative_tokens", "model")})
    with pytest.raises(MarkerError, match="a forced-acceptance sweep needs a config that forces acceptance"):
        SpecDecTest(unforced, NoServers(), workload, pattern).sweep_acceptance([2.0, 3.0])
    with pytest.raises(RunError, match="a builds A/B, a capacity search or @pytest.mark.specdec_mechanism"):
        SpecDecTest(forced, NoServers(), workload, pattern, builds=("this", "that")).sweep_acceptance([2.0, 3.0])
    with pytest.raises(RunError, match=r"sweep_acceptance\(\) needs @pytest.mark.access_pattern"):
        SpecDecTest(forced, NoServers(), workload).sweep_acceptance([2.0, 3.0])


def test_each_length_is_a_row_naming_the_config_it_ran_with_the_curve():
    from types import SimpleNamespace

    from pytest_specdec.report.row.rows import rows_for_test

    sweep = AcceptanceSweep([at_length(x) for x in (2.0, 4.0)])
    plan = SimpleNamespace(spec=ServerSpec("m", FORCED), workload=None, pattern=None)  # the marker forced 3.0
    test = SimpleNamespace(gate=None, results=sweep.results)
    rows = rows_for_test("t.py::test_sweep", plan, test, "passed")
    assert [row["speculative_config"]["synthetic_acceptance_length"] for row in rows] == [2.0, 4.0]
    assert ["at forced acceptance 2.00" in row["config"] for row in rows] == [True, False]
    assert all(row["forced_sweep"] == sweep.curve().as_dict() for row in rows)
    # A result that ran the plan's config is the plan's row, as before.
    (plain,) = rows_for_test("t.py::test_one", plan, SimpleNamespace(gate=None, results=[at_length(3.0)]), "passed")
    assert plain["speculative_config"] == FORCED and plain["forced_sweep"] is None
