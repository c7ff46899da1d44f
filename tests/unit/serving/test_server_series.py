"""Server series: each server's metrics read during a run, summarised per side, flagged where one side queued or
preempted and the other did not, drawn per side; unavailable with the reason where they cannot be read."""

import io
import math
import threading
from types import SimpleNamespace

import pytest

from pytest_specdec.config.units import parse_interval
from pytest_specdec.engines import engine_named
from pytest_specdec.measure.fairness import flags
from pytest_specdec.measure.run_watch import RunWatch
from pytest_specdec.analysis.series_figures import load_flags, series_figures
from pytest_specdec.report.series_report import series_markdown, series_plot, series_section
from pytest_specdec.serving.server_series import SERIES, SeriesSampler, ServerSeries, read_series
from tests.support.metrics_http import serve_metrics


VLLM = engine_named("vllm").series_metrics


def page(running: float, waiting: float, kv: float, preempted: float, replicas: int = 1) -> str:
    lines = ["# TYPE vllm:num_requests_running gauge"]
    for engine in range(replicas):
        labels = f'{{engine="{engine}",model_name="m"}}'
        lines += [
            f"vllm:num_requests_running{labels} {running}",
            f"vllm:num_requests_waiting{labels} {waiting}",
            f"vllm:kv_cache_usage_perc{labels} {kv + 0.1 * engine}",
            f"vllm:num_preemptions_total{labels} {preempted}",
        ]
    return "\n".join(lines) + "\n"


def test_a_page_gives_each_series_a_fraction_averaged_over_replicas_and_counts_summed():
    values = read_series(page(2, 1, 0.25, 3, replicas=2), VLLM)
    assert values == {"running": 4.0, "waiting": 2.0, "kv_cache_usage": pytest.approx(0.30), "preemptions": 6.0}
    assert read_series("# nothing here\n", VLLM) == {}  # no SD counters on a reference: absent, not zero
    assert set(VLLM) <= set(SERIES) and set(engine_named("llamacpp").series_metrics) <= set(SERIES)


class Scripted:
    """A metrics page that moves on at each read, and a clock that moves 0.5 s per read."""

    def __init__(self, pages, fail_at=()):
        self.pages, self.fail_at, self.reads, self.now = list(pages), set(fail_at), 0, 0.0
        self.lock = threading.Lock()

    def fetch(self) -> str:
        with self.lock:
            self.reads += 1
            if self.reads in self.fail_at:
                raise OSError("connection refused")
            return self.pages[min(self.reads - 1, len(self.pages) - 1)]

    def clock(self) -> float:
        self.now += 0.25
        return self.now


def test_the_sampler_reads_before_during_and_after_and_the_summary_takes_peaks_means_and_counter_deltas():
    pages = [page(0, 0, 0.0, 5), page(2, 0, 0.4, 5), page(3, 2, 0.8, 6), page(1, 0, 0.2, 7), page(0, 0, 0.0, 7)]
    scripted = Scripted(pages, fail_at={4})
    sampler = SeriesSampler(scripted.fetch, VLLM, interval_s=0.01, clock=scripted.clock).start()
    while scripted.reads < len(pages) + 1:
        threading.Event().wait(0.01)
    series = sampler.stop()
    assert series.available and series.failed_reads == 1
    assert series.times == sorted(series.times) and series.times[0] == 0.25  # one scripted tick after the start
    summary = series.summary()
    assert summary["running_peak"] == 3.0 and summary["waiting_peak"] == 2.0
    assert summary["kv_cache_usage_peak"] == 0.8 and 0 < summary["kv_cache_usage_mean"] < 0.8
    assert summary["preemptions"] == 2.0  # 5 before the first request, 7 after the last reply
    # vLLM names SD counters too; a reference server has none: listed as missing, never plotted as zeros.
    assert set(summary["missing"]) == {"draft_tokens", "accepted_tokens"} and "draft_tokens" not in series.values
    assert summary["read_ms_median"] == pytest.approx(250.0)  # the scripted clock: 0.25 s per read
    assert all(v is None or not math.isnan(v) for values in series.as_dict()["values"].values() for v in values)


def test_a_run_whose_every_read_failed_has_no_series_says_why_and_is_not_read_once_more_at_the_end():
    scripted = Scripted([page(0, 0, 0, 0)], fail_at=set(range(1, 100)))
    sampler = SeriesSampler(scripted.fetch, VLLM, interval_s=0.01)
    after_stop = []
    fetch = scripted.fetch
    sampler.fetch = lambda: (after_stop.append(sampler._stop.is_set()), fetch())[1]
    sampler.start()
    while scripted.reads < 3:
        threading.Event().wait(0.01)
    series = sampler.stop()
    # A page that failed every read is not read once more after the last reply (a read may wait 10 s).
    assert after_stop.count(True) == 0 and series.failed_reads == scripted.reads >= 3
    assert not series.available
    assert f"none of {series.failed_reads} reads of /metrics succeeded" in series.summary()["unavailable"]
    # The control: a page that answers is read once more after the run, for the state after its last reply.
    answering = Scripted([page(0, 0, 0, 0)])
    sampler = SeriesSampler(answering.fetch, VLLM, interval_s=0.01)
    read_after_stop = []
    sampler.fetch = lambda: (read_after_stop.append(sampler._stop.is_set()), answering.fetch())[1]
    assert sampler.start().stop().available and read_after_stop[-1] is True
    with pytest.raises(ValueError, match="interval must be > 0"):
        SeriesSampler(scripted.fetch, VLLM, interval_s=0)


