"""Result rows as text: the terminal table, the Markdown summary and CSV."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Iterable

from ..measure.theory import falls_short
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


TABLE_HEADER = ("test", "SD config", "workload", "pattern", "speedup", "expected", "c", "accept", "length",
                "best k", "TPOT", "TTFT", "same output", "baseline", "outcome")
# `cost_ratio_source` in a table cell: where c came from (theory.MEASURED, ...).
_SOURCE_SHORT = {"measured": "measured", "estimated (parameter ratio)": "params", "method default": "default",
                 "given": "given"}


def _cost_ratio_text(row) -> str:
    """c with where it came from: "0.250 measured", "0 default", "0.017 params"."""
    if row.get("cost_ratio") is None:
        return _cell(row, "cost_ratio", "")
    value = f"{row['cost_ratio']:.3g}" if row["cost_ratio"] else "0"
    return f"{value} {_SOURCE_SHORT.get(row.get('cost_ratio_source'), row.get('cost_ratio_source') or '')}".rstrip()


def below_theory(row) -> bool | None:
    """The decode speedup (median TPOT) short of the decode-only expected speedup (`theory.falls_short`)."""
    return falls_short(row.get("speedup_median_tpot"), row.get("expected_speedup"),
                       (row.get("theory") or {}).get("shortfall_margin"))


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
        row["outcome"],
    )


def terminal_table(rows: list[dict]) -> list[str]:
    """Aligned text lines: one row per test, as the terminal summary prints them."""
    cells = [TABLE_HEADER] + [table_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(TABLE_HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def summary_sections(rows: list[dict], report_message: str | None, written_baselines, stale_baselines,
                     updating: bool, server_history) -> list[tuple[str | None, list[str]]]:
    """The session's terminal summary: (section title or None, lines), in order."""
    sections: list[tuple[str | None, list[str]]] = []
    if rows:
        sections.append(("specdec results", terminal_table(rows)))
    if capacities := capacity_lines(rows):
        sections.append(("specdec SLO capacity", capacities))
    from .group_figures import group_lines

    if grouped := group_lines(rows):
        sections.append(("specdec per category and turn", grouped))
    if unfair := fairness_lines(rows):
        sections.append(("specdec fairness: not SD alone", unfair))
    skipped = [r for r in rows if r.get("regression_not_compared")]
    if skipped:  # a pass that compared less than the test gates says so where everyone looks
        sections.append(("specdec baselines: not compared", [
            f"{r['test']} [{r['regression']}]: " + " / ".join(r["regression_comparison"].splitlines()[:2])
            for r in skipped]))
    if report_message:
        sections.append((None, [f"report: {report_message}"]))
    if written_baselines or stale_baselines:
        verb = ("deleted stale baseline" if updating else
                "stale baseline (no test uses it; --specdec-update-baselines deletes it)")
        sections.append(("specdec baselines", [f"written: {path}" for path in written_baselines]
                         + [f"{verb}: {path}" for path in stale_baselines]))
    if server_history:
        sections.append(("specdec servers", [record.describe() for record in server_history]))
    return sections

