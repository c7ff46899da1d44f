"""SLO markers, capacity results, their baselines and reports, end to end in pytester runs.

The inner tests build `CapacityResult`s from synthetic probe curves (the
search, gate and report logic are under test here, not a measurement); the
real search on CPU servers is the example in examples/cpu.
"""

import json

import pytest

CONFTEST = '''
import os
import pytest
from pytest_specdec.measure.capacity.search import CapacitySearch, Probe, search_capacity
from pytest_specdec.measure.capacity.slo import CapacityResult


def side(limit, tpot_at_limit=50.0):
    """A server whose p99 TPOT grows with the request rate and crosses 50 ms at `limit` req/s."""
    def probe(load):
        tpot = tpot_at_limit * load / limit
        return Probe(load, tpot <= 50.0, {"p99_tpot_ms": tpot, "reason": f"p99 tpot {tpot:.0f} ms"})
    return search_capacity(probe, CapacitySearch("request_rate", start=1.0, max_probes=6))


@pytest.fixture
def make_capacity(specdec):
    def make(reference_limit=3.0, sd_limit=None):
        sd_limit = float(os.environ.get("SD_LIMIT", 4.5)) if sd_limit is None else sd_limit
        result = CapacityResult(specdec.spec, {"name": "code_edit"}, specdec.pattern.describe(), specdec.slo,
                                specdec.slo_percentile, side(reference_limit), side(sd_limit))
        result.gate = specdec.gate
        specdec.results.append(result)
        return result
    return make
'''

TEST = '''
import os

import pytest

@pytest.mark.specdec(model="m", speculative_config={"method": "ngram", "num_speculative_tokens": 4})
@pytest.mark.workload("code_edit")
@pytest.mark.access_pattern("slo_capacity", num_prompts=8)
@pytest.mark.specdec_slo(tpot_ms=50, ttft_ms=2000)
def test_capacity(make_capacity, specdec):
    assert specdec.slo == {"tpot": 50.0, "ttft": 2000.0} and specdec.slo_percentile == 99.0
    result = make_capacity()
    result.assert_capacity(min_ratio=float(os.environ.get("MIN_RATIO", 1.0)))
    result.assert_no_regression()
'''


@pytest.fixture
def inner(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner_capacity=TEST)
    return pytester


def run_inner(pytester, *args):
    return pytester.runpytest("--specdec-cpu", "-p", "no:cacheprovider", *args)


def test_capacity_is_recorded_then_gated_and_reported(inner, monkeypatch):
    recorded = run_inner(inner, "--specdec-update-baselines")
    recorded.assert_outcomes(passed=1)
    (baseline,) = (inner.path / "baselines").glob("*.json")
    stored = json.loads(baseline.read_text())["repeats"][0]
    assert stored["derived"]["capacity_ratio"] == pytest.approx(1.5, rel=0.1)
    # The ratio's interval (both brackets widened by their probes' noise) is stored: the gate decides on it.
    derived = stored["derived"]
    assert derived["capacity_ratio_low"] <= derived["capacity_ratio"] <= derived["capacity_ratio_high"]

    again = run_inner(inner, "--specdec-report", "report")
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines(
        [
            "*specdec SLO capacity*",
            "test_capacity [[]ngram k=4[]] p99 tpot 50 ms, ttft 2000 ms: reference * req/s (6 probes), SD * req/s (6 probes); ratio 1.*x",
        ]
    )
    summary = (inner.path / "report" / "summary.md").read_text()
    assert "**SLO capacity**" in summary and "p99 tpot 50, ttft 2000" in summary
    assert (inner.path / "report" / "slo_capacity.png").is_file()
    row = json.loads((inner.path / "report" / "results.json").read_text())["results"][0]
    assert row["capacity"]["over"] == "request_rate" and row["capacity_ratio"] == pytest.approx(1.5, rel=0.1)
    assert all(p["load"] > 0 for p in row["capacity"]["reference"]["probes"])

    monkeypatch.setenv("SD_LIMIT", "3.0")  # SD no better than the reference: the ratio fell to 1.0
    even = run_inner(inner)
    even.assert_outcomes(failed=1)  # 1.0 inside its own interval: never a pass
    even.stdout.fnmatch_lines(["*SD's SLO capacity against 1x the reference's is undecidable*"])
    monkeypatch.setenv("SD_LIMIT", "2.0")  # SD below the reference: the whole interval is under 1
    worse = run_inner(inner)
    worse.assert_outcomes(failed=1)
    worse.stdout.fnmatch_lines(["*SD's SLO capacity is below 1x the reference's*"])

    monkeypatch.setenv("MIN_RATIO", "0.5")  # the test's own floor passes: the baseline gate alone must fail
    gated = run_inner(inner)
    gated.assert_outcomes(failed=1)
    # Gated on both intervals (the change's bounds from them, never a bootstrap of one search's point).
    gated.stdout.fnmatch_lines(["*performance regressed against the baseline*", "*capacity_ratio*100% CI*REGRESSION*"])