def test_the_interval_option_takes_seconds_or_zero_for_never():
    import argparse

    assert parse_interval("0.5") == 0.5 and parse_interval("0") == 0.0
    for bad in ("-1", "soon", "inf"):
        with pytest.raises(argparse.ArgumentTypeError, match="seconds"):
            parse_interval(bad)


def _series(running, waiting, kv, preempted) -> ServerSeries:
    series = ServerSeries(0.5, times=[0.0, 0.5, 1.0], read_ms=[1.0, 2.0, 3.0])
    series.values = {"running": running, "waiting": waiting, "kv_cache_usage": kv, "preemptions": preempted}
    return series


class Run:
    counters, records, warm_up, engine_facts = None, [], None, None

    def __init__(self, series):
        self.series = series


class Result:
    def __init__(self, reference, speculative):
        self.reference_runs = [Run(s) for s in reference]
        self.speculative_runs = [Run(s) for s in speculative]
        self.spec = type("Spec", (), {"speculative_config": {"method": "draft_model"}, "engine": "vllm"})()
        self.pattern = {"max_concurrency": 8}

    def speedup(self, metric):
        return math.nan

    def repeat_speedups(self, metric):
        return []


CALM = _series([1, 4, 2], [0, 0, 0], [0.1, 0.5, 0.2], [0, 0, 0])
QUEUED = _series([1, 3, 3], [0, 2, 1], [0.2, 0.95, 0.9], [0, 1, 3])


def test_a_side_that_queued_and_preempted_where_the_other_did_not_is_flagged_with_both_kv_peaks():
    figures = series_figures(Result([CALM, CALM], [QUEUED, CALM]))
    assert figures["speculative"]["preemptions"] == 3 and figures["reference"]["preemptions"] == 0
    assert figures["speculative"]["kv_cache_usage_peak"] == 0.95 and figures["reference"]["samples"] == 6
    assert figures["speculative"]["first_run"]["values"]["waiting"] == [0, 2, 1]
    assert figures["flags"] == [
        "SD preempted 3 requests during its runs and the reference none: its latencies include that wait "
        "(KV cache usage peaked at 95% with SD, 50% without)",
        "SD queued up to 2 requests during its runs and the reference none: its latencies include that wait "
        "(KV cache usage peaked at 95% with SD, 50% without)",
    ]
    # A fairness flag of its own kind: reported and asserted on, never a reason to measure again.
    kinds = [flag.kind for flag in flags(Result([CALM], [QUEUED]))]
    assert kinds.count("server_load") == 2
    assert series_figures(Result([QUEUED], [QUEUED]))["flags"] == []  # both queued: the load, not SD
    assert load_flags({"reference": {"unavailable": "x"}, "speculative": {}}) == []


def test_a_side_without_series_is_unavailable_with_its_reason_and_flags_nothing():
    refused = ServerSeries.unavailable("trtllm-serve's /metrics hands out each iteration's statistics once")
    figures = series_figures(Result([CALM], [refused]))
    assert figures["speculative"] == {"unavailable": refused.problem} and figures["flags"] == []
    assert series_figures(Result([], []))["reference"]["unavailable"] == "the runs' server series were not read"


def test_the_run_watch_reads_the_engines_series_or_says_why_it_cannot():
    spec = type("Spec", (), {"engine": "vllm", "endpoints": ()})()
    with serve_metrics(page(1, 0, 0.1, 0)) as (url, _):  # one request running, read over HTTP
        energy, series = RunWatch("no RAPL counters here", SimpleNamespace(url=url), spec, 0.01).stop()
    assert energy.joules is None and energy.problem == "no RAPL counters here"
    assert series.available and series.summary()["running_peak"] == 1.0
    # A page that did not answer just before the run is not read during it: no thread, no wait, the reason.
    _, unread = RunWatch("x", object(), spec, 0.01, unanswered="http://h/metrics did not answer within 10 s").stop()
    assert (
        unread.summary()["unavailable"]
        == "http://h/metrics did not answer within 10 s before the run: not read during it"
    )
    _, off = RunWatch("x", object(), spec, None).stop()
    assert off.summary()["unavailable"] == "server series off (--specdec-series-interval 0)"
    trtllm = type("Spec", (), {"engine": "trtllm", "endpoints": ()})()
    _, refused = RunWatch("x", object(), trtllm, 0.01).stop()
    assert "drain" in refused.problem or "once" in refused.problem


def test_the_report_tables_and_figure_show_both_sides():
    row = {"test": "t.py::test_poor_draft", "server_series": series_figures(Result([CALM], [QUEUED]))}
    table = "\n".join(series_markdown([row], str))
    assert "| t.py::test_poor_draft | 50.0% / 95.0% |" in table and "SD preempted 3 requests" in table
    html = "\n".join(series_section([row]))
    assert 'id="server-series"' in html and "95.0%" in html
    buffer = io.BytesIO()
    assert series_plot([row], buffer) is not None and buffer.getvalue().startswith(b"\x89PNG")
    assert series_plot([{"test": "x", "server_series": None}], io.BytesIO()) is None
    unavailable = {"test": "u", "server_series": series_figures(Result([CALM], [ServerSeries.unavailable("why")]))}
    assert "- unavailable: why" in "\n".join(series_markdown([unavailable], str))
