"""``pytest-specdec history list|detect|plot|accept|export URL``: read a results history from a shell or a CI step.

Every error names the history by its masked URL and says what is wrong (no
such file or database, unreachable server, bad credentials, a schema this
version does not read); exit status 2.  ``detect`` exits 1 when the newest
change point of a series is a regression beyond the threshold (0 with
``--warn-only``).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from ..atomic import write_atomic
from .changepoints import (
    DEFAULT_METRICS,
    DEFAULT_MIN_CHANGE,
    DEFAULT_PVALUE,
    DEFAULT_THRESHOLD,
    DEFAULT_WINDOW,
    MIN_POINTS,
    DetectorError,
    detect,
    otava_python,
)
from .options import parse_fraction, parse_min_change
from .store import open_history
from .url import HistoryError, parse_history_url

PROG = "pytest-specdec history"


def parse_window(value: str) -> int:
    """Otava's sliding window: a whole number of sessions, no fewer than a series needs to be split."""
    try:
        window = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of sessions, got {value!r}") from None
    if window < MIN_POINTS:
        raise argparse.ArgumentTypeError(
            f"a window of {window} session(s) can hold no change point; give at least "
            f"{MIN_POINTS} (default {DEFAULT_WINDOW})"
        )
    return window


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Read a pytest-specdec results history "
        "(recorded with --specdec-history): a SQLite path or a postgresql:// URL.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument(
            "url",
            metavar="URL",
            type=parse_history_url,
            help="the history (give a PostgreSQL password by PGPASSWORD or ~/.pgpass)",
        )
        return sub

    listing = command("list", "the sessions recorded and the series they make")
    listing.add_argument("--test", action="append", default=[], help="only this test id (repeatable)")

    def detection_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--metric",
            action="append",
            default=[],
            help=f"a metric to look at (repeatable; default: {', '.join(DEFAULT_METRICS)})",
        )
        sub.add_argument("--test", action="append", default=[], help="only this test id (repeatable)")
        sub.add_argument(
            "--threshold",
            type=parse_fraction,
            default=DEFAULT_THRESHOLD,
            help="fail when the newest change point loses more than this (default 0.05)",
        )
        sub.add_argument(
            "--pvalue", type=parse_fraction, default=DEFAULT_PVALUE, help="Otava's significance level (default 0.001)"
        )
        sub.add_argument(
            "--window",
            type=parse_window,
            default=DEFAULT_WINDOW,
            help=f"Otava's window in sessions (default 30, at least {MIN_POINTS})",
        )
        sub.add_argument(
            "--min-change",
            type=parse_min_change,
            default=DEFAULT_MIN_CHANGE,
            help="steps smaller than this share of the mean are no change point (default 0.01; 0: any)",
        )
        sub.add_argument(
            "--otava-python",
            default=None,
            help="a Python with apache-otava (default: $SPECDEC_OTAVA_PYTHON, this one, ./.venv-otava)",
        )

    found = command("detect", "change points of each series (Apache Otava, E-divisive means)")
    detection_options(found)
    found.add_argument("--warn-only", action="store_true", help="report a regression but exit 0")
    found.add_argument(
        "--markdown",
        type=Path,
        default=None,
        help="also write the result as a Markdown section (for a PR comment); '-' appends it to $GITHUB_STEP_SUMMARY",
    )

    plot = command("plot", "a trend plot per series (PNG) with its change points, and an HTML page of them")
    detection_options(plot)
    plot.add_argument("out", metavar="OUT_DIR", type=Path, help="folder for the PNG files and trends.html")
    plot.add_argument(
        "--results", type=Path, default=None, help="a session's results.json to show beside the trends in trends.html"
    )

    accept = command(
        "accept",
        "accept a test's regressing change points as its new level (who, when, why are "
        "recorded); until then --specdec-baseline-from history keeps the level before them",
    )
    accept.add_argument("--test", action="append", required=True, help="the test id (repeatable)")
    accept.add_argument(
        "--metric",
        action="append",
        default=[],
        help="only this metric's series (repeatable; default: every series of the test)",
    )
    accept.add_argument("--by", required=True, help="who accepts it (a name or e-mail, recorded)")
    accept.add_argument("--reason", default=None, help="why, recorded with it (e.g. the PR that explains it)")
    accept.add_argument("--otava-python", default=None, help="a Python with apache-otava (as for detect)")

    export = command("export", "every recorded figure as CSV")
    export.add_argument("out", metavar="OUT_CSV", help="the CSV file ('-' for stdout)")
    return parser


