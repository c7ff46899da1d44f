"""Doors a regression got through the gate by: the probe timed once per disagreeing check, and a capacity ratio
gated on its point estimate.  (Partly compared, allowed-unavailable and flagged comparisons: tests/plugin/
test_gate_machine.py, through the plugin.)"""

import math

import pytest

from pytest_specdec.verdict.gate import BaselineSession
from pytest_specdec.verdict.gate.outcome import outcome_of
from pytest_specdec.verdict.machine import PROBE_MAX_TIMINGS
from pytest_specdec.verdict.stats import compare_intervals

PROBE = {"version": 1, "matmul_gflops": 100.0, "vector_gflops": 10.0, "copy_gbps": 20.0, "spread": 0.01}


def test_the_probe_is_timed_at_most_a_fixed_number_of_times_however_many_checks_disagree(tmp_path):
    timings = []

    def retime():
        timings.append(1)
        return {**PROBE, "matmul_gflops": 100.0 + len(timings)}  # each timing a little faster: best-of creeps up

    session = BaselineSession(tmp_path, update=True, fingerprint={"machine_probe": dict(PROBE)}, retime_probe=retime)
    again = [session.probe_again() for _ in range(8)]  # eight checks that disagreed with their baselines
    assert len(timings) == PROBE_MAX_TIMINGS - 1 and again.count(True) == PROBE_MAX_TIMINGS - 1
    assert session.fingerprint["machine_probe"]["timings"] == PROBE_MAX_TIMINGS
    assert session.fingerprint["machine_probe"]["matmul_gflops"] == 100.0 + PROBE_MAX_TIMINGS - 1
    session.flush()  # settling before writing takes no timing past the cap either
    assert len(timings) == PROBE_MAX_TIMINGS - 1


def _capacity(value, low, high):
    return [{"derived": {"capacity_ratio": value, "capacity_ratio_low": low, "capacity_ratio_high": high}}]


@pytest.mark.parametrize(
    "now, regression, undecided",
    [
        # the whole interval now below the baseline's low end less 15%: a regression
        ((0.6, 0.5, 0.7), True, False),
        # the whole interval now within 15% of the baseline's high end: decided, no regression
        ((1.4, 1.25, 1.55), False, False),
        # a 10% drop of the point, inside the tolerance, with intervals ~45% wide: undecided, not a false alarm
        ((1.08, 0.85, 1.32), False, True),
        # a 30% drop of the point whose interval still reaches the baseline's: undecided, not a pass
        ((0.84, 0.66, 1.05), False, True),
    ],
)
def test_a_capacity_ratio_is_gated_on_both_intervals(now, regression, undecided):
    before = _capacity(1.2, 0.95, 1.45)
    verdict, why = compare_intervals("capacity_ratio", before, _capacity(*now), 0.15)
    assert verdict.regression is regression
    assert (why is not None) is undecided
    if undecided:
        assert "overlaps the baseline's less the 15% tolerance" in why
    assert math.isclose(verdict.change, now[0] / 1.2 - 1)


def test_a_capacity_ratio_without_an_interval_is_undecided_never_compared_as_a_point():
    verdict, why = compare_intervals(
        "capacity_ratio", _capacity(1.2, 0.95, 1.45), _capacity(math.nan, None, None), 0.15
    )
    assert not verdict.regression and why.startswith("no interval to compare")


def test_outcomes_say_how_much_was_compared():
    assert outcome_of(["acceptance_rate"], {}, failed=False) == "passed"
    assert outcome_of(["acceptance_rate"], {"speedup_output_throughput": "another machine"}, failed=False) == (
        "partly compared"
    )
    assert outcome_of([], {"acceptance_rate": "unavailable (allowed): no counters"}, failed=False) == "not compared"
    assert outcome_of(["acceptance_rate"], {"x": "y"}, failed=True) == "failed"


def test_acceptance_an_engine_drew_at_a_forced_length_is_not_compared_with_a_stored_baseline():
    from types import SimpleNamespace

    from pytest_specdec.verdict.gate.regression import sampled_acceptance

    forced, greedy = SimpleNamespace(forced=object()), SimpleNamespace(forced=None)
    # Seven sessions of llama.cpp at a forced 3.0, nothing changed, read 2.75-3.05: a 5% gate failed one (2.82
    # against 3.05 recorded), its pair of repeats showing none of that spread.
    for metric in ("acceptance_length", "acceptance_rate", "request_acceptance_length_p50"):
        assert sampled_acceptance(forced, metric).startswith("not compared: the engine drew this run's accepted")
        assert sampled_acceptance(greedy, metric) == ""  # greedy acceptance repeats exactly: compared
    assert sampled_acceptance(forced, "speedup_output_throughput") == ""  # timing: the sequential rule's
    assert sampled_acceptance(SimpleNamespace(), "acceptance_length") == ""  # a capacity result has no forcing
