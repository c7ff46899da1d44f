"""Goodput on results, the crossover of a sweep and capacity results: the figures and their checks.

Records and probes are synthetic (hand-computed expectations); the search and
goodput functions themselves are tested in test_capacity.py and test_goodput.py.
"""

import math

import pytest

from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.measure.capacity.search import CapacitySearch, Probe, search_capacity
from pytest_specdec.analysis.metrics import summarize
from pytest_specdec.formatting import quantity
from pytest_specdec.measure.result import Run, SpecDecResult, compare_outputs
from pytest_specdec.measure.capacity.slo import CapacityResult, probe_seed
from pytest_specdec.measure.sweep import SweepResult

SPEC = ServerSpec("m", {"method": "ngram", "num_speculative_tokens": 4})


class Rec:
    def __init__(self, index, ttft, tpot, tokens=5):
        self.index, self.prompt_len, self.output_tokens, self.success = index, 8, tokens, True
        self.ttft, self.itl = ttft, [tpot] * (tokens - 1)
        self.latency = ttft + tpot * (tokens - 1)
        self.token_ids, self.text, self.top_logprobs = list(range(tokens)), "x", None


def result(ref_tpots, sd_tpots, *, slo=None, pattern=None, duration=2.0):
    ref = [Rec(i, 0.1, t) for i, t in enumerate(ref_tpots)]
    sd = [Rec(i, 0.1, t) for i, t in enumerate(sd_tpots)]
    runs = (
        Run(SPEC.reference(), 0, summarize(ref, duration), ref, None, ["vllm"], 0.0),
        Run(SPEC, 0, summarize(sd, duration * 0.8), sd, None, ["vllm"], 0.0),
    )
    outputs = compare_outputs(ref, sd)
    return SpecDecResult(
        SPEC,
        {"name": "w"},
        pattern or {"name": "p"},
        [runs[0]],
        [runs[1]],
        outputs,
        {},
        outputs_per_repeat=[outputs],
        slo=slo or {},
    )


def test_goodput_counts_the_requests_that_met_every_slo_per_second():
    # TPOT SLO 50 ms: reference 1 of 4 within (40 ms), SD 3 of 4; durations 2.0 s and 1.6 s.
    r = result([0.04, 0.06, 0.07, 0.08], [0.03, 0.04, 0.045, 0.09], slo={"tpot": 50.0})
    assert r.goodput("reference") == pytest.approx(1 / 2.0)
    assert r.goodput("speculative") == pytest.approx(3 / 1.6)
    assert r.goodput_ratio() == pytest.approx((3 / 1.6) / (1 / 2.0))
    assert r.repeats()[0]["derived"]["goodput_ratio"] == pytest.approx(r.goodput_ratio())
    assert r.unavailable("goodput_ratio") is None
    # ... and their output tokens per second (5 each): the figure vllm bench serve leaves out, AIPerf reports.
    assert r.goodput("reference", unit="tokens") == pytest.approx(5 / 2.0)
    assert r.goodput("speculative", unit="tokens") == pytest.approx(15 / 1.6)
    from pytest_specdec.report.row.rows import row_for
    from pytest_specdec.report.tables import csv_text, markdown_summary

    row = row_for("t.py::test", SPEC, r.workload, r.pattern, outcome="passed", result=r)
    assert row["speculative_output_goodput"] == pytest.approx(15 / 1.6)
    assert "| tpot 50 | 0.500 | 1.875 | 2.5 | 9.4 | 3.75x |" in markdown_summary([row])
    assert "speculative_output_goodput" in csv_text([row]).splitlines()[0]
    with pytest.raises(ValueError, match="goodput unit"):
        r.goodput(unit="bytes")


def test_goodput_is_unavailable_without_an_slo_or_a_good_reference_request():
    without = result([0.04] * 4, [0.03] * 4)
    assert math.isnan(without.goodput("speculative"))
    assert "no SLO declared" in without.unavailable("goodput_ratio")
    none_good = result([0.09] * 4, [0.03] * 4, slo={"tpot": 50.0})
    assert "no reference request met the SLO" in none_good.unavailable("goodput_ratio")