def history_main(argv: Sequence[str]) -> int:
    options = _parser().parse_args(list(argv))
    try:
        return {"list": _list, "detect": _detect, "plot": _plot, "accept": _accept, "export": _export}[options.command](
            options
        )
    except (HistoryError, DetectorError, OSError) as exc:
        text = options.url.scrub(str(exc)) if hasattr(options, "url") else str(exc)
        print(f"{PROG} {options.command}: error: {text}", file=sys.stderr)
        return 2


def _list(options) -> int:
    with open_history(options.url) as store:
        _check_filters(store, options)
        sessions = store.sessions()
        keys = [k for k in store.series_keys() if not options.test or k[0] in options.test]
    print(f"{options.url}: {len(sessions)} sessions")
    for s in sessions:
        print(
            f"  {s['number']:>4}  {s['started_at']}  {(s['commit'] or '-')[:12]:<12}  {s['branch'] or '-':<16}  "
            f"{s['outcome']:<11}  {s['figures']} figures"
        )
    print(f"{len(keys)} series (test [fingerprint] metric: sessions)")
    for test, key, metric, count in keys:
        print(f"  {test} [{key}] {metric}: {count}")
    return 0


def _check_filters(store, options) -> None:
    """A --metric or --test that names nothing in the history is an error, not an empty pass."""
    keys = store.series_keys()
    for flag, asked, known in (
        ("--metric", getattr(options, "metric", []), sorted({k[2] for k in keys})),
        ("--test", options.test, sorted({k[0] for k in keys})),
    ):
        unknown = [value for value in asked if value not in known]
        if unknown:
            close = sorted({k for value in unknown for k in known if value in k or k.endswith(f"::{value}")})
            hint = f"; did you mean {', '.join(close[:5])}?" if close else ""
            raise HistoryError(
                f"{options.url}: {flag} {', '.join(unknown)}: no such {flag[2:]} in this history "
                f"(it has {len(known)}: {', '.join(known[:8])}{', ...' if len(known) > 8 else ''})"
                f"{hint}"
            )


def _run_detection(options, store):
    _check_filters(store, options)
    return detect(
        store,
        metrics=tuple(options.metric) or DEFAULT_METRICS,
        tests=options.test,
        python=otava_python(options.otava_python, (Path.cwd(),)),
        threshold=options.threshold,
        pvalue=options.pvalue,
        window=options.window,
        min_change=options.min_change,
    )


def _detect(options) -> int:
    from .trends import markdown_section

    with open_history(options.url) as store:
        detection = _run_detection(options, store)
    print(
        f"{options.url}: change points by Apache Otava {detection.otava_version or '-'} (E-divisive means), "
        f"p < {options.pvalue:g}, threshold {options.threshold:.0%}"
    )
    for report in detection.reports:
        if report.note:
            print(f"  {report.name}: not checked: {report.note}")
            continue
        print(f"  {report.name}: {len(report.points)} sessions, {len(report.change_points)} change point(s)")
        for cp in report.change_points:
            print(f"    {cp.describe()}")
    if options.markdown is not None:
        section = markdown_section(detection, warn_only=options.warn_only)
        if str(options.markdown) == "-":
            summary = os.environ.get("GITHUB_STEP_SUMMARY")
            if not summary:
                raise HistoryError("--markdown -: $GITHUB_STEP_SUMMARY is not set (give a file path instead)")
            with open(summary, "a", encoding="utf-8") as handle:
                handle.write(section)
        else:
            write_atomic(options.markdown, section)
    for report in detection.failing:
        word = "WARNING" if options.warn_only else "FAILED"
        print(f"{word}: {report.name}: {report.newest.describe()}")
    return 1 if detection.failing and not options.warn_only else 0


