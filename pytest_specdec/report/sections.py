"""The Markdown summary's sections beyond the table.

Capacity, SLOs, theory, per-request acceptance, fairness and why SD did not pay.
"""

from __future__ import annotations

from ..measure.mechanism import describe_mechanism
from .row.cells import _cell, _speedup_text, _best_k_text, below_theory
from ..formatting import NOTHING, figure


def sweep_crossover(group: list[dict]):
    """Where a sweep's throughput speedup crosses 1 (`load.crossover`), from its rows."""
    import statistics

    from ..load.crossover import crossover

    by_level: dict[int, list[float]] = {}
    for r in group:  # several rows may share a level (other tests of the same config): their median
        if r["speedup_output_throughput"] is not None:
            by_level.setdefault(r["max_concurrency"], []).append(r["speedup_output_throughput"])
        else:
            by_level.setdefault(r["max_concurrency"], [])
    return crossover(
        [(level, statistics.median(values) if values else float("nan")) for level, values in by_level.items()]
    )


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
        lines.append(
            f"{r['test'].rsplit('::', 1)[-1]} [{r['config']}] p{info['percentile']:g} {slo}: reference "
            f"{_capacity_text(info['reference'], unit)}, SD {_capacity_text(info['speculative'], unit)}; "
            f"ratio {ratio}" + (f" ({info['note']})" if info.get("note") else "")
        )
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
        out += [
            "**Goodput** (requests per second that met every SLO, as `vllm bench serve --goodput` counts them, "
            "and their output tokens per second):",
            "",
            "| test | SLO (ms) | reference req/s | SD req/s | reference tok/s | SD tok/s | ratio |",
            "|---|---|---|---|---|---|---|",
        ]
        out += [
            f"| {escape(r['test'])} | {_slo_text(r)} | {figure(r['reference_request_goodput'], '.3f')} | "
            f"{figure(r['speculative_request_goodput'], '.3f')} | {figure(r.get('reference_output_goodput'), '.1f')} | "
            f"{figure(r.get('speculative_output_goodput'), '.1f')} | {_cell(r, 'goodput_ratio', '.2f', 'x')} |"
            for r in with_goodput
        ] + [""]
    searched = [r for r in rows if r.get("capacity")]
    if searched:
        out += [
            "**SLO capacity** (the highest load at which every SLO percentile held; a bounded search per side):",
            "",
            "| test | SLO | reference | SD | ratio | USD per 1M tokens at capacity, reference / SD |",
            "|---|---|---|---|---|---|",
        ]
        for r in searched:
            info = r["capacity"]
            unit = "req/s" if info["over"] == "request_rate" else "concurrent"
            cost = (
                f"{figure(r['reference_usd_per_1m_tokens'], '.3f')} / {figure(r['speculative_usd_per_1m_tokens'], '.3f')}"
                if r.get("speculative_usd_per_1m_tokens") is not None
                else NOTHING
            )
            out.append(
                f"| {escape(r['test'])} | p{info['percentile']:g} {_slo_text(r)} | "
                f"{_capacity_text(info['reference'], unit)} | {_capacity_text(info['speculative'], unit)} | "
                f"{_ratio_cell(r)}{' (' + info['note'] + ')' if info.get('note') else ''}"
                f" | {cost} |"
            )
        out.append("")
    return out


def _slo_text(row: dict) -> str:
    return ", ".join(f"{key} {value:g}" for key, value in row["slo"].items())


