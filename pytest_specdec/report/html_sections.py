"""The parts of report.html that say why: the summary, each failure's comparison, the flags, capacity,
theory and the environment.

Each function takes report rows (as results.json holds them) and returns
HTML lines; `report.html` puts them in order.  Every string taken from a row
is escaped.  The wording of flags, capacity lines and causes is the terminal's
and summary.md's own (`report.tables`), so the three never disagree.
"""

from __future__ import annotations

import html
from collections import Counter
from typing import Any

from ..measure.mechanism import describe_mechanism
from ..formatting import NOTHING
from .forced_plots import forced_sweeps
from .tables import (
    _cell,
    _cost_ratio_text,
    _detect_text,
    _ratio_cell,
    _speedup_text,
    below_theory,
    capacity_lines,
    did_not_pay,
    draft_length_advice,
)

# Outcomes as the page names them: a pass whose baseline check compared nothing is not a plain pass.
NOT_COMPARED = "passed, baseline not compared"
PARTLY_COMPARED = "passed, baseline partly compared"
FLAG_LEGEND = (
    "! beside a speedup: the comparison measured more than SD alone (an engine setting that differs "
    "between the two servers, a side that was cold or drifting, or a speedup faster than the "
    "accepted tokens allow). Each flag below says what it is and how to make the comparison fair."
)
# The fingerprint's fields a reader asks for first, in this order; the rest follow as recorded.
ENVIRONMENT_FIELDS = (
    "engine",
    "engine_version",
    "device_kind",
    "device_name",
    "device_count",
    "driver",
    "torch_version",
    "python",
    "plugin_version",
)


def escape_html(value: Any) -> str:
    """A value as HTML text: escaped, quotes included (it may land in an attribute)."""
    return html.escape("" if value is None else str(value), quote=True)


_e = escape_html


def breakable(text: Any) -> str:
    """Escaped text that a narrow cell may break after "::", "/", "[" and "-" rather than mid-word."""
    out = _e(text)
    for mark in ("::", "/", "[", "-", ","):
        out = out.replace(mark, mark + "<wbr>")
    return out


def page_outcome(row: dict) -> str:
    """The row's outcome as the page shows it: failed, error, passed, or a pass that compared part or none of
    what its baseline check gates."""
    if row.get("outcome") == "passed" and row.get("regression") == "not compared":
        return NOT_COMPARED
    if row.get("outcome") == "passed" and row.get("regression") == "partly compared":
        return PARTLY_COMPARED
    return str(row.get("outcome"))


def failures(rows: list[dict]) -> list[tuple[int, dict]]:
    """(index, row) of each row whose test failed or errored, in table order."""
    return [(i, r) for i, r in enumerate(rows) if r.get("outcome") in ("failed", "error")]


def summary(rows: list[dict], *, regressions: list[str] = ()) -> list[str]:
    """How many passed, failed, were not compared and were flagged, with a link to each failure."""
    out = ['<section id="summary">', "<h2>Summary</h2>"]
    if regressions:
        out.append(
            f'<p class="bad"><strong>{len(regressions)} series regressed</strong> in the history: '
            + "; ".join(_e(text) for text in regressions)
            + ' (<a href="#trends">trends</a>).</p>'
        )
    if not rows:
        out.append('<p class="empty">No session results on this page.</p>')
        out.append("</section>")
        return out
    counts = Counter(page_outcome(r) for r in rows)
    flagged = sum(1 for r in rows if r.get("fairness_flags"))
    unmeasured = sum(1 for r in rows if r.get("unavailable"))
    # Failures first; a pass that compared nothing apart from the passes; then what qualifies the figures.
    items = [f"{counts.pop('failed', 0)} failed"] + [f"{counts.pop(o)} {o}" for o in ("error",) if o in counts]
    items += [f"{counts.pop('passed', 0)} passed"]
    if NOT_COMPARED in counts:
        items.append(f"{counts.pop(NOT_COMPARED)} passed without comparing their baseline")
    if PARTLY_COMPARED in counts:
        items.append(
            f'{counts.pop(PARTLY_COMPARED)} passed comparing only part of their baseline <a href="#not-compared">'
            "(what was not)</a>"
        )
    items += [f"{n} {outcome}" for outcome, n in sorted(counts.items())]
    items += [
        f'{flagged} flagged <a href="#flags">(!)</a>' if flagged else "0 flagged",
        f"{unmeasured} with figures not measured",
    ]
    out.append(f'<p class="counts">{len(rows)} result{"s" if len(rows) != 1 else ""}: ' + ", ".join(items) + ".</p>")
    failed = failures(rows)
    if failed:
        out.append(
            '<ul class="failed-list">'
            + "".join(
                f'<li><a href="#failure-{i}">{breakable(r.get("test"))}</a>: {_e(_first_line(r))}</li>'
                for i, r in failed
            )
            + "</ul>"
        )
    out.append("</section>")
    return out


