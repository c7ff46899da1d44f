"""Constrained traffic in summary.md and report.html (a row's ``constraint``, measure.validity): the constraints,
each side's valid outputs, and the constrained figures beside the same prompts' free ones."""

from __future__ import annotations


from ...measure.validity import constraint_cells
from ..markup import html_table, markdown_table

HEADER = ["test", "constraint", "valid (ref / SD)", "constrained speedup", "constrained acceptance", "grammar-rejected"]


def _rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("constraint")]


def constrained_cells(row: dict) -> list[str]:
    cells = constraint_cells(row["constraint"])
    return [row["test"], *(cells[h] for h in HEADER[1:-1]), row["constraint"]["grammar_rejected_drafts"]]


def constrained_markdown(rows: list[dict], escape) -> list[str]:
    constrained = _rows(rows)
    if not constrained:
        return []
    out = [
        "**Constrained outputs** (every output checked against its constraint on both sides; "
        "'free': the same prompts unconstrained):",
        "",
    ]
    return out + markdown_table(HEADER, (constrained_cells(r) for r in constrained), escape) + [""]


def constrained_section(rows: list[dict]) -> list[str]:
    """report.html's section (empty without constrained traffic)."""
    constrained = _rows(rows)
    if not constrained:
        return []
    table = html_table(HEADER, (constrained_cells(r) for r in constrained))
    return ['<section id="constrained">', "<h2>Constrained outputs</h2>", *table, "</section>"]
