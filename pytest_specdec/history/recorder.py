"""A session's side of the history: check it can be written, record the rows, run the opt-in check.

`SpecdecSession` owns one `HistoryRecorder` when ``--specdec-history`` is
given; the xdist controller records once, with every worker's rows.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from .changepoints import Detection, DetectorError, detect, otava_python
from .drift import HistoryDrift
from .options import HistorySettings
from .records import SessionRecord, figures_of, fingerprint_key, git_revision, new_session_uid, now_iso
from .store import open_history
from .url import HistoryError

CI_BRANCH_VARIABLES = ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME", "BUILDKITE_BRANCH")


class HistoryRecorder:
    def __init__(self, settings: HistorySettings, rootpath: Path, environ: Mapping[str, str] = os.environ):
        self.settings = settings
        self.rootpath = Path(rootpath)
        self.environ = environ
        self.session_uid = new_session_uid()
        self.started_at = now_iso()
        self.recorded: int | None = None  # figures stored, once recorded
        self.detection: Detection | None = None
        self._python: str | None = None

    def check(self) -> None:
        """Fail fast (ValueError, before any server starts): the history opens, and Otava is there if needed."""
        try:
            with open_history(self.settings.url, create=True) as store:
                store.check_writable()  # a newer schema refused now, not after the tests ran
            if self.settings.detect or self.settings.baseline_from == "history":
                self.python()
        except HistoryError as exc:
            raise ValueError(f"--specdec-history {exc}") from None
        except DetectorError as exc:
            flag = "--specdec-history-detect" if self.settings.detect else "--specdec-baseline-from history"
            raise ValueError(f"{flag}: {exc}") from None

    def python(self) -> str:
        if self._python is None:
            self._python = otava_python(self.settings.otava_python, (self.rootpath,))
        return self._python

    def revision(self) -> tuple[str | None, str | None]:
        sha, branch = git_revision(self.rootpath)
        branch = (
            self.settings.branch
            or branch
            or next((self.environ[name] for name in CI_BRANCH_VARIABLES if self.environ.get(name)), None)
        )
        return self.settings.commit or sha, branch

    def record(self, rows: Sequence[Mapping[str, Any]], fingerprint: Mapping[str, Any], outcome: str) -> int:
        commit, branch = self.revision()
        session = SessionRecord(
            self.session_uid,
            commit,
            branch,
            self.started_at,
            now_iso(),
            outcome,
            dict(fingerprint),
            str(fingerprint.get("plugin_version") or "") or None,
        )
        with open_history(self.settings.url, create=True) as store:
            self.recorded = store.append(session, figures_of(rows, fingerprint))
        return self.recorded

    def finish(self, rows: Sequence[Mapping[str, Any]], fingerprint: Mapping[str, Any], outcome: str) -> None:
        """The session's end: record its rows, then (opt-in) look for change points in the series it recorded.

        Only this session's own series: (test, fingerprint key) of each row it recorded.  Another
        runner's series, or a test this session did not run, is not this session's verdict; a session
        that recorded nothing checks nothing.
        """
        self.record(rows, fingerprint, outcome)
        if self.settings.detect:
            self.run_detection(sorted({(str(row.get("test")), fingerprint_key(fingerprint, row)) for row in rows}))

    def baseline_loader(self):
        """The gate's baseline source for --specdec-baseline-from history, else None (baseline files)."""
        if self.settings.baseline_from != "history":
            return None
        from .baseline import HistoryBaselines

        return HistoryBaselines(self.settings.url, self.python())

    def drift_lookup(self):
        """Each gated figure's session values since its newest change point (history.drift), from which the gate
        learns this machine's drift between sessions (verdict.learned_drift.DriftBook)."""
        # A partial, not this recorder's method: a result keeps its gate, and the gate its drift source, and a
        # result must pickle (the recorder holds the environment, which does not).
        return HistoryDrift(
            self.settings.url, functools.partial(otava_python, self.settings.otava_python, (self.rootpath,))
        )

    def run_detection(self, series: Sequence[tuple[str, str]]) -> Detection:
        """Change points in the given (test, fingerprint key) series; none given, none checked."""
        if not series:
            self.detection = Detection.of([], self.settings.threshold, None)
            return self.detection
        with open_history(self.settings.url) as store:
            self.detection = detect(store, series=series, python=self.python(), threshold=self.settings.threshold)
        return self.detection

    @property
    def failed(self) -> bool:
        return bool(self.detection and self.detection.failing and not self.settings.warn_only)

    def summary_lines(self) -> list[str]:
        lines = []
        if self.recorded is not None:
            lines.append(f"history: {self.recorded} figures of this session recorded in {self.settings.url}")
        if self.detection is not None:
            judged = [r for r in self.detection.reports if r.note is None]
            lines.append(
                f"change points (Apache Otava {self.detection.otava_version or '-'}, E-divisive means): "
                f"{len(judged)} series checked, threshold {self.detection.threshold:.0%}"
            )
            for report in self.detection.reports:
                if report.newest is not None:
                    verdict = (
                        "FAILED"
                        if report.failing(self.detection.threshold) and not self.settings.warn_only
                        else "WARNING"
                        if report.failing(self.detection.threshold)
                        else "newest"
                    )
                    lines.append(f"  {verdict}: {report.name}: {report.newest.describe()}")
        return lines


__all__ = ["HistoryRecorder", "HistoryError", "DetectorError"]
