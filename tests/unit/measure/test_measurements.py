"""The measurement loop's reads of a server's metrics page."""

import time
from types import SimpleNamespace

from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.engines.counters import SpecDecodeCounters
from pytest_specdec.load.patterns import AccessPattern
from pytest_specdec.load.streaming import RequestRecord
from pytest_specdec.load.workloads import Prompt, resolve_workload
from pytest_specdec.measure import measurements as measuring
from pytest_specdec.measure.measurements import Measurements
from pytest_specdec.measure.warm_up import SteadyState

SPEC = ServerSpec("m", speculative_config={"method": "ngram", "num_speculative_tokens": 4})


class TimingOutServer:
    """A server whose metrics page never answers: each read would wait out the timeout."""

    url, model, process, command = "http://127.0.0.1:9", "m", None, ["serve"]

    def __init__(self):
        self.scrapes = 0

    def spec_decode_counters(self):
        self.scrapes += 1
        return SpecDecodeCounters.unavailable(f"{self.url}/metrics did not answer within 10 s", timed_out=True)


def _records(n: int):
    now = time.perf_counter()
    return [RequestRecord(i, 4, 8, now, 0.01, [0.01] * 7, 0.08, list(range(8)), "x", None, True) for i in range(n)]


def test_a_metrics_page_that_timed_out_is_not_asked_again_by_the_same_servers_later_runs(monkeypatch, tmp_path):
    # A run sent again (a cold flag, a check undecided) goes back to the same server: asking its dead page
    # again would wait out the timeout once more per run, for counters that are unavailable either way.
    server = TimingOutServer()
    monkeypatch.setattr(
        measuring,
        "generate_load",
        lambda *a, **kw: SimpleNamespace(records=_records(3), duration_s=0.1, started_at=0.0),
    )
    monkeypatch.setattr(measuring, "read_engine_facts", lambda server: {})
    measurements = Measurements(pool=SimpleNamespace(get=lambda spec: server), work_dir=tmp_path, repeats=2)
    monkeypatch.setattr(measurements, "_warm_up", lambda *a: SteadyState((10.0,), True, 0.05, 0.1))
    monkeypatch.setattr(measurements, "prompts", lambda *a: [Prompt("p", 4, 8)] * 3)
    workload = resolve_workload("random_s", {"input_len": 4, "output_len": 8})
    pattern = AccessPattern("c1", max_concurrency=1, num_prompts=3)

    runs = measurements.measure(SPEC, workload, pattern, [Prompt("p", 4, 8)] * 3)
    runs += measurements.measure(SPEC, workload, pattern, [Prompt("p", 4, 8)] * 3, only_repeat=2)
    assert len(runs) == 3 and server.scrapes == 1
    for run in runs:
        assert not run.counters.present and "did not answer within 10 s" in run.counters.problem
        assert "not read during it" in run.series.problem
