"""--specdec-measure-drift's measurement: each test's two servers started anew and sent its first draw again, the
changes pooled over the session by engine build, and its cost said before the first test."""

import math
from types import SimpleNamespace

import pytest

from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.measure.start_drift import (
    ENDPOINTS,
    StartDrifts,
    changes_between,
    measure_drift_cost,
    measure_start_drift,
)

NGRAM = {"method": "ngram", "num_speculative_tokens": 4}
SPEC = ServerSpec("m", NGRAM)


def run(throughput, tpot_ms):
    figures = {"output_throughput": throughput, "median_tpot_ms": tpot_ms, "median_ttft_ms": math.nan}
    return SimpleNamespace(metrics=SimpleNamespace(as_dict=lambda: dict(figures)))


class Session:
    """The measurement loop's side as measure_start_drift uses it: a pool that starts anew, and runs of one draw."""

    def __init__(self, again):
        self.again, self.calls, self.events = again, [], []
        self.start_drifts = StartDrifts()
        self.pool = SimpleNamespace(start_anew=lambda spec: self.calls.append(("start anew", spec)))
        self.on_event = self.events.append

    def measure(self, spec, workload, pattern, prompts, *, seed, logprobs, what, repeats):
        self.calls.append(("measure", spec, what, repeats, prompts))
        return [self.again[spec.speculative_config is not None]]


def result(spec=SPEC, version="0.32.0"):
    return SimpleNamespace(
        spec=spec,
        engine_version=version,
        reference_runs=[run(100.0, 50.0), run(90.0, 55.0)],
        speculative_runs=[run(150.0, 30.0)],
    )


def test_each_side_is_started_anew_and_sent_its_first_draw_once_and_the_changes_pool_by_build():
    session = Session({False: run(110.0, 50.0), True: run(135.0, 33.0)})
    spread = measure_start_drift(session, result(), "workload", "pattern", ["p1", "p2"], seed=3)
    assert [c[0] for c in session.calls] == ["start anew", "measure", "start anew", "measure"]
    assert session.calls[0][1] == SPEC.reference() and session.calls[2][1] == SPEC
    assert all(c[3] == 1 and c[4] == ["p1", "p2"] for c in session.calls if c[0] == "measure")
    assert spread.restarts == 2
    (ref, sd) = spread.changes["output_throughput"]
    assert ref == pytest.approx(math.log(1.1)) and sd == pytest.approx(math.log(0.9))
    assert "median_ttft_ms" not in spread.changes  # no value on a side: no change
    assert "reference started anew, its first draw again: output_throughput +10.0%" in session.events[0]
    # A second test on the same build adds to the pool; another build keeps its own.
    again = measure_start_drift(session, result(), "workload", "pattern", ["p1"])
    assert again.restarts == 4 and len(again.changes["output_throughput"]) == 4
    other = measure_start_drift(session, result(version="0.31.0"), "workload", "pattern", ["p1"])
    assert other.restarts == 2


def test_an_endpoint_is_not_started_anew_and_says_so():
    session = Session({})
    endpoint = ServerSpec("m", NGRAM, endpoints=(("reference", "http://a"), ("speculative", "http://b")))
    spread = measure_start_drift(session, result(endpoint), "workload", "pattern", ["p"])
    assert spread.restarts == 0 and spread.why_none == ENDPOINTS and session.calls == []


def test_changes_are_kept_only_where_both_starts_have_a_positive_value():
    found = changes_between({"output_throughput": 10.0, "median_tpot_ms": 0.0}, {"output_throughput": 20.0})
    assert found == {"output_throughput": pytest.approx(math.log(2))}


def test_the_cost_is_said_before_the_first_test():
    def plan(spec, search=False):
        return SimpleNamespace(spec=spec, pattern=SimpleNamespace(search=search))

    endpoint = ServerSpec("m", NGRAM, endpoints=(("reference", "http://a"), ("speculative", "http://b")))
    plans = [plan(SPEC), plan(ServerSpec("n", NGRAM)), plan(SPEC, search=True), plan(endpoint), plan(ServerSpec("m"))]
    line = measure_drift_cost(plans, lambda p: True)
    assert "2 more server starts a test, up to 4 for the 2 test(s) here" in line
    assert line.endswith("; 1 endpoint test(s) measure none")
