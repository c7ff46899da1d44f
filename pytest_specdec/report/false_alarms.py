"""The session's false alarms, stated from its rows: every timing check's false-fail rate (each row's decisions)
and the budget they were decided under (each row's `alarm_budget`), so that a merge of shards' rows states the
whole session's (verdict.alarm_budget)."""

from __future__ import annotations

from collections.abc import Callable
from html import escape as escape_html

from ..verdict.alarm_budget import AlarmBudget
from ..verdict.sequential.rule import FALSE_FAIL


def false_alarms(rows: list[dict]) -> dict | None:
    """`AlarmBudget.as_dict` over the rows' timing checks; None when they made none."""
    rates: list[float] = []
    unrated, config = 0, None
    for row in rows:
        config = config or row.get("alarm_budget")
        for decision in (row.get("decisions") or {}).values():
            if "false_fail" not in decision:  # a row from before the rate was kept: the rule's own
                rates.append(FALSE_FAIL)
            elif decision["false_fail"] is None:  # decided on one run: no error rate
                unrated += 1
            else:
                rates.append(decision["false_fail"])
    if not rates and not unrated:
        return None
    return (AlarmBudget(**config) if config else AlarmBudget()).as_dict(rates, unrated)


def false_alarm_lines(rows: list[dict]) -> list[str]:
    """Terminal: the session's statement, one line."""
    found = false_alarms(rows)
    return [found["statement"]] if found else []


def false_alarm_section(rows: list[dict]) -> list[str]:
    """report.html: the same statement."""
    found = false_alarms(rows)
    if not found:
        return []
    return [
        '<section id="false-alarms">',
        "<h2>False alarms</h2>",
        f"<p>{escape_html(found['statement'])}.</p>",
        "</section>",
    ]


def false_alarm_markdown(rows: list[dict], escape: Callable[[str], str]) -> list[str]:
    """summary.md: the same statement."""
    found = false_alarms(rows)
    return [f"**False alarms:** {escape(found['statement'])}.", ""] if found else []