def sweep(*speedups):
    """A sweep whose level i has SD TPOT giving `speedups[i]` on throughput (same tokens, scaled duration)."""
    results = []
    for level, speedup in zip((1, 4, 16, 64), speedups):
        r = result([0.04] * 4, [0.04] * 4, pattern={"name": f"concurrency_{level}", "max_concurrency": level})
        r.speculative_runs[0].metrics = summarize(r.speculative_runs[0].records, 2.0 / speedup)
        results.append(r)
    return SweepResult(results)


def test_the_crossover_is_interpolated_between_levels_and_asserted():
    found = sweep(1.4, 1.2, 0.8, 0.6).crossover()  # crosses 1 halfway from 4 to 16: 10
    assert found.status == "crosses" and found.value == pytest.approx(10.0)
    sweep(1.4, 1.2, 0.8, 0.6).assert_crossover(min_concurrency=8)
    with pytest.raises(AssertionError, match="SD stops paying below concurrency 12"):
        sweep(1.4, 1.2, 0.8, 0.6).assert_crossover(min_concurrency=12)


def test_never_crossing_passes_only_as_far_as_the_sweep_went():
    paying = sweep(1.4, 1.3, 1.2, 1.1)
    assert paying.crossover().status == "never" and paying.crossover().highest == 64
    paying.assert_crossover(min_concurrency=64)
    with pytest.raises(AssertionError, match="the sweep stops at concurrency 64, below 100"):
        paying.assert_crossover(min_concurrency=100)
    with pytest.raises(AssertionError, match="SD stops paying"):
        sweep(0.9, 0.8, 0.7, 0.6).assert_crossover(min_concurrency=1)
    assert sweep(1.4, 1.2, 0.8, 0.6).geometric_mean_speedup() == pytest.approx((1.4 * 1.2 * 0.8 * 0.6) ** 0.25)


def capacity(reference_limit, sd_limit, max_probes=6):
    def side(limit):
        return search_capacity(
            lambda load: Probe(load, load <= limit, {"reason": "synthetic"}),
            CapacitySearch("request_rate", start=1.0, max_probes=max_probes),
        )

    return CapacityResult(
        SPEC,
        {"name": "w"},
        {"name": "slo_capacity", "search": "request_rate"},
        {"tpot": 50.0},
        99.0,
        side(reference_limit),
        side(sd_limit),
    )


def test_capacity_ratio_and_its_check():
    found = capacity(3.0, 4.5)
    assert found.reference.capacity <= 3.0 and found.speculative.capacity <= 4.5
    assert found.capacity_ratio() == pytest.approx(found.speculative.capacity / found.reference.capacity)
    assert found.repeats()[0]["derived"]["capacity_ratio"] == found.capacity_ratio()
    found.assert_capacity(min_ratio=1.1)
    with pytest.raises(AssertionError, match=r"SD's SLO capacity is below 2x"):
        found.assert_capacity(min_ratio=2.0)


def test_a_capacity_not_reached_bounds_the_ratio_and_a_bound_is_never_gated():
    found = capacity(0.1, 4.5)  # the reference failed even at the lowest load probed, SD held at 4
    assert found.ratio().kind == "lower_bound" and found.capacity_ratio_bound() == (">=", 4.0 / 0.25)
    assert math.isnan(found.capacity_ratio())  # a bound is never a value
    found.assert_capacity(min_ratio=0.5)  # SD carries load where the reference carries none: decided
    # ... but a bound is not a measurement: the baseline gate can neither record nor compare it.
    assert found.unavailable("capacity_ratio").startswith("the ratio is >= 16.00x (lower bound; reference < 0.25")
    lost = capacity(4.5, 0.1)  # SD failed at the lowest load: an upper bound, and below any sane floor
    assert lost.ratio().kind == "upper_bound"
    with pytest.raises(AssertionError, match="SD's SLO capacity is below 0.5x"):
        lost.assert_capacity(min_ratio=0.5)


def test_probes_of_one_load_share_arrivals_across_sides_and_differ_between_loads():
    assert probe_seed(0, 2.0) == probe_seed(0, 2.0) != probe_seed(0, 4.0)


