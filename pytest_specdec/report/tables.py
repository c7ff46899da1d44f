"""Result rows as text: the terminal table, the Markdown summary and CSV."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Iterable

from .rows import CSV_COLUMNS


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
    return _cell(row, name, ".2f", "x")


def _equivalence_text(row) -> str:
    if row["match_rate"] is None:
        return _cell(row, "match_rate", ".0%")
    ties = f" ({row['numerical_ties']} ties)" if row.get("numerical_ties") else ""
    return f"{row['match_rate']:.0%}{ties}"


TABLE_HEADER = ("test", "SD config", "workload", "pattern", "speedup", "expected", "accept", "length",
                "TPOT", "TTFT", "same output", "baseline", "outcome")


def table_cells(row) -> tuple[str, ...]:
    return (
        row["test"].rsplit("::", 1)[-1],
        row["config"],
        row["workload"] or "–",
        row["access_pattern"] or "–",
        _speedup_text(row),
        _cell(row, "expected_speedup", ".2f", "x"),
        _cell(row, "acceptance_rate", ".0%"),
        _cell(row, "acceptance_length", ".2f"),
        _speedup_text(row, "speedup_median_tpot"),
        _speedup_text(row, "speedup_median_ttft"),
        _equivalence_text(row),
        row["regression"],
        row["outcome"],
    )


def terminal_table(rows: list[dict]) -> list[str]:
    """Aligned text lines: one row per test, as the terminal summary prints them."""
    cells = [TABLE_HEADER] + [table_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(TABLE_HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def markdown_summary(rows: list[dict], plots: Iterable[Path] = (), title: str = "pytest-specdec results") -> str:
    """The summary.md document (also what goes to a CI step summary)."""
    from .plots import geometric_mean, sweeps

    escape = lambda text: str(text).replace("|", "\\|")  # noqa: E731 - a table cell must not split
    out = [f"## {title}", ""]
    if not rows:
        return "\n".join(out + ["No specdec test ran.", ""])
    out += ["| " + " | ".join(TABLE_HEADER) + " |", "|" + "---|" * len(TABLE_HEADER)]
    out += ["| " + " | ".join(escape(c) for c in table_cells(r)) + " |" for r in rows]
    out += ["", "speedup: output-token throughput SD / reference; expected: Leviathan et al.'s "
            "(1 - a^(k+1)) / ((1 - a)(k c + 1)) from the measured acceptance length, k and the estimated "
            "draft/target cost ratio c; TPOT/TTFT: speedups of the median (reference / SD, > 1 is faster).", ""]
    slow = [r for r in rows if r["expected_speedup"] and r["speedup_output_throughput"]
            and r["speedup_output_throughput"] < 0.8 * r["expected_speedup"]]
    if slow:
        out += ["**Below theory** (measured under 80% of what acceptance predicts: overheads the formula "
                "does not model, such as drafting on the host, batch effects or a compute-bound target):", ""]
        out += [f"- {r['test']}: {r['speedup_output_throughput']:.2f}x measured vs "
                f"{r['expected_speedup']:.2f}x expected "
                f"(c = {r['cost_ratio']:.3f})" for r in slow] + [""]
    missing = [(r, name, why) for r in rows for name, why in (r.get("unavailable") or {}).items()
               if name != "expected_speedup"]
    if missing:
        out += ["**Unavailable** (not measured, so no check on them can pass):", ""]
        out += [f"- {escape(r['test'])}: {name}: {escape(why)}" for r, name, why in missing] + [""]
    guarded = [(r, name, found) for r in rows for name, found in (r.get("detection") or {}).items()]
    if guarded:
        out += ["**What the baseline gates can detect** (from each baseline's repeat spread; a server's drift "
                "between starts is not in it):", "", "| test | metric | flags drops of | false alarms | repeats "
                "| spread |", "|---|---|---|---|---|---|"]
        out += [f"| {escape(r['test'])} | {name} | {_detect_text(found)} | {_fmt(found['false_alarm_rate'], '.1%')} | "
                f"{found['repeats']} | {_fmt(found['spread'], '.1%')} |" for r, name, found in guarded] + [""]
    priced = [r for r in rows if r["speculative_usd_per_1m_tokens"] is not None]
    if priced:
        out += ["| test | USD per 1M output tokens, reference | with SD |", "|---|---|---|"]
        out += [f"| {escape(r['test'])} | {_fmt(r['reference_usd_per_1m_tokens'], '.3f')} | "
                f"{_fmt(r['speculative_usd_per_1m_tokens'], '.3f')} |" for r in priced] + [""]
    for (config, workload), group in sweeps(rows).items():
        levels = ", ".join(f"{r['max_concurrency']}: {_speedup_text(r)}" for r in group)
        out.append(f"- sweep {escape(config)} on {workload}: geometric-mean speedup "
                   f"{geometric_mean([r['speedup_output_throughput'] for r in group]):.2f}x over concurrency ({levels})")
    out += [f"![{p.stem}]({p.name})" for p in plots]
    return "\n".join(out).rstrip() + "\n"


def _detect_text(found: dict) -> str:
    drop = found.get("smallest_drop")
    if found.get("spread") is None:
        return f"more than {found['tolerance']:.0%} (spread unknown)"
    if drop is None or drop >= 0.95:
        return "none reliably"
    return f">= {drop:.1%} in {found['power']:.0%} of runs"


def csv_text(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        flat = dict(row)
        for side in ("reference", "speculative"):
            for metric, value in row.get(side, {}).items():
                flat[f"{side}_{metric}"] = value
        missing = row.get("unavailable") or {}
        writer.writerow({k: (UNAVAILABLE if k in missing else "") if flat.get(k) is None else flat.get(k)
                         for k in CSV_COLUMNS})
    return buffer.getvalue()