def theory_section(rows: list[dict], escape) -> list[str]:
    """The expected speedups' inputs (c and where it came from, undrafted steps, break-even) and which fell short."""
    with_theory = [r for r in rows if r.get("theory") and r.get("acceptance_length") is not None]
    if not with_theory:
        return []
    out = [
        "**Theory** (Leviathan et al. with the run's own c; SD pays when L > 1 + k c):",
        "",
        "| test | c | c from | undrafted per drafted step | break-even L | L | expected (decode) | TPOT speedup "
        "| below theory |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in with_theory:
        info, short = r["theory"], below_theory(r)
        verdict = (
            NOTHING
            if short is None
            else (
                f"yes (beyond the {info['shortfall_margin']:.0%} margin, {escape(info['shortfall_margin_from'])})"
                if short
                else "no"
            )
        )
        note = f"{r.get('cost_ratio_source') or '–'}" + (
            f": {escape(info['cost_ratio_note'])}" if info.get("cost_ratio_note") else ""
        )
        out.append(
            f"| {escape(r['test'])} | {figure(r.get('cost_ratio'), '.3g')} | {note} | "
            f"{figure(info.get('undrafted_per_drafted'), '.2f', missing='unknown')} | "
            f"{figure(info.get('break_even_length'), '.3f')} | {figure(r['acceptance_length'], '.2f')} | "
            f"{_cell(r, 'expected_speedup', '.2f', 'x')} | {_speedup_text(r, 'speedup_median_tpot')} | {verdict} |"
        )
    return out + [""]


def per_request_section(rows: list[dict], escape) -> list[str]:
    """Per-request acceptance, the best draft length and the oracle bound, beside measured and expected."""
    analysed = [r for r in rows if (r.get("per_request") or {}).get("source")]
    if not analysed:
        return []
    out = [
        "**Inside the acceptance numbers** (per-step data from the server's per-request metrics, or "
        "*estimated* from the tokens of each streamed chunk; length = tokens per drafted step):",
        "",
        "| test | per-step data | request length p5 / p25 / p50 / p75 / p95 | predicted speedup by k | best k "
        "| measured | expected | oracle | oracle gap |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in analysed:
        info = r["per_request"]
        lengths = info["request_acceptance_length"]
        spread = " / ".join(figure(lengths.get(p), ".2f") for p in ("p5", "p25", "p50", "p75", "p95"))
        predicted = ", ".join(f"{k}: {figure(v, '.2f')}x" for k, v in info["predictions"].items()) or NOTHING
        source = "server" if info["source"] == "server" else f"*{info['source']}*"
        out.append(
            f"| {escape(r['test'])} | {source} ({lengths['count']} requests) | {spread} | {predicted} | "
            f"{_best_k_text(r)} | {_speedup_text(r)} | {_cell(r, 'expected_speedup', '.2f', 'x')} | "
            f"{_cell(r, 'oracle_speedup', '.2f', 'x')} | {_oracle_gap(r)} |"
        )
    out += [
        "",
        "predicted: from this run at k, accepted spans cut at each k' (a step that accepted all k continues "
        "its span), each step costed by a fixed and a per-token part over the plain step (one k cannot split "
        "them: the per-token share is assumed, and said, unless runs at other k fitted both); oracle "
        "(`oracle_speedup`): each step proposing exactly what it accepted; from a run at k=20 it is the oracle "
        "of the study \"Speculative Decoding: Performance or Illusion?\" (Sec. 8.1, Fig. 9), from a smaller k "
        "the oracle at k, spans cut at k; oracle gap: how much faster the oracle is "
        "than the measured run (what a better draft length policy could still gain). See "
        "docs/acceptance.md, \"Inside the acceptance numbers\".",
        "",
    ]
    return out


def _oracle_gap(row) -> str:
    measured, oracle = row.get("speedup_output_throughput"), row.get("oracle_speedup")
    if measured is None or oracle is None or measured <= 0:
        return NOTHING
    return f"{oracle / measured - 1:+.0%}"


def fairness_lines(rows: list[dict]) -> list[str]:
    """One line per fairness flag of each row (measure.fairness, analysis.drift), for the terminal and summary.md."""
    return (
        [
            f"{r['test']} ({_speedup_text(r)}): {flag.get('describe') or flag.get('message')}"
            for r in rows
            for flag in r.get("fairness_flags") or []
        ]
        + [
            f"{r['test']}: acceptance not comparable with vLLM's: {r['acceptance_note']}"
            for r in rows
            if r.get("acceptance_note")
        ]
        + sd_cost_lines(rows)
    )


def sd_cost_lines(rows: list[dict]) -> list[str]:
    """What the engine turned off because of the method (SD's cost, compared, not a flag) and the mechanism
    figure where a test asked for it (measure.mechanism), one line each."""
    lines = [
        f"{r['test']} ({_speedup_text(r)}): SD's own cost, compared: {cost.get('describe') or cost.get('cost')}"
        for r in rows
        for cost in r.get("sd_costs") or []
    ]
    return lines + [
        f"{r['test']}: {describe_mechanism(r['mechanism'], r.get('speedup_output_throughput'))}"
        for r in rows
        if r.get("mechanism")
    ]


def did_not_pay(rows: list[dict]) -> list[dict]:
    """The rows where SD did not pay: a speedup under 1, or a client-bound run."""
    return [
        r
        for r in rows
        if (r.get("speedup_output_throughput") is not None and r["speedup_output_throughput"] < 1.0)
        or r.get("client_bound")
    ]


def draft_length_advice(rows: list[dict]) -> list[tuple[dict, dict]]:
    """(row, its acceptance_collapse cause) for the rows where SD paid and a shorter k is still expected faster:
    advice that fires whatever the speedup (the rows that did not pay show it among their causes)."""
    lost = {id(r) for r in did_not_pay(rows)}
    return [
        (r, cause)
        for r in rows
        if id(r) not in lost
        for cause in r.get("diagnosis") or []
        if cause.get("name") == "acceptance_collapse"
    ]


def diagnosis_section(rows: list[dict], escape) -> list[str]:
    """Why SD did not pay, for the rows where it did not (speedup under 1 or client-bound), and the draft length
    advice of the rows where it paid."""
    lost, advice = did_not_pay(rows), draft_length_advice(rows)
    out = []
    if lost:
        out += ["**Why SD did not pay** (causes the measured figures point at, each with its number):", ""]
        for r in lost:
            causes = "; ".join(f"{c['name']}: {escape(c['figure'])}" for c in r.get("diagnosis") or [])
            out.append(
                f"- {escape(r['test'])} ({_speedup_text(r)}): {causes or 'no cause found among the measured figures'}"
            )
        out.append("")
    if advice:
        out += ["**Draft length** (SD paid, and a shorter k is expected to pay more):", ""]
        out += [f"- {escape(r['test'])} ({_speedup_text(r)}): {escape(c['figure'])}" for r, c in advice] + [""]
    return out


def _detect_text(found: dict) -> str:
    drop = found.get("smallest_drop")
    if found.get("spread") is None:
        return f"more than {found['tolerance']:.0%} (spread unknown)"
    if drop is None or drop >= 0.95:
        return "none reliably"
    return f">= {drop:.1%} in {found['power']:.0%} of runs"
