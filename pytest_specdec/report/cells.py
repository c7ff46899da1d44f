"""One result row's cells as the terminal table, the Markdown summary and report.html show them."""

from __future__ import annotations


from ..measure.theory import falls_short


UNAVAILABLE = "unavailable"


def _fmt(value, spec: str, missing: str = "–") -> str:
    return missing if value is None else format(value, spec)


def _cell(row, name: str, spec: str, suffix: str = "") -> str:
    """A figure, "unavailable" when it could not be measured, "–" when nothing was measured at all."""
    if row.get(name) is None:
        return UNAVAILABLE if name in (row.get("unavailable") or {}) else "–"
    return format(row[name], spec) + suffix


def _speedup_text(row, name: str = "speedup_output_throughput") -> str:
    if row.get("client_bound") and row.get(name) is None:
        return "client-bound"  # the load generator set the pace: no speedup is claimed
    text = _cell(row, name, ".2f", "x")
    spread = row.get("speedup_range") if name == "speedup_output_throughput" else None
    if spread and row.get(name) is not None:  # with repeats: the run-to-run spread beside the median
        text += f" ({spread[0]:.2f}-{spread[1]:.2f})"
    return text + (" !" if row.get("fairness_flags") else "")


def _best_k_text(row) -> str:
    """The draft length predicted best from the run's per-step data; `~` marks the chunk estimate."""
    text = _cell(row, "best_k", "d")
    return f"~{text}" if row.get("best_k") is not None and row.get("per_step_source") != "server" else text


def _equivalence_text(row) -> str:
    if row["match_rate"] is None:
        return _cell(row, "match_rate", ".0%")
    ties = f" ({row['numerical_ties']} ties)" if row.get("numerical_ties") else ""
    as_text = " as text" if row.get("match_basis") == "text" else ""  # no token ids: near-ties cannot be told
    return f"{row['match_rate']:.0%}{as_text}{ties}"


TABLE_HEADER = (
    "test",
    "SD config",
    "workload",
    "pattern",
    "speedup",
    "expected",
    "c",
    "accept",
    "length",
    "best k",
    "TPOT",
    "TTFT",
    "same output",
    "baseline",
    "runs",
    "outcome",
)


# `cost_ratio_source` in a table cell: where c came from (theory.MEASURED, ...).
_SOURCE_SHORT = {
    "measured": "measured",
    "estimated (parameter ratio)": "params",
    "method default": "default",
    "given": "given",
}


def _cost_ratio_text(row) -> str:
    """c with where it came from: "0.250 measured", "0 default", "0.017 params"."""
    if row.get("cost_ratio") is None:
        return _cell(row, "cost_ratio", "")
    value = f"{row['cost_ratio']:.3g}" if row["cost_ratio"] else "0"
    return f"{value} {_SOURCE_SHORT.get(row.get('cost_ratio_source'), row.get('cost_ratio_source') or '')}".rstrip()


def below_theory(row) -> bool | None:
    """The decode speedup (median TPOT) short of the decode-only expected speedup (`theory.falls_short`)."""
    return falls_short(
        row.get("speedup_median_tpot"), row.get("expected_speedup"), (row.get("theory") or {}).get("shortfall_margin")
    )


def table_cells(row) -> tuple[str, ...]:
    return (
        row["test"].rsplit("::", 1)[-1],
        row["config"],
        row["workload"] or "–",
        row["access_pattern"] or "–",
        _speedup_text(row),
        _cell(row, "expected_speedup", ".2f", "x"),
        _cost_ratio_text(row),
        _cell(row, "acceptance_rate", ".0%"),
        _cell(row, "acceptance_length", ".2f"),
        _best_k_text(row),
        _speedup_text(row, "speedup_median_tpot"),
        _speedup_text(row, "speedup_median_ttft"),
        _equivalence_text(row),
        row["regression"],
        row.get("runs") or "–",
        row["outcome"],
    )


def aligned(rows: list[list[str]], rule: bool = True) -> list[str]:
    """Text table lines, columns padded to their widest cell; `rule`: a line of dashes under the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    if rule:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return lines
