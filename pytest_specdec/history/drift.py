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


def session_series(
    store: HistoryStore, test_id: str, fingerprint: Mapping[str, Any], metric: str, *, python: Callable[[], str]
) -> SessionSeries:
    """`metric`'s values of `test_id` on the machine and build `fingerprint` names, since the newest change point;
    `python()` gives Otava's interpreter, asked for only when the series is long enough to look for change points."""
    key = fingerprint_key(fingerprint)
    points = store.series(test_id, key, metric)
    if not points:
        return SessionSeries(
            (), None, str(store.url), f"the history has no {metric} of this test on this machine and build"
        )
    otava = python() if len(points) >= MIN_POINTS else ""
    report = detect_series({(test_id, key, metric): points}, python=otava).reports[0]
    accepted = {uid for figure, uid in store.acceptances(test_id, key) if figure == metric}
    segment = stable_segment(report, accepted)
    newest = report.newest
    since = None if newest is None else f"session {newest.session_number} ({newest.after.started_at[:10]})"
    return SessionSeries(tuple(p.value for p in segment), since, str(store.url))


class HistoryDrift:
    """The `DriftBook` lookup for ``--specdec-history``: opens the history for each series it is asked for."""

    def __init__(self, url: HistoryURL, python):
        self.url = url
        self.python = python  # a callable: the Otava environment is found only when a series needs it

    def __call__(self, test_id: str, fingerprint: Mapping[str, Any], metric: str) -> SessionSeries:
        try:
            with open_history(self.url) as store:
                return session_series(store, test_id, fingerprint, metric, python=self.python)
        except (HistoryError, DetectorError) as exc:
            return SessionSeries((), None, str(self.url), f"the history could not be read for it: {exc}")