def markdown_summary(rows: list[dict], plots: Iterable[Path] = (), title: str = "pytest-specdec results") -> str:
    """The summary.md document (also what goes to a CI step summary)."""
    from ..verdict.metric_names import geometric_mean
    from .group_figures import group_sections
    from .plots import sweeps

    escape = lambda text: str(text).replace("|", "\\|")  # noqa: E731 - a table cell must not split
    out = [f"## {title}", ""]
    if not rows:
        return "\n".join(out + ["No specdec test ran.", ""])
    out += ["| " + " | ".join(TABLE_HEADER) + " |", "|" + "---|" * len(TABLE_HEADER)]
    out += ["| " + " | ".join(escape(c) for c in table_cells(r)) + " |" for r in rows]
    out += ["", "speedup: output-token throughput SD / reference; expected: Leviathan et al.'s speedup of decoding, "
            "(L + u) / (1 + k c + u), from the measured acceptance length L (tokens per drafted step), k, the steps "
            "that drafted nothing per drafted step u, and the draft/target cost ratio c (measured from this run's "
            "step times, else an estimate: the c column says which); compare it with TPOT, not with the "
            "throughput, which includes prefill; TPOT/TTFT: speedups of the median (reference / SD, > 1 is "
            "faster).", ""]
    if unfair := fairness_lines(rows):
        out += ["**Not a fair comparison** (marked ! beside the speedup: engine confounds, cold or drifting servers, speedups physics does not "
                "allow: the speedup measures more than SD; each with its fix):", ""]
        out += [f"- {escape(line)}" for line in unfair] + [""]
    out += theory_section(rows, escape)
    missing = [(r, name, why) for r in rows for name, why in (r.get("unavailable") or {}).items()
               if name != "expected_speedup"]
    if missing:
        out += ["**Unavailable** (not measured, so no check on them can pass):", ""]
        out += [f"- {escape(r['test'])}: {name}: {escape(why)}" for r, name, why in missing] + [""]
    guarded = [(r, name, found) for r in rows for name, found in (r.get("detection") or {}).items()]
    if guarded:
        out += ["**What the baseline gates can detect** (noise per side from the paired repeats' ratios, "
                "server restarts included, or else from the baseline's repeats, without them):", "",
                "| test | metric | flags drops of | false alarms | repeats | noise | from |", "|---|---|---|---|---|---|---|"]
        out += [f"| {escape(r['test'])} | {name} | {_detect_text(found)} | {_fmt(found['false_alarm_rate'], '.1%')} | "
                f"{found['repeats']} | {_fmt(found['spread'], '.1%')} | "
                f"{found.get('noise_from', 'baseline repeats') if found['spread'] is not None else '–'} |"
                for r, name, found in guarded] + [""]
    skipped = [r for r in rows if r.get("regression_not_compared")]
    if skipped:
        out += ["**Not compared against the baseline** (another machine, or a machine probe that moved, than the "
                "one it was recorded on; `not compared` in the baseline column when nothing was):", ""]
        out += [f"- {escape(r['test'])}: {escape(', '.join(r['regression_not_compared']))} "
                f"({escape(r['regression_comparison'].splitlines()[0])})" for r in skipped] + [""]
    out += per_request_section(rows, escape)
    out += group_sections(rows, escape)
    out += diagnosis_section(rows, escape)
    out += slo_section(rows, escape)
    priced = [r for r in rows if r["speculative_usd_per_1m_tokens"] is not None]
    if priced:
        out += ["**Cost** (priced only at the server's own maximum: a closed loop at saturation, or each side's "
                "SLO capacity; at an offered load below saturation both sides' tok/s is that load, and the cost is "
                "unavailable):", "",
                "| test | operating point | USD per 1M output tokens, reference | with SD |", "|---|---|---|---|"]
        out += [f"| {escape(r['test'])} | {r.get('cost_operating_point') or '–'}: "
                f"{escape(r.get('cost_operating_point_detail') or '')} | {_fmt(r['reference_usd_per_1m_tokens'], '.3f')}"
                f" | {_fmt(r['speculative_usd_per_1m_tokens'], '.3f')} |" for r in priced] + [""]
    for (config, workload), group in sweeps(rows).items():
        levels = ", ".join(f"{r['max_concurrency']}: {_speedup_text(r)}" for r in group)
        out.append(f"- sweep {escape(config)} on {workload}: geometric-mean speedup "
                   f"{geometric_mean([r['speedup_output_throughput'] for r in group]):.2f}x over concurrency ({levels}); "
                   f"{sweep_crossover(group).describe()}")
    out += [f"![{p.stem}]({p.name})" for p in plots]
    return "\n".join(out).rstrip() + "\n"


def sweep_crossover(group: list[dict]):
    """Where a sweep's throughput speedup crosses 1 (`load.capacity.crossover`), from its rows."""
    import statistics

    from ..load.capacity import crossover

    by_level: dict[int, list[float]] = {}
    for r in group:  # several rows may share a level (other tests of the same config): their median
        if r["speedup_output_throughput"] is not None:
            by_level.setdefault(r["max_concurrency"], []).append(r["speedup_output_throughput"])
        else:
            by_level.setdefault(r["max_concurrency"], [])
    return crossover([(level, statistics.median(values) if values else float("nan"))
                      for level, values in by_level.items()])


