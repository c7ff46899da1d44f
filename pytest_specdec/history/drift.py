"""The history's side of a learned drift: one figure's session values since its newest change point.

`verdict.learned_drift.DriftBook` asks for a figure of a test on this machine and engine build (the gate's own
fingerprint, keyed as the history keys its series); this module reads that series, finds its change points
with Apache Otava as `history.baseline` does (a regression nobody accepted keeps the level before it), and
hands back the values of the stable segment.  Sessions there ran the same build on the same machine, so their
spread is the machine's drift between sessions.  A history that cannot be read or checked gives no values and
says why: the gate then uses the built-in figure, labelled with that reason.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..verdict.learned_drift import SessionSeries
from .changepoints import MIN_POINTS, DetectorError, detect_series, stable_segment
from .records import fingerprint_key
from .store import HistoryStore, open_history
from .url import HistoryError, HistoryURL


def stable_series(
    store: HistoryStore, test_id: str, fingerprint: Mapping[str, Any], *, python: Callable[[], str]
) -> dict[str, SessionSeries]:
    """Every figure's values of `test_id` on the machine and build `fingerprint` names, since each figure's newest
    change point, found in one run of Otava for them all; `python()` gives Otava's interpreter, asked for only
    when a series is long enough to look for change points."""
    key = fingerprint_key(fingerprint)
    metrics = sorted({metric for test, k, metric, _ in store.series_keys() if test == test_id and k == key})
    series = {(test_id, key, metric): store.series(test_id, key, metric) for metric in metrics}
    long_enough = any(len(points) >= MIN_POINTS for points in series.values())
    reports = detect_series(series, python=python() if long_enough else "").reports if series else []
    accepted = store.acceptances(test_id, key)
    found = {}
    for report in reports:
        segment = stable_segment(report, {uid for figure, uid in accepted if figure == report.metric})
        newest = report.newest
        since = None if newest is None else f"session {newest.session_number} ({newest.after.started_at[:10]})"
        found[report.metric] = SessionSeries(
            tuple(p.value for p in segment), since, str(store.url), own=tuple(p.own_variance for p in segment)
        )
    return found


def _none(where: str, metric: str) -> SessionSeries:
    return SessionSeries((), None, where, f"the history has no {metric} of this test on this machine and build")


class HistoryDrift:
    """The `DriftBook` lookup for ``--specdec-history``: reads a test's series once, the first time one of its
    figures is asked for (one Otava run a test)."""

    def __init__(self, url: HistoryURL, python):
        self.url = url
        self.python = python  # a callable: the Otava environment is found only when a series needs it
        self._tests: dict[tuple[str, str], dict[str, SessionSeries] | str] = {}

    def __call__(self, test_id: str, fingerprint: Mapping[str, Any], metric: str) -> SessionSeries:
        key = (test_id, fingerprint_key(fingerprint))
        if key not in self._tests:
            try:
                with open_history(self.url) as store:
                    self._tests[key] = stable_series(store, test_id, fingerprint, python=self.python)
            except (HistoryError, DetectorError) as exc:
                self._tests[key] = f"the history could not be read for it: {exc}"
        found = self._tests[key]
        if isinstance(found, str):
            return SessionSeries((), None, str(self.url), found)
        return found.get(metric) or _none(str(self.url), metric)