def _first_line(row: dict) -> str:
    text = row.get("failure") or f"the test ended ({row.get('outcome')}) with no message recorded"
    return text.strip().splitlines()[0][:300] if text.strip() else text


def failure_sections(rows: list[dict]) -> list[str]:
    """Each failure with its message and, where a baseline check failed, its table and comparison."""
    failed = failures(rows)
    if not failed:
        return []
    out = ['<section id="failures">', "<h2>Failures</h2>"]
    for index, row in failed:
        out.append(f'<div class="failure" id="failure-{index}">')
        out.append(f"<h3>{breakable(row.get('test'))}</h3>")
        out.append(
            f'<p class="meta">{_e(row.get("config"))} · {_e(row.get("workload") or NOTHING)} · '
            f'{_e(row.get("access_pattern") or NOTHING)}</p>'
        )
        figures = row.get("regression_figures") or []
        message = row.get("failure") or ""
        if figures and row.get("regression") == "failed":
            out.append(f'<p class="message">{_e(_first_line(row))}</p>')
            out += _figures_table(figures, row.get("detection") or {})
            comparison = row.get("regression_comparison") or ""
            out.append(
                '<ul class="comparison">'
                + "".join(f"<li>{_e(line)}</li>" for line in comparison.splitlines())
                + "</ul>"
            )
        else:
            out.append(f'<pre class="message">{_e(message or _first_line(row))}</pre>')
        out.append("</div>")
    out.append("</section>")
    return out


def _figures_table(figures: list[dict], detection: dict) -> list[str]:
    out = [
        '<table class="figures"><thead><tr><th>figure</th><th>baseline</th><th>measured</th><th>change</th>'
        "<th>tolerance</th><th>95% CI</th><th>detects drops of</th><th>verdict</th></tr></thead><tbody>"
    ]
    for figure in figures:
        found = detection.get(figure["figure"])
        ci = figure.get("ci")
        cells = [
            breakable(figure["figure"]),
            _number(figure.get("baseline")),
            _number(figure.get("measured")),
            NOTHING if figure.get("change") is None else f"{figure['change']:+.1%}",
            NOTHING if figure.get("tolerance") is None else f"{figure['tolerance']:.0%}",
            NOTHING if not ci or None in ci else f"{_number(ci[0])} – {_number(ci[1])}",
            _e(_detect_text(found)) if found else NOTHING,
            ("ok" if figure.get("ok") else '<strong class="bad">FAIL</strong>')
            + (f" ({_e(figure['note'])})" if figure.get("note") else ""),
        ]
        out.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
    out.append("</tbody></table>")
    return out


def _number(value: Any) -> str:
    if value is None:
        return NOTHING
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:.3g}"


def flag_section(rows: list[dict]) -> list[str]:
    """The legend of "!" and every flag and engine confound, by row."""
    flagged = [r for r in rows if r.get("fairness_flags") or r.get("confounds") or r.get("acceptance_note")]
    if not flagged:
        return []
    out = [
        '<section id="flags">',
        "<h2>Flags: not SD alone</h2>",
        f'<p class="legend">{_e(FLAG_LEGEND)}</p>',
        '<dl class="reasons">',
    ]
    for row in flagged:
        out.append(f"<dt>{breakable(row.get('test'))} ({_e(_speedup_text(row))})</dt>")
        for flag in row.get("fairness_flags") or []:
            out.append(f"<dd>{_e(flag.get('describe') or flag.get('message'))}</dd>")
        for confound in row.get("confounds") or []:
            text = confound.get("describe") if isinstance(confound, dict) else confound
            out.append(f"<dd>engine confound, reported and not refused: {_e(text)}</dd>")
        if row.get("acceptance_note"):
            out.append(f"<dd>acceptance not comparable with vLLM's: {_e(row['acceptance_note'])}</dd>")
        if row.get("accepted_flags"):
            out.append(f"<dd>the test accepts: {_e(', '.join(map(str, row['accepted_flags'])))}</dd>")
    out += ["</dl>", "</section>"]
    return out


