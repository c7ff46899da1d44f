"""A table as summary.md and report.html write it: the one place either markup is spelled."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from html import escape as html_escape


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]], escape: Callable[[str], str]) -> list[str]:
    """A Markdown table: the header, its rule, one line a row (each cell passed through `escape`)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(escape(cell) for cell in row) + " |" for row in rows]


def html_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """An HTML table, every header and cell escaped: its opening with the header, one line a row, its end."""
    head = "<table><thead><tr>" + "".join(f"<th>{html_escape(h)}</th>" for h in header) + "</tr></thead><tbody>"
    body = ["<tr>" + "".join(f"<td>{html_escape(cell)}</td>" for cell in row) + "</tr>" for row in rows]
    return [head, *body, "</tbody></table>"]