def test_a_capacity_pattern_without_an_slo_fails_at_setup(pytester):
    pytester.makepyfile('''
import pytest

@pytest.mark.specdec(model="m", speculative_config={"method": "ngram", "num_speculative_tokens": 4})
@pytest.mark.workload("code_edit")
@pytest.mark.access_pattern("slo_capacity")
def test_no_slo(specdec):
    pass

@pytest.mark.specdec(model="m", speculative_config={"method": "ngram", "num_speculative_tokens": 4})
@pytest.mark.specdec_slo(latency_ms=5)
def test_bad_slo(specdec):
    pass
''')
    result = pytester.runpytest("--specdec-cpu", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*searches for the highest load an SLO holds at, and this test declares none*",
            "*invalid @pytest.mark.specdec_slo: unknown SLO key 'latency_ms'*",
        ]
    )


def test_the_ini_slo_applies_to_every_test_and_a_marker_wins(pytester):
    pytester.makeini("[pytest]\nspecdec_slo = tpot:40 ttft:1500\nspecdec_slo_percentile = 95\n")
    pytester.makepyfile('''
import pytest

SPEC = pytest.mark.specdec(model="m", speculative_config={"method": "ngram", "num_speculative_tokens": 4})

@SPEC
def test_from_ini(specdec):
    assert specdec.slo == {"tpot": 40.0, "ttft": 1500.0} and specdec.slo_percentile == 95.0

@SPEC
@pytest.mark.specdec_slo(e2el_ms=9000, percentile=90)
def test_from_marker(specdec):
    assert specdec.slo == {"e2el": 9000.0} and specdec.slo_percentile == 90.0
''')
    result = pytester.runpytest("--specdec-cpu", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    pytester.makeini("[pytest]\nspecdec_slo = tpot=40\n")
    bad = pytester.runpytest("--specdec-cpu", "-p", "no:cacheprovider")
    assert "ini setting specdec_slo" in bad.stderr.str()


RELATIVE_CONFTEST = '''
import math
from types import SimpleNamespace

import pytest
from pytest_specdec.load.client import RequestRecord
from pytest_specdec.analysis.metrics import summarize
from pytest_specdec.measure.result import Run


class Machine:
    """Stands in for the session's Measurements: TPOT grows with load, SD 0.8x of the reference's;
    SPEED divides every time and multiplies the load a server carries."""

    max_dispatch_lag_ms = 10.0

    def __init__(self, speed):
        self.speed = speed
        self.pool = SimpleNamespace(get=lambda spec: SimpleNamespace(log_path=None))
        self.events = []

    def prompts(self, model, workload, pattern, seed):
        return ["p"] * pattern.num_prompts

    def measure_planned_references(self, spec):
        pass

    def reference_search(self, spec, key, search):  # as Measurements: planned ones first
        self.measure_planned_references(spec)
        return search()

    def on_event(self, message):
        self.events.append(message)

    def _run(self, spec, rate, n):
        x = 0.0 if math.isinf(rate) else rate / self.speed
        tpot = 0.033 / self.speed * (1 + 1.2 * x) * (0.8 if spec.speculative_config else 1.0)
        records = [RequestRecord(i, 8, 9, i * 0.5, 0.1 / self.speed, [tpot] * 8, 0.1 / self.speed + 8 * tpot,
                                 [], "x", None, True) for i in range(n)]
        return [Run(spec, 0, summarize(records, n * 0.5), records, None, ["vllm", "serve", spec.model], 0.0)]

    def reference(self, spec, workload, pattern, prompts, seed=0):
        return self._run(spec.reference(), math.inf, pattern.num_prompts)

    def measure(self, spec, workload, pattern, prompts, seed=0, what="", repeats=1):
        return self._run(spec, pattern.request_rate, pattern.num_prompts)
'''

RELATIVE_TEST = '''
import os

import pytest
from conftest import Machine

@pytest.mark.specdec(model="m", speculative_config={"method": "ngram", "num_speculative_tokens": 4})
@pytest.mark.workload("code_edit")
@pytest.mark.access_pattern("slo_capacity", num_prompts=8, max_load=32.0)
@pytest.mark.specdec_slo(tpot_x=3, ttft_ms=5000, percentile=50)
def test_relative(specdec):
    assert specdec.slo == {"tpot_x": 3.0, "ttft": 5000.0} and specdec.slo_percentile == 50.0
    speed = float(os.environ["SPEED"])
    specdec.measurements = Machine(speed)
    result = specdec.run()
    print(result.describe())
    # 3 x the unloaded 33 ms: the reference holds to load 1.67 x speed, SD to 2.29 x speed.
    assert result.slo["tpot"] == pytest.approx(99.0 / speed) and result.objectives["tpot"]["multiple"] == 3.0
    assert result.reference.status == result.speculative.status == "found"
    result.assert_capacity(min_ratio=1.1)  # the interval with probe noise lies above 1.1
'''


@pytest.mark.parametrize("speed", ["0.5", "4"])
def test_a_relative_slo_in_the_marker_is_resolved_searched_and_reported(pytester, monkeypatch, speed):
    pytester.makeconftest(RELATIVE_CONFTEST)
    pytester.makepyfile(test_inner_relative=RELATIVE_TEST)
    monkeypatch.setenv("SPEED", speed)
    result = run_inner(pytester, "--specdec-report", "report", "-s")
    result.assert_outcomes(passed=1)
    unloaded = 33.0 / float(speed)
    result.stdout.fnmatch_lines(
        [
            f"*SLO: p50 tpot <= {3 * unloaded:.4g} ms (tpot_x=3: 3 x the reference's unloaded "
            f"median {unloaded:.4g} ms), p50 ttft <= 5000 ms",
            "capacity ratio: 1.4?x (*with probe noise)",
        ]
    )
    row = json.loads((pytester.path / "report" / "results.json").read_text())["results"][0]
    assert row["slo"] == {"tpot": pytest.approx(3 * unloaded), "ttft": 5000.0}
    assert row["capacity_ratio"] == pytest.approx(1.375, rel=0.1)
    assert row["capacity"]["reference"]["status"] == "found" and row["capacity"]["note"] is None


def test_bad_slo_and_search_fields_are_named_in_the_error(pytester):
    pytester.makepyfile('''
import pytest

SPEC = pytest.mark.specdec(model="m", speculative_config={"method": "ngram", "num_speculative_tokens": 4})

@SPEC
@pytest.mark.specdec_slo(tpot_ms=50, tpot_x=2)
def test_both_ways(specdec):
    pass

@SPEC
@pytest.mark.specdec_slo(ttft_x=0)
def test_not_a_multiple(specdec):
    pass

@SPEC
@pytest.mark.workload("code_edit")
@pytest.mark.access_pattern("slo_capacity", max_load=0.5)
@pytest.mark.specdec_slo(tpot_x=2)
def test_ceiling_below_start(specdec):
    pass

@SPEC
@pytest.mark.workload("code_edit")
@pytest.mark.access_pattern("slo_capacity", bisect_probes=-1)
@pytest.mark.specdec_slo(tpot_x=2)
def test_bad_budget(specdec):
    pass

@SPEC
@pytest.mark.workload("code_edit")
@pytest.mark.access_pattern("throughput_low", max_load=8)
def test_ceiling_without_a_search(specdec):
    pass
''')
    result = pytester.runpytest("--specdec-cpu", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=5)
    result.stdout.fnmatch_lines(
        [
            "*invalid @pytest.mark.specdec_slo: SLO key 'tpot' given both in milliseconds and as a multiple "
            "('tpot_ms' and 'tpot_x')*",
            "*invalid @pytest.mark.specdec_slo: SLO 'ttft_x' must be a finite multiple > 0*",
            "*invalid @pytest.mark.access_pattern: max_load must be a finite number >= search_start (1) or None, "
            "got 0.5*",
            "*invalid @pytest.mark.access_pattern: bisect_probes must be an int >= 0, got -1*",
            "*invalid @pytest.mark.access_pattern: max_load only apply to capacity searches*",
        ]
    )


def test_the_ini_slo_takes_relative_objectives_too(pytester):
    pytester.makeini("[pytest]\nspecdec_slo = tpot_x:2.5 ttft:1500\n")
    pytester.makepyfile('''
import pytest

@pytest.mark.specdec(model="m", speculative_config={"method": "ngram", "num_speculative_tokens": 4})
def test_from_ini(specdec):
    assert specdec.slo == {"tpot_x": 2.5, "ttft": 1500.0}
''')
    run_inner(pytester).assert_outcomes(passed=1)
    pytester.makeini("[pytest]\nspecdec_slo = tpot:40 tpot_x:2\n")
    bad = run_inner(pytester)
    assert "ini setting specdec_slo: SLO key 'tpot' given both in milliseconds and as a multiple" in bad.stderr.str()
