"""The drift between sessions the stored-baseline gates allowed for, in every report: where each figure's came
from (a results history's sessions, or the built-in figure, labelled) and the smallest measured drop a gate can
fail with it (`drift` of each row, verdict.learned_drift.DriftFigure.as_dict)."""

from __future__ import annotations

from collections.abc import Callable

from .markup import html_table, markdown_table

HEADER = ("figure", "drift a side", "from", "no measured drop under this can fail", "tests")


def drift_groups(rows: list[dict]) -> list[tuple[str, dict, list[str]]]:
    """(figure, drift, tests) for each distinct drift a figure was gated with, in the rows' order."""
    groups: dict[tuple[str, str], tuple[str, dict, list[str]]] = {}
    for row in rows:
        for name, used in (row.get("drift") or {}).items():
            entry = groups.setdefault((name, used["describe"]), (name, used, []))
            test = str(row.get("test")).rsplit("::", 1)[-1]
            if test not in entry[2]:
                entry[2].append(test)
    return list(groups.values())


def _cells(name: str, used: dict, tests: list[str]) -> list[str]:
    return [name, f"{used['value']:.1%}", used["origin"], f"{used['smallest_failable_drop']:.1%}", ", ".join(tests)]


def drift_lines(rows: list[dict]) -> list[str]:
    """Terminal: one line per figure and drift, with the tests gated with it."""
    return [
        f"{name}: {used['describe']}; no measured drop under {used['smallest_failable_drop']:.1%} can fail "
        f"({len(tests)} test{'s' if len(tests) != 1 else ''})"
        for name, used, tests in drift_groups(rows)
    ]


def drift_section(rows: list[dict]) -> list[str]:
    """report.html: the drift each gated figure allowed for."""
    groups = drift_groups(rows)
    if not groups:
        return []
    return [
        '<section id="drift">',
        "<h2>Drift between sessions</h2>",
        "<p>A stored baseline was measured in another session, and the two sessions drift apart by an amount no "
        "run in this one shrinks. Each gated figure allowed for the drift below: learned from the results history's "
        "sessions of the test on this machine and engine build since their newest change point, or else the "
        "built-in figure, which is the CPU build's and not this machine's. A drop measured under the last column "
        "cannot fail, however many runs.</p>",
        *html_table(HEADER, [_cells(*group) for group in groups]),
        "</section>",
    ]


def drift_markdown(rows: list[dict], escape: Callable[[str], str]) -> list[str]:
    """summary.md: the same table."""
    groups = drift_groups(rows)
    if not groups:
        return []
    return (
        ["**Drift between sessions the baseline gates allowed for:**", ""]
        + markdown_table(HEADER, [_cells(*group) for group in groups], escape)
        + [""]
    )