def test_specdec_sweep_measures_every_reference_level_first_then_sd(monkeypatch):
    """One reference server start for the whole sweep: every level's reference before any SD level."""
    from pytest_specdec.load.workloads import resolve_workload
    from pytest_specdec.measure.specdec_test import SpecDecTest

    calls = []

    class FakeMeasurements:
        def prompts(self, model, workload, pattern, seed):
            return ["p"]

        def reference(self, spec, workload, pattern, prompts, seed=0):
            calls.append(("reference", pattern.max_concurrency))

        def run(self, spec, workload, pattern, seed=0, slo=None):
            calls.append(("SD", pattern.max_concurrency))
            speedup = {1: 1.4, 4: 1.2, 16: 0.8}[pattern.max_concurrency]
            r = result([0.04] * 4, [0.04] * 4, pattern=pattern.describe())
            r.speculative_runs[0].metrics = summarize(r.speculative_runs[0].records, 2.0 / speedup)
            return r

        def on_event(self, message):
            calls.append(("event", message))

    test = SpecDecTest(SPEC, FakeMeasurements(), resolve_workload("random_s", {"input_len": 8, "output_len": 4}))
    sweep_result = test.sweep(levels=(1, 4, 16), num_prompts=4)
    assert [c for c in calls if c[0] != "event"] == [
        ("reference", 1),
        ("reference", 4),
        ("reference", 16),
        ("SD", 1),
        ("SD", 4),
        ("SD", 16),
    ]
    assert sweep_result.levels == [1, 4, 16] and len(test.results) == 3
    assert all(r.sweep_speedups == sweep_result.speedups() for r in test.results)  # for each level's diagnosis
    assert sweep_result.crossover().value == pytest.approx(4 + 12 * 0.2 / 0.4)  # 1.2 -> 0.8 crosses 1 halfway
    assert calls[-1] == (
        "event",
        f"{SPEC.label()}: SD stops paying at ≈ 10 concurrent requests (linear between 4 and 16)",
    )


def test_each_sweep_level_carries_the_sweeps_speedups_and_a_client_bound_level_is_skipped():
    levels = []
    for concurrency, lag in ((1, 0.0), (4, 0.05), (16, 0.0)):
        r = result([0.04] * 4, [0.04] * 4, pattern={"name": f"c{concurrency}", "max_concurrency": concurrency})
        for record in r.speculative_runs[0].records:
            record.dispatch_lag = lag
        r.speculative_runs[0].metrics = summarize(r.speculative_runs[0].records, 1.6 if concurrency < 16 else 2.5)
        levels.append(r)
    sweep = SweepResult(levels)
    speedups = dict(sweep.speedups())
    assert math.isnan(speedups[4]) and speedups[1] == pytest.approx(1.25)  # level 4 measured the client
    found = sweep.crossover()
    assert found.skipped == (4,) and found.value == pytest.approx(1 + 15 * 0.25 / 0.45)


class StallingMeasurements:
    """TPOT 10 ms below `fails_from` req/s (8 unless a side's is given) and 100 ms from there (SLO 50 ms);
    `stalled(side, load, attempt)` says which runs the client sent late (30 ms)."""

    max_dispatch_lag_ms = 10.0

    def __init__(self, stalled, fails_from=None):
        from types import SimpleNamespace

        self.pool = SimpleNamespace(get=lambda spec: SimpleNamespace(log_path=None))
        self.stalled, self.runs, self.events = stalled, [], []
        self.fails_from = {"reference": 8.0, "SD": 8.0, **(fails_from or {})}

    def prompts(self, *args):
        return ["p"]

    def measure_planned_references(self, spec):
        pass

    def reference_search(self, spec, key, search):  # as Measurements: planned ones first
        self.measure_planned_references(spec)
        return search()

    def on_event(self, message):
        self.events.append(message)

    def measure(self, spec, workload, pattern, prompts, seed=0, what="", repeats=1):
        side = "SD" if spec.speculative_config else "reference"
        attempt = 1 + sum(1 for run in self.runs if run == (side, pattern.request_rate))
        self.runs.append((side, pattern.request_rate))
        records = [Rec(i, 0.1, 0.01 if pattern.request_rate < self.fails_from[side] else 0.1) for i in range(4)]
        for record in records:
            record.dispatch_lag = 0.03 if self.stalled(side, pattern.request_rate, attempt) else 0.0
        return [Run(spec, 0, summarize(records, 1.0), records, None, ["vllm", "serve", spec.model], 0.0)]