def sd_cost_section(rows: list[dict]) -> list[str]:
    """What the engine turned off on the SD side because of the method: SD's cost, compared against the reference
    as deployed, with the engine's alternative; and the mechanism figure beside it where a test asked for it."""
    shown = [r for r in rows if r.get("sd_costs") or r.get("mechanism")]
    if not shown:
        return []
    out = [
        '<section id="sd-costs">',
        "<h2>SD's own cost on this engine</h2>",
        '<p class="legend">What the engine itself turned off because of the speculative method (its own log says '
        "so) is part of what the method costs: the speedup is compared against the reference as deployed. "
        "The mechanism figure, where asked for, is SD against a reference on SD's engine path.</p>",
        '<dl class="reasons">',
    ]
    for row in shown:
        out.append(f"<dt>{breakable(row.get('test'))} ({_e(_speedup_text(row))})</dt>")
        for cost in row.get("sd_costs") or []:
            out.append(f"<dd>SD's own cost, compared: {_e(cost.get('describe') or cost.get('cost'))}</dd>")
        if row.get("mechanism"):
            out.append(f"<dd>{_e(describe_mechanism(row['mechanism'], row.get('speedup_output_throughput')))}</dd>")
    out += ["</dl>", "</section>"]
    return out


def capacity_section(rows: list[dict]) -> list[str]:
    """Each SLO-capacity search: both sides' capacity and the ratio (a bound shown as a bound)."""
    searched = [r for r in rows if r.get("capacity")]
    if not searched:
        return []
    out = [
        '<section id="capacity">',
        "<h2>SLO capacity</h2>",
        '<table class="plain"><thead><tr><th>test</th><th>ratio SD / reference</th><th>search</th></tr></thead><tbody>',
    ]
    for row, line in zip(searched, capacity_lines(searched)):
        out.append(f"<tr><td>{breakable(row.get('test'))}</td><td>{_e(_ratio_cell(row))}</td><td>{_e(line)}</td></tr>")
    out += ["</tbody></table>", "</section>"]
    return out


def theory_section(rows: list[dict]) -> list[str]:
    """Expected against measured (TPOT) speedups with the theory's inputs, and why SD did not pay."""
    with_theory = [r for r in rows if r.get("theory") and r.get("acceptance_length") is not None]
    lost = did_not_pay(rows)
    if not with_theory and not lost:
        return []
    out = [
        '<section id="theory">',
        "<h2>Theory</h2>",
        "<p>Expected: Leviathan et al.'s speedup of decoding from the measured acceptance length L, k, the steps "
        "that drafted nothing and the draft/target cost ratio c; compare it with the TPOT speedup, not the "
        "throughput speedup, which includes prefill. SD pays when L &gt; 1 + k c.</p>",
    ]
    if with_theory:
        out.append(
            '<table class="plain"><thead><tr><th>test</th><th>c</th><th>break-even L</th><th>L</th>'
            "<th>expected (decode)</th><th>TPOT speedup</th><th>below theory</th></tr></thead><tbody>"
        )
        for row in with_theory:
            info, short = row["theory"], below_theory(row)
            verdict = NOTHING if short is None else ("yes" if short else "no")
            cells = [
                breakable(row.get("test")),
                _e(_cost_ratio_text(row)),
                _number(info.get("break_even_length")),
                _number(row.get("acceptance_length")),
                _e(_cell(row, "expected_speedup", ".2f", "x")),
                _e(_speedup_text(row, "speedup_median_tpot")),
                verdict,
            ]
            out.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
        out.append("</tbody></table>")
    if lost:
        out.append("<h3>Why SD did not pay</h3>")
        out.append('<ul class="causes">')
        for row in lost:
            causes = "; ".join(f"{c['name']}: {c['figure']}" for c in row.get("diagnosis") or [])
            out.append(
                f"<li>{breakable(row.get('test'))} ({_e(_speedup_text(row))}): "
                f"{_e(causes or 'no cause found among the measured figures')}</li>"
            )
        out.append("</ul>")
    if advice := draft_length_advice(rows):
        out.append("<h3>Draft length</h3>")
        out.append('<ul class="causes">')
        for row, cause in advice:
            out.append(f"<li>{breakable(row.get('test'))} ({_e(_speedup_text(row))}): {_e(cause['figure'])}</li>")
        out.append("</ul>")
    out.append("</section>")
    return out