def capacity_lines(rows: list[dict]) -> list[str]:
    """One line per capacity search, for the terminal: each side's capacity under the SLO, and the ratio."""
    lines = []
    for r in rows:
        info = r.get("capacity")
        if not info:
            continue
        slo = ", ".join(f"{key} {value:g} ms" for key, value in r["slo"].items())
        unit = "req/s" if info["over"] == "request_rate" else "concurrent"
        ratio = _ratio_cell(r)
        lines.append(f"{r['test'].rsplit('::', 1)[-1]} [{r['config']}] p{info['percentile']:g} {slo}: reference "
                     f"{_capacity_text(info['reference'], unit)}, SD {_capacity_text(info['speculative'], unit)}; "
                     f"ratio {ratio}" + (f" ({info['note']})" if info.get("note") else ""))
    return lines


def _ratio_cell(row: dict) -> str:
    """The capacity ratio, or its bound with the direction (a bound is never shown as a value)."""
    if row.get("capacity_ratio_bound") is not None:
        return f"{row['capacity_ratio_bound_direction']} {row['capacity_ratio_bound']:.2f}x"
    return _cell(row, "capacity_ratio", ".2f", "x")


def _capacity_text(capacity: dict, unit: str) -> str:
    value = capacity.get("capacity")
    if value is None:
        return "not reached"
    bound = ">= " if capacity.get("status") == "above_highest_probe" else ""
    return f"{bound}{value:.3g} {unit} ({len(capacity.get('probes') or [])} probes)"


def slo_section(rows: list[dict], escape) -> list[str]:
    """Goodput on runs with SLOs, and SLO capacity searches."""
    out = []
    with_goodput = [r for r in rows if r.get("slo") and not r.get("capacity")]
    if with_goodput:
        out += ["**Goodput** (requests per second that met every SLO, as `vllm bench serve --goodput` counts them, "
                "and their output tokens per second):", "",
                "| test | SLO (ms) | reference req/s | SD req/s | reference tok/s | SD tok/s | ratio |",
                "|---|---|---|---|---|---|---|"]
        out += [f"| {escape(r['test'])} | {_slo_text(r)} | {_fmt(r['reference_request_goodput'], '.3f')} | "
                f"{_fmt(r['speculative_request_goodput'], '.3f')} | {_fmt(r.get('reference_output_goodput'), '.1f')} | "
                f"{_fmt(r.get('speculative_output_goodput'), '.1f')} | {_cell(r, 'goodput_ratio', '.2f', 'x')} |"
                for r in with_goodput] + [""]
    searched = [r for r in rows if r.get("capacity")]
    if searched:
        out += ["**SLO capacity** (the highest load at which every SLO percentile held; a bounded search per side):",
                "", "| test | SLO | reference | SD | ratio | USD per 1M tokens at capacity, reference / SD |",
                "|---|---|---|---|---|---|"]
        for r in searched:
            info = r["capacity"]
            unit = "req/s" if info["over"] == "request_rate" else "concurrent"
            cost = (f"{_fmt(r['reference_usd_per_1m_tokens'], '.3f')} / {_fmt(r['speculative_usd_per_1m_tokens'], '.3f')}"
                    if r.get("speculative_usd_per_1m_tokens") is not None else "–")
            out.append(f"| {escape(r['test'])} | p{info['percentile']:g} {_slo_text(r)} | "
                       f"{_capacity_text(info['reference'], unit)} | {_capacity_text(info['speculative'], unit)} | "
                       f"{_ratio_cell(r)}{' (' + info['note'] + ')' if info.get('note') else ''}"
                       f" | {cost} |")
        out.append("")
    return out


def _slo_text(row: dict) -> str:
    return ", ".join(f"{key} {value:g}" for key, value in row["slo"].items())


def theory_section(rows: list[dict], escape) -> list[str]:
    """The expected speedups' inputs (c and where it came from, undrafted steps, break-even) and which fell short."""
    with_theory = [r for r in rows if r.get("theory") and r.get("acceptance_length") is not None]
    if not with_theory:
        return []
    out = ["**Theory** (Leviathan et al. with the run's own c; SD pays when L > 1 + k c):", "",
           "| test | c | c from | undrafted per drafted step | break-even L | L | expected (decode) | TPOT speedup "
           "| below theory |", "|---|---|---|---|---|---|---|---|---|"]
    for r in with_theory:
        info, short = r["theory"], below_theory(r)
        verdict = "–" if short is None else (f"yes (beyond the {info['shortfall_margin']:.0%} margin, "
                                             f"{escape(info['shortfall_margin_from'])})" if short else "no")
        note = f"{r.get('cost_ratio_source') or '–'}" + (f": {escape(info['cost_ratio_note'])}"
                                                          if info.get("cost_ratio_note") else "")
        out.append(f"| {escape(r['test'])} | {_fmt(r.get('cost_ratio'), '.3g')} | {note} | "
                   f"{_fmt(info.get('undrafted_per_drafted'), '.2f', 'unknown')} | "
                   f"{_fmt(info.get('break_even_length'), '.3f')} | {_fmt(r['acceptance_length'], '.2f')} | "
                   f"{_cell(r, 'expected_speedup', '.2f', 'x')} | {_speedup_text(r, 'speedup_median_tpot')} | {verdict} |")
    return out + [""]