def _stalled_search(stalled, fails_from=None, **pattern):
    from pytest_specdec.load.patterns import resolve_pattern
    from pytest_specdec.load.workloads import resolve_workload
    from pytest_specdec.measure.capacity.slo import measure_capacity

    measurements = StallingMeasurements(stalled, fails_from)
    found = measure_capacity(
        measurements,
        SPEC,
        resolve_workload("random_s", {"input_len": 8, "output_len": 4}),
        resolve_pattern("slo_capacity", {"num_prompts": 4, **pattern}),
        {"tpot": 50.0},
        99.0,
    )
    return found, measurements


def test_a_load_the_client_never_offers_counts_neither_way_and_caps_that_sides_search():
    from pytest_specdec.measure.capacity.slo import CLIENT_BOUND_ATTEMPTS

    # From 4 req/s up the client sends SD's requests 30 ms late, run after run.
    found, measurements = _stalled_search(lambda side, load, attempt: side == "SD" and load >= 4, max_probes=6)
    assert 4 <= found.reference.capacity < 8 and found.reference.status == "found"
    sd = found.speculative
    assert measurements.runs.count(("SD", 4.0)) == CLIENT_BOUND_ATTEMPTS == 3  # run again, then given up
    assert [(p.load, p.offered) for p in sd.probes][:3] == [(1.0, True), (2.0, True), (4.0, False)]
    # Under the ceiling the search goes on (held all the way here), never at 4 or above again.
    rest = [p.load for p in sd.probes[3:]]
    assert rest and all(2.0 < load < 4.0 for load in rest) and all(p.holds for p in sd.probes[3:]), rest
    assert sd.status == "above_highest_probe" and sd.capacity == max(rest)
    assert sd.not_offered() == [4.0] and sd.probes[2].detail["client_bound_lags_ms"] == [30.0] * 3
    assert sd.describe().startswith(f">= {quantity(max(rest))} req/s (held at every load up to {quantity(max(rest))}")
    assert sd.describe().endswith(
        "; not offered (the client, not the server, set the pace) at 4: client-bound: p99 "
        "dispatch lag 30.0 ms over the 10 ms limit"
    )
    # A lower bound under the reference's 4-8: it cannot say SD reaches 1x; it says why, and the remedy.
    assert found.ratio().kind == "lower_bound"
    with pytest.raises(AssertionError) as failure:
        found.assert_capacity(1.0)
    message = str(failure.value)
    assert "undecidable" in message and "--specdec-client-workers" in message and "is below" not in message
    assert "SD probe at 4: not offered (client-bound: p99 dispatch lag 30.0 ms" in message
    assert found.assert_capacity(0.2) is found  # a lower bound that decides it passes
    assert sum("running it again" in e for e in measurements.events) == 2
    assert found.reproduce == {"reference_server": "vllm serve m", "speculative_server": "vllm serve m"}


def test_a_reference_the_client_cannot_offer_at_its_first_load_is_searched_below_it():
    """The CI failure of 2026-12-01: the reference's first probe, 1 req/s, was client-bound in all three runs
    and its search ended there, so SD's capacity of 0.77 req/s had nothing to be compared with (undecidable).
    Here the reference fails its SLO from 0.6 req/s and the client cannot offer it 1 req/s or more."""
    found, _ = _stalled_search(
        lambda side, load, attempt: side == "reference" and load >= 1, {"reference": 0.6, "SD": 0.8}, max_probes=6
    )
    reference = found.reference
    assert reference.probes[0].load == 1.0 and not reference.probes[0].offered
    assert all(p.load < 1 for p in reference.probes[1:]) and reference.status == "found", reference.describe()
    assert 0.5 <= reference.capacity < 0.6 <= reference.bracket[1]
    assert found.ratio().kind != "unknown"
    assert found.assert_capacity(0.33) is found  # SD's 0.7-0.8 against the reference's 0.5-0.6: decided


