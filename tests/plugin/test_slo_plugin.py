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
from pytest_specdec.load.capacity import CapacitySearch, Probe, search_capacity
from pytest_specdec.measure.slo_capacity import CapacityResult


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
    result.assert_capacity(min_ratio=float(os.environ.get("MIN_RATIO", 1.2)))
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

    again = run_inner(inner, "--specdec-report", "report")
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines(["*specdec SLO capacity*",
                                "test_capacity [[]ngram k=4[]] p99 tpot 50 ms, ttft 2000 ms: reference * req/s (6 probes), SD * req/s (6 probes); ratio 1.*x"])
    summary = (inner.path / "report" / "summary.md").read_text()
    assert "**SLO capacity**" in summary and "p99 tpot 50, ttft 2000" in summary
    assert (inner.path / "report" / "slo_capacity.png").is_file()
    row = json.loads((inner.path / "report" / "results.json").read_text())["results"][0]
    assert row["capacity"]["over"] == "request_rate" and row["capacity_ratio"] == pytest.approx(1.5, rel=0.1)
    assert all(p["load"] > 0 for p in row["capacity"]["reference"]["probes"])

    monkeypatch.setenv("SD_LIMIT", "3.0")  # SD no better than the reference: the ratio fell to 1.0
    worse = run_inner(inner)
    worse.assert_outcomes(failed=1)
    worse.stdout.fnmatch_lines(["*SD's SLO capacity is below 1.2x the reference's*"])

    monkeypatch.setenv("MIN_RATIO", "0.5")  # the test's own floor passes: the baseline gate alone must fail
    gated = run_inner(inner)
    gated.assert_outcomes(failed=1)
    gated.stdout.fnmatch_lines(["*performance regressed against the baseline*", "*capacity_ratio*REGRESSION*"])


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
    result.stdout.fnmatch_lines(["*searches for the highest load an SLO holds at, and this test declares none*",
                                 "*invalid @pytest.mark.specdec_slo: unknown SLO key 'latency_ms'*"])


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
