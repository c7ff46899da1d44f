"""Constrained traffic in summary.md and report.html (a row's ``constraint``, measure.validity): the constraints,
each side's valid outputs, and the constrained figures beside the same prompts' free ones."""

from __future__ import annotations

from html import escape as html_escape

from ...measure.validity import constraint_cells

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
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    return out + ["| " + " | ".join(escape(c) for c in constrained_cells(r)) + " |" for r in constrained] + [""]


def constrained_section(rows: list[dict]) -> list[str]:
    """report.html's section (empty without constrained traffic)."""
    constrained = _rows(rows)
    if not constrained:
        return []
    out = ['<section id="constrained">', "<h2>Constrained outputs</h2>", "<table><thead><tr>"]
    out[-1] += "".join(f"<th>{html_escape(h)}</th>" for h in HEADER) + "</tr></thead><tbody>"
    out += ["<tr>" + "".join(f"<td>{html_escape(c)}</td>" for c in constrained_cells(r)) + "</tr>" for r in constrained]
    return out + ["</tbody></table>", "</section>"]