def test_a_client_stall_that_does_not_repeat_costs_a_run_and_changes_no_verdict():
    """The CI failure of 2026-11-25: SD's first probe had a 1.1 s client stall and read as SD missing the SLO
    at 0.5 req/s, so SD's capacity came out below the start and the ratio at 0.18x."""
    calm, _ = _stalled_search(lambda side, load, attempt: False, max_probes=6)
    found, measurements = _stalled_search(
        lambda side, load, attempt: side == "SD" and load == 1 and attempt == 1, max_probes=6
    )
    assert [(p.load, p.holds) for p in found.speculative.probes] == [(p.load, p.holds) for p in calm.speculative.probes]
    assert found.speculative.capacity == calm.speculative.capacity and found.ratio() == calm.ratio()
    assert measurements.runs.count(("SD", 1.0)) == 2 and not found.speculative.not_offered()
    assert found.speculative.probes[0].detail["client_bound_lags_ms"] == [30.0]
    assert measurements.events == [
        "SD probe at 1: client-bound: p99 dispatch lag 30.0 ms over the 10 ms limit "
        "(run 1 of at most 3): the client set the pace, not the server; running it again"
    ]


def test_a_client_that_cannot_offer_even_the_first_load_leaves_the_capacity_unknown():
    found, _ = _stalled_search(lambda side, load, attempt: side == "SD", max_probes=4)
    assert found.speculative.status == "not_offered" and found.speculative.capacity is None
    assert found.speculative.describe().startswith(
        "unknown (the client could not offer 1 req/s, the first load probed, nor any load down to"
    )
    assert all(not p.offered for p in found.speculative.probes) and len(found.speculative.probes) > 1
    assert found.ratio().kind == "unknown"
    with pytest.raises(AssertionError, match="undecidable"):
        found.assert_capacity(0.01)


class ModelServers:
    """A fake `Measurements`: TPOT `ms_per_load` ms per req/s above `unloaded_ms`, SD `sd_factor` of it."""

    max_dispatch_lag_ms = 10.0
    pool = None

    def __init__(self, unloaded_ms=30.0, ms_per_load=20.0, sd_factor=0.8):
        from types import SimpleNamespace

        self.pool = SimpleNamespace(get=lambda spec: SimpleNamespace(log_path="server.log"))
        self.unloaded_ms, self.ms_per_load, self.sd_factor = unloaded_ms, ms_per_load, sd_factor
        self.calls = []

    def prompts(self, *args):
        return ["p"] * 4

    def measure_planned_references(self, spec):
        self.calls.append("planned")

    def reference_search(self, spec, key, search):  # as Measurements: planned ones first
        self.measure_planned_references(spec)
        return search()

    def _run(self, spec, load):
        tpot = (self.unloaded_ms + self.ms_per_load * load) / 1000 * (self.sd_factor if spec.speculative_config else 1)
        records = [Rec(i, 0.1, tpot) for i in range(4)]
        return [Run(spec, 0, summarize(records, 1.0), records, None, ["vllm", "serve", spec.model], 0.0)]

    def reference(self, spec, workload, pattern, prompts, seed=0):
        self.calls.append(("unloaded", pattern.name, pattern.max_concurrency, pattern.num_prompts))
        return self._run(spec.reference(), 0.0)

    def measure(self, spec, workload, pattern, prompts, seed=0, what="", repeats=1):
        self.calls.append((what, pattern.request_rate))
        return self._run(spec, pattern.request_rate)


def _search(slo, servers=None, **pattern):
    from pytest_specdec.load.patterns import resolve_pattern
    from pytest_specdec.load.workloads import resolve_workload
    from pytest_specdec.measure.capacity.slo import measure_capacity

    servers = servers or ModelServers()
    found = measure_capacity(
        servers,
        SPEC,
        resolve_workload("random_s", {"input_len": 8, "output_len": 4}),
        resolve_pattern("slo_capacity", {"num_prompts": 4, **pattern}),
        slo,
        50.0,
    )
    return found, servers


