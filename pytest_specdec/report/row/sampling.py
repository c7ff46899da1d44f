"""A row's sampling cells: which endpoint the requests went to, how they sampled and stopped, both sides'
output lengths, and the distribution test when the test ran one (`assert_same_distribution`,
verdict.distribution)."""

from __future__ import annotations

import statistics
from typing import Any
from ..markup import html_table, markdown_table


def _lengths(runs) -> dict[str, float] | None:
    lengths = [r.output_tokens for run in runs for r in run.records if r.success]
    if not lengths:
        return None
    return {"mean": statistics.fmean(lengths), "median": float(statistics.median(lengths)), "max": max(lengths)}


def sampling_cells(result: Any) -> dict[str, Any]:
    workload = result.workload if isinstance(result.workload, dict) else {}
    stop = "length" if workload.get("ignore_eos", True) else "natural"
    cells: dict[str, Any] = {
        "sampling": workload.get("sampling") or {"temperature": 0.0},
        "stop": stop,
        "endpoint": workload.get("endpoint") or "completions",
        # Under natural stops each side ends where its model does: SD's lengths beside the reference's say
        # whether the two sides generated the same amount of work (at temperature they need not).
        "output_lengths": {
            "reference": _lengths(result.reference_runs),
            "speculative": _lengths(result.speculative_runs),
        },
        "distribution": None,
    }
    test = getattr(result, "distribution", None)
    if test is not None:
        cells["distribution"] = {
            "passed": test.passed,
            "tables": len(test.tables),
            "untestable": test.untestable,
            "rejected": len(test.rejected),
            "min_p_value": None if test.problem else test.min_p_value,
            "alpha": test.alpha,
            "effect": test.effect,
            "power": test.power,
            "samples_per_side": test.samples_per_side,
            "summary": test.describe(),
        }
    return cells


SAMPLING_HEADER = ["test", "endpoint", "sampling", "stop", "output tokens (reference / SD, mean)", "same distribution"]


def _shown(rows: list[dict]) -> list[dict]:
    # Greedy raw completions to max_tokens are every row's default: the block is for the rows that differ.
    return [
        r
        for r in rows
        if (r.get("sampling") or {}).get("temperature")
        or r.get("stop") == "natural"
        or r.get("distribution")
        or r.get("endpoint", "completions") != "completions"
    ]


def _cells(row: dict) -> list[str]:
    sampling = row.get("sampling") or {}
    how = "greedy" if not sampling.get("temperature") else f"temperature {sampling['temperature']:g}"
    if sampling.get("top_p") not in (None, 1.0):
        how += f", top_p {sampling['top_p']:g}"
    if sampling.get("top_k") is not None:
        how += f", top_k {sampling['top_k']}"
    lengths = row.get("output_lengths") or {}
    ref, sd = lengths.get("reference") or {}, lengths.get("speculative") or {}
    length = f"{ref['mean']:.1f} / {sd['mean']:.1f}" if ref and sd else "unavailable"
    test = row.get("distribution")
    verdict = "not tested" if not test else ("passed" if test["passed"] else "failed") + f": {test['summary']}"
    return [row["test"], row.get("endpoint") or "completions", how, row.get("stop") or "length", length, verdict]


def sampling_markdown(rows: list[dict], escape) -> list[str]:
    shown = _shown(rows)
    if not shown:
        return []
    out = [
        "**Endpoints, sampling and stops** (both sides sent alike; outputs at temperature are tested by distribution):",
        "",
    ]
    return out + markdown_table(SAMPLING_HEADER, (_cells(r) for r in shown), escape) + [""]


def sampling_section(rows: list[dict]) -> list[str]:
    shown = _shown(rows)
    if not shown:
        return []
    table = html_table(SAMPLING_HEADER, (_cells(r) for r in shown))
    return ['<section id="sampling">', "<h2>Endpoints, sampling and stops</h2>", *table, "</section>"]
