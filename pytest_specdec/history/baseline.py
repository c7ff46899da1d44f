"""A baseline made from the history (``--specdec-baseline-from history``): the latest stable segment.

For each gated figure the sessions since its own series' newest change point
(Apache Otava) are the baseline's samples, one per session; the gate then
compares this run's repeats with them as with a file's (unpaired: the
sessions ran at other seeds).  A segment of fewer than `MIN_SESSIONS`
sessions is no baseline: right after a change the gate waits for the new
level to be measured rather than judge against one or two sessions.  A
downward change point is never the new level by itself: until someone
accepts it (``pytest-specdec history accept``, which records who, when and
why), the level before it stays the baseline and the regression keeps
failing.  Only this environment's series count: a runner type the history
has not seen has no baseline yet.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..verdict.gate.baselines import Baseline, BaselineMissing
from .changepoints import detect_series, stable_segment
from .records import RATIO_FIGURES, fingerprint_key
from .store import HistoryStore
from .url import HistoryURL
from ..engines.server_spec import DEFAULT_ENGINE

MIN_SESSIONS = 3


def _entry_place(metric: str) -> tuple[str, str]:
    """(baseline side, metric name) of a history figure."""
    if metric in RATIO_FIGURES:
        return "derived", metric
    side, _, name = metric.partition("_")
    return side, name


def baseline_from_history(
    store: HistoryStore, test_id: str, fingerprint: Mapping[str, Any], *, python: str, engine: str = DEFAULT_ENGINE
) -> Baseline:
    """The test's baseline from `store`; BaselineMissing when the history has none to give."""
    keys = [(test, key, metric) for test, key, metric, _ in store.series_keys() if test == test_id]
    if not keys:
        raise BaselineMissing(
            f"{store.url}: the history has no session of {test_id} (record some with "
            "--specdec-history before gating with --specdec-baseline-from history)"
        )
    key = fingerprint_key(fingerprint)
    if all(k != key for _, k, _ in keys):
        # Another runner type's level is not this one's: a new environment starts its own series.
        others = len({k for _, k, _ in keys})
        raise BaselineMissing(
            f"{store.url}: no baseline yet for this environment: {test_id} was recorded on {others} other "
            f"environment(s), never on this one (fingerprint key {key}); record {MIN_SESSIONS} sessions here with "
            "--specdec-history first"
        )
    series = {(t, k, m): store.series(t, k, m) for t, k, m in keys if k == key}
    accepted = store.acceptances(test_id, key)  # per figure: accepting one figure's step accepts no other's
    detection = detect_series(series, python=python)
    segments = {
        report.metric: (report, stable_segment(report, {uid for metric, uid in accepted if metric == report.metric}))
        for report in detection.reports
    }
    usable = {metric: points for metric, (_, points) in segments.items() if len(points) >= MIN_SESSIONS}
    if not usable:
        report, points = max(segments.values(), key=lambda pair: len(pair[1]))
        raise BaselineMissing(
            f"{store.url}: {test_id} has {len(points)} session(s) {_since(report)}; a baseline "
            f"from history needs {MIN_SESSIONS} (run more sessions with --specdec-history)"
        )
    # Each figure's own segment: after a change in one figure, the others keep their longer level.
    order = {p.session_uid: (p.started_at, p.number or 0) for points in usable.values() for p in points}
    sessions = sorted(order, key=order.get)
    repeats: list[dict[str, dict[str, float | None]]] = [
        {"reference": {}, "speculative": {}, "derived": {}} for _ in sessions
    ]
    for metric, points in usable.items():
        side, name = _entry_place(metric)
        values = {p.session_uid: p.value for p in points}
        for entry, uid in zip(repeats, sessions):
            if uid in values:
                entry[side][name] = values[uid]
    described: dict[str, dict[str, str]] = {"reference": {}, "speculative": {}, "derived": {}}
    for metric, (report, points) in segments.items():
        side, name = _entry_place(metric)
        described[side][name] = _describe_segment(report, points)
    stored = store.fingerprint(key) or dict(fingerprint)
    if engine != DEFAULT_ENGINE:
        stored = {**stored, "engine": engine}
    newest = max((points[-1] for points in usable.values()), key=lambda p: (p.started_at, p.number or 0))
    return Baseline(
        test_id=test_id,
        fingerprint=stored,
        config={"spec": {"engine": engine}, "history": {"url": str(store.url), "segments": described}},
        repeats=repeats,
        recorded_at=newest.started_at,
        path=str(store.url),
    )  # messages name where the baseline came from


def _since(report) -> str:
    newest = report.newest
    if newest is None:
        return "in all (no change point)"
    return f"since its newest change point (session {newest.session_number})"


def _describe_segment(report, points) -> str:
    """What one figure's baseline is, in words: its sessions and why these."""

    def commit(point) -> str:
        return (point.commit or "?")[:10]

    if len(points) < MIN_SESSIONS:
        return f"no baseline: {len(points)} session(s) {_since(report)}, {MIN_SESSIONS} needed"
    span = (
        f"sessions {points[0].number or '?'}-{points[-1].number or '?'} ({len(points)}, "
        f"{commit(points[0])}..{commit(points[-1])})"
    )
    newest = report.newest
    if newest is None:
        return f"{span}, no change point"
    if points[-1].session_uid != report.points[-1].session_uid:  # stable_segment held the level before it
        return (
            f"{span}: the level before the regression at session {newest.session_number} "
            f"({newest.change:+.1%}), which nobody accepted (pytest-specdec history accept)"
        )
    return f"{span}, since the change point at session {newest.session_number}"


class HistoryBaselines:
    """The `BaselineSession` loader for ``--specdec-baseline-from history``."""

    def __init__(self, url: HistoryURL, python: str):
        self.url = url
        self.python = python

    def __call__(self, test_id: str, fingerprint: Mapping[str, Any]) -> Baseline:
        from .store import open_history

        with open_history(self.url) as store:
            engine = str(fingerprint.get("engine") or DEFAULT_ENGINE)
            return baseline_from_history(
                store,
                test_id,
                fingerprint,
                python=self.python,
                engine=DEFAULT_ENGINE if engine.startswith(DEFAULT_ENGINE) else engine,
            )