def test_a_relative_objective_resolves_once_before_probing_and_is_recorded_everywhere():
    import json

    found, servers = _search({"tpot_x": 3.0, "ttft_ms": 2000}, max_load=64.0)
    # Unloaded first (after the other tests' planned reference runs), then the probes.
    assert servers.calls[:2] == ["planned", ("unloaded", "throughput_low", 1, 4)]
    assert sum(1 for c in servers.calls if c[0] == "unloaded") == 1
    # 3 x 30 ms = 90 ms: the reference holds to (90 - 30) / 20 = 3 req/s, SD (90/0.8 - 30) / 20 = 4.125.
    assert found.slo == {"tpot": pytest.approx(90.0), "ttft": 2000.0}
    assert found.objectives["tpot"] == {
        "objective": "tpot_x=3",
        "ms": pytest.approx(90.0),
        "multiple": 3.0,
        "unloaded_p50_ms": pytest.approx(30.0),
    }
    assert found.unloaded_ms["tpot"] == pytest.approx(30.0)
    assert found.reference.bracket[0] <= 3.0 < found.reference.bracket[1]
    assert found.speculative.bracket[0] <= 4.125 < found.speculative.bracket[1]
    assert found.describe().splitlines()[0] == (
        "SLO: p50 tpot <= 90 ms (tpot_x=3: 3 x the reference's unloaded median 30 ms), p50 ttft <= 2000 ms"
    )
    derived = found.derived()
    assert derived["slo_tpot_ms"] == pytest.approx(90.0) and derived["slo_tpot_x"] == 3.0
    assert derived["unloaded_reference_tpot_ms"] == pytest.approx(30.0) and derived["slo_ttft_ms"] == 2000.0
    assert "slo_ttft_x" not in derived
    exported = json.loads(json.dumps(found.as_dict(), allow_nan=False))
    assert exported["objectives"]["tpot"]["objective"] == "tpot_x=3" and exported["ratio"]["kind"] == "estimate"
    # Every probe of both sides was judged against the same 90 ms.
    reasons = [p.detail["reason"] for cap in (found.reference, found.speculative) for p in cap.probes]
    assert all("tpot" in why and ("<= 90 ms" in why or "> 90 ms" in why) for why in reasons)


def test_absolute_objectives_measure_no_unloaded_run():
    found, servers = _search({"tpot": 90.0}, max_load=64.0)
    assert not any(c[0] == "unloaded" for c in servers.calls if isinstance(c, tuple))
    assert found.objectives == {"tpot": {"objective": "tpot_ms=90", "ms": 90.0}} and found.unloaded_ms == {}
    assert found.describe().splitlines()[0] == "SLO: p50 tpot <= 90 ms"


def test_the_unloaded_reference_is_measured_once_per_server_and_workload_and_shared():
    """With the session's real `Measurements`: the unloaded run is a cached reference run, shared with a
    `throughput_low` test of the same workload (num_prompts=4), and measured once."""
    from pathlib import Path
    from types import SimpleNamespace

    from pytest_specdec.load.patterns import resolve_pattern
    from pytest_specdec.load.workloads import resolve_workload
    from pytest_specdec.measure.measurements import Measurements
    from pytest_specdec.measure.capacity.slo import unloaded_reference

    measurements = Measurements(SimpleNamespace(), Path("."))
    measured = []
    measurements.prompts = lambda model, workload, pattern, seed: ["p"] * pattern.num_prompts

    def measure(spec, workload, pattern, prompts, seed=0, logprobs=None, what=""):
        measured.append((spec.speculative_config, pattern.name, what))
        return ModelServers()._run(spec, 0.0)

    measurements.measure = measure
    workload = resolve_workload("code_edit", {"input_len": 192, "output_len": 64})
    assert unloaded_reference(measurements, SPEC, workload) == {
        "ttft": pytest.approx(100.0),
        "tpot": pytest.approx(30.0),
        "e2el": pytest.approx(220.0),
    }
    unloaded_reference(measurements, SPEC, workload)
    other_sd = ServerSpec("m", {"method": "suffix", "num_speculative_tokens": 4})  # same reference server
    unloaded_reference(measurements, other_sd, workload)
    one_at_a_time = resolve_pattern("throughput_low", {"num_prompts": 4})
    measurements.reference(SPEC, workload, one_at_a_time, ["p"] * 4)
    assert measured == [(None, "throughput_low", "reference")]
    unloaded_reference(measurements, SPEC, resolve_workload("random_s", {"input_len": 8, "output_len": 4}))
    assert len(measured) == 2  # another workload: its own unloaded run


def test_goodput_with_a_relative_objective_is_unavailable_and_says_why():
    r = result([0.04] * 4, [0.03] * 4, slo={"tpot_x": 2.0})
    assert math.isnan(r.goodput("speculative")) and math.isnan(r.goodput_ratio())
    why = r.unavailable("goodput_ratio")
    assert why.startswith("the SLO is relative (tpot_x)") and "only an SLO capacity search" in why