def _safe_name(text: str) -> str:
    """A file name part for `text`: readable, and unique (two ids that read alike, such as ``[a/b]`` and
    ``[a_b]``, or share their first 80 characters, differ by the hash of the whole id)."""
    readable = "".join(c if c.isalnum() or c in "._-" else "_" for c in text)[:80]
    return f"{readable}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def _plot(options) -> int:
    from .trends import environment_words, trend_png

    with open_history(options.url) as store:
        detection = _run_detection(options, store)
        environments = {
            key: environment_words(store.fingerprint(key))
            for key in {report.fingerprint_key for report in detection.reports}
        }
    options.out.mkdir(parents=True, exist_ok=True)
    figures = []
    for report in detection.reports:
        if not report.points:
            continue
        png = trend_png(report, threshold=detection.threshold, environment=environments.get(report.fingerprint_key))
        path = options.out / f"trend-{_safe_name(report.test)}-{report.fingerprint_key}-{report.metric}.png"
        write_atomic(path, png)
        figures.append((report, png))
        print(f"written: {path}")
    page = options.out / "trends.html"
    write_atomic(page, _trends_page(options, detection, figures))
    print(f"written: {page}")
    return 0


def _trends_page(options, detection, figures) -> str:
    from ..report.html import TrendFigure, render_html

    rows = []
    if options.results is not None:
        import json

        try:
            rows = json.loads(options.results.read_text())["results"]
        except (OSError, ValueError, KeyError) as exc:
            raise HistoryError(f"--results {options.results}: not a pytest-specdec results.json ({exc})") from None
    trends = [
        TrendFigure(
            title=f"{r.test}: {r.metric}",
            png=png,
            caption=(r.newest.describe() if r.newest else "no change point")
            + f" ({len(r.points)} sessions, fingerprint {r.fingerprint_key})",
        )
        for r, png in figures
    ]
    regressed = [f"{r.test}: {r.metric} {r.newest.describe()}" for r, _ in figures if r.failing(detection.threshold)]
    return render_html(
        rows,
        title=f"pytest-specdec history: {options.url}",
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        trends=trends,
        regressions=regressed,
        notes=[
            f"Change points by Apache Otava {detection.otava_version or '-'} (E-divisive means), "
            f"threshold {detection.threshold:.0%}."
        ],
    )


def _accept(options) -> int:
    python = otava_python(options.otava_python, (Path.cwd(),))
    at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with open_history(options.url) as store:
        _check_filters(store, options)
        detection = detect(
            store,
            metrics=tuple(options.metric) or tuple({k[2] for k in store.series_keys()}),
            tests=options.test,
            python=python,
            threshold=0.0,
        )
        pending = []
        for report in detection.reports:
            newest = report.newest
            done = store.acceptances(report.test, report.fingerprint_key)
            if newest is not None and newest.regression and (report.metric, newest.after.session_uid) not in done:
                pending.append(report)
        if not pending:
            raise HistoryError(
                f"{options.url}: {', '.join(options.test)}: no regressing change point waits to be "
                "accepted (the newest change point of each series is an improvement, accepted, or "
                "there is none)"
            )
        for report in pending:
            store.accept(
                report.test,
                report.fingerprint_key,
                report.metric,
                report.newest.after.session_uid,
                by=options.by,
                at=at,
                reason=options.reason,
            )
            print(f"accepted by {options.by} at {at}: {report.name}: {report.newest.describe()}")
    return 0


def _export(options) -> int:
    with open_history(options.url) as store:
        figures = store.figures()
    buffer = io.StringIO()
    columns = list(figures[0]) if figures else ["session_uid", "commit", "test", "metric", "value"]
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(figures)
    if options.out == "-":
        sys.stdout.write(buffer.getvalue())
    else:
        write_atomic(options.out, buffer.getvalue())
        print(f"written: {options.out} ({len(figures)} figures)")
    return 0
