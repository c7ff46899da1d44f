"""One result row's cells as the terminal table, the Markdown summary and report.html show them."""

from __future__ import annotations


from ...formatting import NOTHING
from ...analysis.theory import falls_short
from ...engines.forced_acceptance import forced_acceptance
from ...engines.server_spec import MarkerError


UNAVAILABLE = "unavailable"


def _cell(row, name: str, spec: str, suffix: str = "") -> str:
    """A figure, "unavailable" when it could not be measured, "–" when nothing was measured at all."""
    if row.get(name) is None:
        return UNAVAILABLE if name in (row.get("unavailable") or {}) else NOTHING
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
        row["workload"] or NOTHING,
        row["access_pattern"] or NOTHING,
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
        row.get("runs") or NOTHING,
        row["outcome"],
    )


# The terminal's table: what a reader needs to see at a glance on a terminal of 120 columns; the full table
# (TABLE_HEADER) is in summary.md, report.html and results.json, and on the terminal with -v.
COMPACT_HEADER = ("test", "SD", "workload", "pattern", "speedup", "accept", "baseline", "runs", "outcome")
# Cut when a row is too wide (cells end in "…"): the names, never the figures; first down to widths that keep
# a test's name readable on 120 columns, then, on a narrower terminal, further.
# The baseline column is never cut below "partly compared": its words are the verdict.
_SHRINKABLE = ({0: 20, 1: 10, 2: 9, 3: 10, 6: 15, 7: 10}, {0: 12, 1: 8, 2: 8, 3: 8, 6: 15, 7: 9})
TERMINAL_WIDTH = 120  # when the terminal's width is not known (a CI log)


def compact_config(row) -> str:
    """The SD column of the terminal's table: method and k, and the engine where it is not vLLM."""
    method = row.get("method") or "no SD"
    text = f"{method} k={row['k']}" if row.get("k") is not None else method
    try:
        forced = forced_acceptance(row.get("speculative_config") or None)
    except MarkerError:  # a row merged from elsewhere with a config this plugin would refuse: no label
        forced = None
    if forced is not None:  # the figures are the engine's machinery at that acceptance, not the draft's
        text += f" forced {forced.length:g}"
    engine = row.get("engine")
    return text + (f" on {engine}" if engine and engine != "vllm" else "")


def compact_cells(row) -> tuple[str, ...]:
    return (
        row["test"].rsplit("::", 1)[-1],
        compact_config(row),
        row["workload"] or NOTHING,
        row["access_pattern"] or NOTHING,
        _speedup_text(row),
        _cell(row, "acceptance_rate", ".0%"),
        row["regression"],
        row.get("runs") or NOTHING,
        row["outcome"],
    )


def fitted(rows: list[list[str]], width: int) -> list[list[str]]:
    """`rows` with the name columns cut (ending in "…") until aligned lines fit in `width`, where they can."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    excess = sum(widths) + 2 * (len(widths) - 1) - width
    for floors in _SHRINKABLE:
        while excess > 0:
            room = {i: widths[i] - floor for i, floor in floors.items() if i < len(widths) and widths[i] > floor}
            if not room:
                break
            widest = max(room, key=lambda i: widths[i])
            others = max((widths[i] for i in room if i != widest), default=0)
            cut = min(excess, room[widest], max(1, widths[widest] - others))
            widths[widest] -= cut
            excess -= cut
    return [[c if len(c) <= w else c[: w - 1] + "…" for c, w in zip(row, widths)] for row in rows]


def aligned(rows: list[list[str]], rule: bool = True) -> list[str]:
    """Text table lines, columns padded to their widest cell; `rule`: a line of dashes under the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    if rule:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return lines
