"""A baseline made from the history (``--specdec-baseline-from history``): the latest stable segment.

For each gated figure the sessions since the series' newest change point
(Apache Otava) are the baseline's samples, one per session; the gate then
compares this run's repeats with them as with a file's (unpaired: the
sessions ran at other seeds).  A segment of fewer than `MIN_SESSIONS`
sessions is no baseline: right after a change the gate waits for the new
level to be measured rather than judge against one or two sessions.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..verdict.baselines import Baseline, BaselineMissing
from .changepoints import detect_series, stable_segment
from .records import RATIO_FIGURES, fingerprint_key
from .store import HistoryStore
from .url import HistoryURL

MIN_SESSIONS = 3


def _entry_place(metric: str) -> tuple[str, str]:
    """(baseline side, metric name) of a history figure."""
    if metric in RATIO_FIGURES:
        return "derived", metric
    side, _, name = metric.partition("_")
    return side, name


def baseline_from_history(store: HistoryStore, test_id: str, fingerprint: Mapping[str, Any], *, python: str,
                          engine: str = "vllm") -> Baseline:
    """The test's baseline from `store`; BaselineMissing when the history has none to give."""
    keys = [(test, key, metric) for test, key, metric, _ in store.series_keys() if test == test_id]
    if not keys:
        raise BaselineMissing(f"{store.url}: the history has no session of {test_id} (record some with "
                              "--specdec-history before gating with --specdec-baseline-from history)")
    wanted = fingerprint_key(fingerprint)
    by_key: dict[str, str] = {}
    for _, key, metric in keys:
        by_key.setdefault(key, metric)
    # This environment's series, else the most recently recorded other one (ratios travel; the gate compares
    # absolute figures only within one environment and says so).
    key = wanted if wanted in by_key else max(by_key, key=lambda k: store.series(test_id, k, by_key[k])[-1].started_at)
    series = {(t, k, m): store.series(t, k, m) for t, k, m in keys if k == key}
    detection = detect_series(series, python=python)
    segments = {report.metric: stable_segment(report) for report in detection.reports}
    longest = max(segments.values(), key=len)
    if len(longest) < MIN_SESSIONS:
        raise BaselineMissing(
            f"{store.url}: {test_id} has {len(longest)} session(s) since the newest change point; a baseline from "
            f"history needs {MIN_SESSIONS} (run more sessions with --specdec-history)")
    sessions = [p.session_uid for p in longest]
    repeats: list[dict[str, dict[str, float | None]]] = [{"reference": {}, "speculative": {}, "derived": {}}
                                                         for _ in sessions]
    for metric, points in segments.items():
        if len(points) < MIN_SESSIONS:
            continue  # a figure whose level just moved has no baseline yet: the gate says it has no value
        side, name = _entry_place(metric)
        values = {p.session_uid: p.value for p in points}
        for entry, uid in zip(repeats, sessions):
            if uid in values:
                entry[side][name] = values[uid]
    stored = store.fingerprint(key) or dict(fingerprint)
    if engine != "vllm":
        stored = {**stored, "engine": engine}
    newest = longest[-1]
    return Baseline(test_id=test_id, fingerprint=stored, config={"spec": {"engine": engine}, "history": {
        "url": str(store.url), "sessions": len(sessions), "since_commit": longest[0].commit,
        "newest_commit": newest.commit}}, repeats=repeats, recorded_at=newest.started_at,
        path=str(store.url))  # messages name where the baseline came from


class HistoryBaselines:
    """The `BaselineSession` loader for ``--specdec-baseline-from history``."""

    def __init__(self, url: HistoryURL, python: str):
        self.url = url
        self.python = python

    def __call__(self, test_id: str, fingerprint: Mapping[str, Any]) -> Baseline:
        from .store import open_history

        with open_history(self.url) as store:
            engine = str(fingerprint.get("engine") or "vllm")
            return baseline_from_history(store, test_id, fingerprint, python=self.python,
                                         engine="vllm" if engine.startswith("vllm") else engine)
