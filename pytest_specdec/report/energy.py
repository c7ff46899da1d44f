"""Energy per output token with and without SD (a row's ``energy``, analysis.energy_figures), for summary.md
and report.html: a table where the hardware counted it, one line with the reason where it did not."""

from __future__ import annotations

from html import escape as html_escape
from .markup import html_table, markdown_table

ENERGY_HEADER = ["test", "J per token without SD", "with SD", "SD / reference", "counter"]


def _measured(rows: list[dict]) -> list[dict]:
    return [r for r in rows if (r.get("energy") or {}).get("ratio") is not None]


def _reasons(rows: list[dict]) -> list[str]:
    """The distinct reasons rows have no energy figures (the same machine gives the same one for every row)."""
    return list(
        dict.fromkeys(r["energy"]["unavailable"] for r in rows if r.get("energy") and r["energy"].get("unavailable"))
    )


def energy_cells(row: dict) -> list[str]:
    energy = row["energy"]
    return [
        row["test"],
        f"{energy['reference_j_per_token']:.4g}",
        f"{energy['speculative_j_per_token']:.4g}",
        f"{energy['ratio']:.2f}x",
        energy.get("source") or "",
    ]


def energy_markdown(rows: list[dict], escape) -> list[str]:
    measured, reasons = _measured(rows), _reasons(rows)
    if not measured and not reasons:
        return []
    out = ["**Energy per output token** (the hardware's counters read around each run; above 1x SD spends more):", ""]
    if measured:
        out += markdown_table(ENERGY_HEADER, (energy_cells(r) for r in measured), escape) + [""]
    out += [f"- unavailable: {escape(reason)}" for reason in reasons] + ([""] if reasons else [])
    return out


def energy_section(rows: list[dict]) -> list[str]:
    """report.html's section (empty when no row was measured)."""
    measured, reasons = _measured(rows), _reasons(rows)
    if not measured and not reasons:
        return []
    out = ['<section id="energy">', "<h2>Energy per output token</h2>"]
    if measured:
        out += html_table(ENERGY_HEADER, (energy_cells(r) for r in measured))
    out += [f"<p>unavailable: {html_escape(reason)}</p>" for reason in reasons]
    return out + ["</section>"]