def forced_sweep_section(rows: list[dict]) -> list[str]:
    """Each forced-acceptance sweep as a table: speedup with its interval, decode speedup and the theory's
    at every length, then the break-even and the step costs (fitted, and the theory's 1 + k*c)."""
    sweeps = forced_sweeps(rows)
    if not sweeps:
        return []
    out = [
        '<section id="forced-acceptance">',
        "<h2>Forced acceptance</h2>",
        "<p>The engine accepted drafts at a set mean length whatever they said: the figures are its speculative "
        "machinery at that acceptance, not the draft's quality (outputs are not the target's). A drafted step "
        "costs the same at every length, so the decode speedup is L / C with C the step cost in plain decode "
        "steps; SD pays where L &gt; C. Intervals: 95%, from the timing spread pooled over the sweep's lengths.</p>",
    ]
    for title, curve in sweeps:
        out.append(f"<h3>{escape_html(title)}</h3>")
        out.append(
            '<table class="plain"><thead><tr><th>forced L</th><th>measured L</th><th>speedup (interval)</th>'
            "<th>decode speedup</th><th>theory (decode)</th></tr></thead><tbody>"
        )
        cost = curve.get("theory_step_cost")
        for point in curve["points"]:
            cells = [
                f"{point['length']:.2f}",
                _number(point.get("measured_length")),
                f"{point['speedup']:.3f}x ({point['low']:.3f}-{point['high']:.3f})",
                f"{point['decode_speedup']:.3f}x",
                f"{point['length'] / cost:.3f}x" if cost else NOTHING,
            ]
            out.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
        out += ["</tbody></table>", f"<p>{escape_html(curve.get('describe'))}</p>"]
    out.append("</section>")
    return out


def environment_section(fingerprint: dict | None) -> list[str]:
    """Where the session ran: engine, hardware, versions, and the machine probe's figures."""
    if not fingerprint:
        return []
    keys = [k for k in ENVIRONMENT_FIELDS if k in fingerprint]
    keys += sorted(
        k for k in fingerprint if k not in ENVIRONMENT_FIELDS and not isinstance(fingerprint[k], (dict, list))
    )
    out = ['<section id="environment">', "<h2>Environment</h2>", '<dl class="environment">']
    out += [f"<dt>{_e(k)}</dt><dd>{_e(fingerprint[k] if fingerprint[k] is not None else '–')}</dd>" for k in keys]
    probe = fingerprint.get("machine_probe")
    if isinstance(probe, dict):
        figures = ", ".join(f"{k} {v:.3g}" for k, v in probe.items() if isinstance(v, (int, float)))
        out.append(f"<dt>machine probe</dt><dd>{_e(figures or 'recorded')}</dd>")
    out += ["</dl>", "</section>"]
    return out


def not_compared_section(rows: list[dict]) -> list[str]:
    """Each baseline check that compared part or none of what it gates: the figures not compared, each with
    why (another machine, a moved probe, a flag that stayed, a figure allowed to be unavailable)."""
    skipped = [r for r in rows if r.get("regression_not_compared")]
    if not skipped:
        return []
    out = [
        '<section id="not-compared">',
        "<h2>Baseline figures not compared</h2>",
        '<p class="legend">A check passes only what it compared: these figures were not, so the test did not '
        "gate them in this session (--specdec-strict fails such a check).</p>",
        '<dl class="reasons">',
    ]
    for row in skipped:
        first = (row.get("regression_comparison") or "").splitlines()[:1]
        out.append(
            f"<dt>{breakable(row.get('test'))} ({_e(row.get('regression'))}){_e(': ' + first[0]) if first else ''}</dt>"
        )
        out += [f"<dd>{_e(metric)}: {_e(why)}</dd>" for metric, why in row["regression_not_compared"].items()]
    out += ["</dl>", "</section>"]
    return out
