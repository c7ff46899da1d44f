"""pr-comment.md: the session's verdict as a pull-request comment, short enough for GitHub to take.

Written beside summary.md by every session with a report directory.  It opens with a marker line, so a
workflow can find its own comment and update it in place rather than add one per push (docs/ci.md), then
the outcome counts and one line per check a reviewer has to read: every failed test, every check left
undecided (with what would decide it) and every baseline compared only in part.  GitHub refuses a comment
over 65,536 characters: the lists are cut, with how many were left out, to stay under it whatever the
session's size.
"""

from __future__ import annotations

import collections
import os
from typing import Mapping

from .row.cells import _speedup_text, compact_config
from .tables import undecided_lines

MARKER = "<!-- pytest-specdec verdict -->"
GITHUB_LIMIT = 65_536  # characters GitHub takes in one issue or pull-request comment
_BUDGET = GITHUB_LIMIT - 2_000  # room for the head, the link and the "left out" lines


def run_link(environ: Mapping[str, str] = os.environ) -> str | None:
    """The Actions run's page (where the report artifact is), from the variables every GitHub job has."""
    parts = [environ.get(key) for key in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")]
    return f"{parts[0]}/{parts[1]}/actions/runs/{parts[2]}" if all(parts) else None


def _where(row: dict) -> str:
    return f"{compact_config(row)}, {row.get('workload') or '–'}/{row.get('access_pattern') or '–'}"


def _one_line(text: str | None, limit: int = 400) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _name(row: dict) -> str:
    return row["test"].rsplit("::", 1)[-1]


def failed_lines(rows: list[dict]) -> list[str]:
    return [
        f"- `{_name(row)}` ({_where(row)}): speedup {_speedup_text(row)}; {_one_line(row.get('failure')) or row['outcome']}"
        for row in rows
        if row["outcome"] in ("failed", "error")
    ]


def partly_compared_lines(rows: list[dict]) -> list[str]:
    lines = []
    for row in rows:
        if row.get("regression") in ("partly compared", "not compared", "stale"):
            why = (row.get("regression_comparison") or "").splitlines()[:1]
            lines.append(f"- `{_name(row)}` [{row['regression']}]: {_one_line(why[0] if why else '')}")
    return lines


def pr_comment(rows: list[dict], link: str | None = None) -> str:
    """The comment's Markdown: at most GITHUB_LIMIT characters for any number of rows."""
    counts = collections.Counter(row["outcome"] for row in rows)
    head = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
    head = f"{len(rows)} results: {head}" if rows else "no SD results"
    out = [MARKER, f"### pytest-specdec: {head}", ""]
    budget = _BUDGET - sum(len(line) + 1 for line in out)
    for title, lines in (
        ("Failed", failed_lines(rows)),
        ("Undecided (not passed: `--specdec-strict` fails them)", [f"- {line}" for line in undecided_lines(rows)]),
        ("Baselines compared in part", partly_compared_lines(rows)),
    ):
        if not lines:
            continue
        out += [f"**{title}**", ""]
        budget -= len(title) + 6
        for at, line in enumerate(lines):
            if len(line) + 1 > budget:
                out.append(f"- … and {len(lines) - at} more (the full report lists them)")
                budget = 0
                break
            out.append(line)
            budget -= len(line) + 1
        out.append("")
    if not any(row["outcome"] in ("failed", "error") for row in rows) and not undecided_lines(rows):
        out += ["Every check decided and passed.", ""]
    out.append(f"Full report: {link}" if link else "Full report: report.html in the session's report directory.")
    return "\n".join(out) + "\n"
