"""What a session records and writes: each test's rows, exports, and at the end the report and summary.

A part of `session.SpecdecSession` (`session.report`), which holds the settings, the pool, the measurements
and the baselines: the session measures, this records and writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from .config.spec import canonical_id
from .hook_errors import failure_text, test_failure
from .measure.specdec_test import SpecDecTest
from .analysis.drift import drift_sections, flag_drifted_rows
from .report.files import write_session_report
from .report.row.rows import rows_for_test
from .report.tables import session_counts, summary_sections
from .verdict.gate.inventory import remove_baselines, unused_baselines_under

if TYPE_CHECKING:  # the session holds this part; the part reads what the session measured
    from .session import SpecdecSession


class SessionReport:
    """The results side of `SpecdecSession`."""

    def __init__(self, session: SpecdecSession):
        self.session = session

    def export(
        self,
        test: SpecDecTest,
        name: str,
        nodeid: str,
        call_id: str | None,
        params: Mapping | None,
        user_properties: list,
        benchmark_session: Any = None,
    ) -> None:
        """A test's last result into its JUnit properties and pytest-benchmark's session (report.exports)."""
        from .report.exports import TestIdentity, export_last_result  # only tests that ran need it

        identity = TestIdentity(name, nodeid, call_id, params and {k: str(v) for k, v in params.items()})
        export_last_result(test.results, identity, user_properties, benchmark_session)

    def rows_for(self, nodeid: str, when: str, outcome: str, failure: str | None = None) -> list[dict] | None:
        """The report rows a test's phase produced (the call, or a set-up that failed), else None."""
        plan = self.session.plans.get(nodeid)
        if plan is None or not plan.ok or outcome == "skipped":
            return None
        if when == "call" or (when == "setup" and outcome == "failed"):
            return rows_for_test(
                canonical_id(nodeid),
                plan,
                self.session.tests.get(nodeid),
                "error" if when == "setup" else outcome,
                resolve=self.session.started_pool.model_resolver if self.session.started_pool else None,
                gpu_usd_per_hour=self.session.settings.gpu_usd_per_hour,
                failure=failure,
            )
        return None

    def report_rows(self, nodeid: str, report: Any) -> tuple[list[dict] | None, str | None]:
        """`rows_for` a report, or the test's failure text if that raised."""
        try:
            return self.rows_for(nodeid, report.when, report.outcome, failure_text(report)), None
        except Exception as exc:
            return None, test_failure("building this test's report rows", exc, report.longrepr)

    def record(self, nodeid: str, rows: Iterable[dict] | None) -> None:
        """A test report arrived (here or, under xdist, from a worker)."""
        with self.session.hook_errors.guard(f"recording the report of {nodeid}"):
            self.session.seen.add(canonical_id(nodeid))
            self.session.rows.extend(rows or ())

    # --- the end ----------------------------------------------------------------------------

    def finish(
        self,
        *,
        completed: bool,
        whole_suite: bool,
        args: Iterable[str],
        results_hook: Callable[[list[dict], Path | None], None] | None = None,
        outcome: str = "passed",
    ) -> None:
        """Write queued baselines; on the controller also the report, the stale-baseline verdict, the history.

        `completed`: the session ran to its end (no stop, no -x); `whole_suite`: pytest was given paths only
        (no node ids) and nothing was deselected by -k/-m.  Exceptions are kept in `hook_errors`, not raised.
        """
        with self.session.hook_errors.guard("finishing the session (baselines, report files)"):
            self._finish(completed, whole_suite, args, results_hook)
        if self.session.history is not None and not self.session.is_worker:
            with self.session.hook_errors.guard(
                f"recording the session in the history {self.session.settings.history.url}"
            ):
                self.session.history.finish(self.session.rows, self.session.fingerprint, outcome)

    def _finish(self, completed: bool, whole_suite: bool, args: Iterable[str], results_hook) -> None:
        if self.session.opened_baselines is not None:
            self.session.opened_baselines.flush()
        flag_drifted_rows(self.session.rows, self.session.drift_checks)
        if self.session.is_worker:
            return  # the controller reports and decides about stale baselines
        if self.session.settings.device is not None or self.session.rows:
            if results_hook is not None:
                results_hook(self.session.rows, self.session.settings.report_dir)
            # A shard ran all it was given unless a -k/-m deselection or a stop cut it short.
            self._write_report(completed and self.session.deselected == self.session.shard_deselected)
        if not (whole_suite and completed and not self.session.deselected):
            return
        roots = [Path(arg.split("::")[0]).resolve() for arg in args]
        self.session.stale = unused_baselines_under(
            self.session.settings.baseline_dir, self.session.seen, roots, self.session.rootpath
        )
        if self.session.stale and self.session.settings.update_baselines:
            remove_baselines(self.session.stale)

    def _write_report(self, complete: bool) -> None:
        if self.session.settings.report_dir is not None:
            self.session.report_message = write_session_report(
                self.session.settings.report_dir,
                self.session.rows,
                self.session.fingerprint,
                self.session.seen,
                complete,
                self.session.settings.baseline_dir,
            )

    failed_at_end = property(
        lambda self: bool(self.session.hook_errors) or bool(self.session.history and self.session.history.failed)
    )

    def guarded_summary_sections(self) -> list[tuple[str | None, list[str]]]:
        """`summary_sections`, the drift check, and every error a guarded hook caught (the summary's too)."""
        sections: list[tuple[str | None, list[str]]] = []
        with self.session.hook_errors.guard("writing the terminal summary"):
            sections = self.summary_sections()
        history = [("specdec history", self.session.history.summary_lines())] if self.session.history else []
        return (
            sections
            + drift_sections(self.session.drift_checks, self.session.drift_skipped)
            + history
            + self.session.hook_errors.sections()
        )

    def summary_sections(self) -> list[tuple[str | None, list[str]]]:
        """(section title or None, lines) for the terminal summary, in order."""
        return summary_sections(
            self.session.rows,
            self.session.report_message,
            self.session.opened_baselines.written if self.session.opened_baselines is not None else [],
            self.session.stale,
            self.session.settings.update_baselines,
            self.session.started_pool.history if self.session.started_pool is not None else [],
            self.session.settings.terminal_width,
            self.session.settings.full_table,
        )

    def write_summary(self, terminal) -> None:
        """The summary sections on pytest's terminal reporter, and the checks left undecided counted in the
        session's last line beside pytest's own counts."""
        for title, lines in self.guarded_summary_sections():
            if title:
                terminal.section(title)
            for line in lines:
                red = line.lstrip().startswith(("report: ERROR", "ERROR:", "DRIFT:", "FAILED:"))
                terminal.write_line(line, red=red)
        for what, count in session_counts(self.session.rows).items():
            terminal.stats.setdefault(what, []).extend([what] * count)