def per_request_section(rows: list[dict], escape) -> list[str]:
    """Per-request acceptance, the best draft length and the oracle bound, beside measured and expected."""
    analysed = [r for r in rows if (r.get("per_request") or {}).get("source")]
    if not analysed:
        return []
    out = ["**Inside the acceptance numbers** (per-step data from the server's per-request metrics, or "
           "*estimated* from the tokens of each streamed chunk; length = tokens per drafted step):", "",
           "| test | per-step data | request length p5 / p25 / p50 / p75 / p95 | predicted speedup by k | best k "
           "| measured | expected | oracle at k | oracle gap |", "|---|---|---|---|---|---|---|---|---|"]
    for r in analysed:
        info = r["per_request"]
        lengths = info["request_acceptance_length"]
        spread = " / ".join(_fmt(lengths.get(p), ".2f") for p in ("p5", "p25", "p50", "p75", "p95"))
        predicted = ", ".join(f"{k}: {_fmt(v, '.2f')}x" for k, v in info["predictions"].items()) or "–"
        source = "server" if info["source"] == "server" else f"*{info['source']}*"
        out.append(f"| {escape(r['test'])} | {source} ({lengths['count']} requests) | {spread} | {predicted} | "
                   f"{_best_k_text(r)} | {_speedup_text(r)} | {_cell(r, 'expected_speedup', '.2f', 'x')} | "
                   f"{_cell(r, 'oracle_speedup', '.2f', 'x')} | {_oracle_gap(r)} |")
    out += ["", "predicted: from this run at k, each step's accepted count cut at k' and its cost modelled "
            "linear in proposed tokens between a reference step and the measured SD step; oracle at k "
            "(`oracle_speedup`): each step proposing exactly what it accepted, with accepted spans capped at k, so "
            "a lower bound on the oracle of the study \"Speculative Decoding: Performance or Illusion?\" (Sec. "
            "8.1, Fig. 9), whose spans run to 20 proposed tokens; oracle gap: how much faster the oracle at k is "
            "than the measured run (what a better draft length policy could still gain at this k). See "
            "docs/acceptance.md, \"Inside the acceptance numbers\".", ""]
    return out


def _oracle_gap(row) -> str:
    measured, oracle = row.get("speedup_output_throughput"), row.get("oracle_speedup")
    if measured is None or oracle is None or measured <= 0:
        return "–"
    return f"{oracle / measured - 1:+.0%}"


def fairness_lines(rows: list[dict]) -> list[str]:
    """One line per fairness flag of each row (measure.fairness, measure.drift), for the terminal and summary.md."""
    return [f"{r['test']} ({_speedup_text(r)}): {flag.get('describe') or flag.get('message')}"
            for r in rows for flag in r.get("fairness_flags") or []] + [
        f"{r['test']}: acceptance not comparable with vLLM's: {r['acceptance_note']}" for r in rows
        if r.get("acceptance_note")]


def did_not_pay(rows: list[dict]) -> list[dict]:
    """The rows where SD did not pay: a speedup under 1, or a client-bound run."""
    return [r for r in rows if (r.get("speedup_output_throughput") is not None
                                and r["speedup_output_throughput"] < 1.0) or r.get("client_bound")]


def diagnosis_section(rows: list[dict], escape) -> list[str]:
    """Why SD did not pay, for the rows where it did not (speedup under 1 or client-bound)."""
    lost = did_not_pay(rows)
    if not lost:
        return []
    out = ["**Why SD did not pay** (causes the measured figures point at, each with its number):", ""]
    for r in lost:
        causes = "; ".join(f"{c['name']}: {escape(c['figure'])}" for c in r.get("diagnosis") or [])
        out.append(f"- {escape(r['test'])} ({_speedup_text(r)}): {causes or 'no cause found among the measured figures'}")
    return out + [""]


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


