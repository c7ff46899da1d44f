"""report.html: the session report as one page that needs nothing beside it.

The results table (one line per row, a test that failed before measuring
included), what could not be measured and why, the report's figures and any
trend figures of a results history.  Everything is inline: PNGs as base64
``data:`` URIs, the CSS in a ``<style>``, one small script that says on the
page how many images it shows.  The page fetches nothing (its
Content-Security-Policy forbids it as well), so it can be kept as a CI
artifact, mailed or opened offline and looks the same everywhere.

Every string taken from a row is escaped: a test id is text, never markup.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..atomic import write_atomic
from .html_sections import (
    breakable,
    capacity_section,
    environment_section,
    escape_html as _e,
    failure_sections,
    flag_section,
    forced_sweep_section,
    not_compared_section,
    page_outcome,
    sd_cost_section,
    summary,
    theory_section,
)
from .builds import builds_section
from .frontier_report import frontier_section
from .drift_report import drift_section
from .false_alarms import false_alarm_section
from .row.constraints import constrained_section
from .energy import energy_section
from .series_report import series_section
from .row.sampling import sampling_section
from .plots import PlotImage, render_plots
from .tables import UNAVAILABLE, _cell, _equivalence_text, _ratio_cell, _speedup_text
from ..formatting import NOTHING

HTML_REPORT = "report.html"


@dataclass(frozen=True)
class TrendFigure:
    """A figure of a results history (drawn elsewhere), shown in the Trends section."""

    title: str
    png: bytes
    caption: str


# (header, what the cell shows, the row field whose "not measured" reason the cell's tooltip gives)
COLUMNS = (
    ("test", lambda r: r.get("test"), None),
    ("config", lambda r: r.get("config"), None),
    ("engine", lambda r: r.get("engine"), None),
    ("workload / access pattern", lambda r: f"{r.get('workload') or '–'} / {r.get('access_pattern') or '–'}", None),
    ("outcome", page_outcome, None),
    ("baseline", lambda r: r.get("regression"), None),
    ("throughput speedup (repeat range)", _speedup_text, "speedup_output_throughput"),
    ("TPOT speedup", lambda r: _speedup_text(r, "speedup_median_tpot"), "speedup_median_tpot"),
    ("expected speedup", lambda r: _cell(r, "expected_speedup", ".2f", "x"), "expected_speedup"),
    ("acceptance rate", lambda r: _cell(r, "acceptance_rate", ".0%"), "acceptance_rate"),
    ("acceptance length", lambda r: _cell(r, "acceptance_length", ".2f"), "acceptance_length"),
    (
        "match rate",
        lambda r: _equivalence_text(r) if r.get("match_rate") is not None else _cell(r, "match_rate", ".0%"),
        "match_rate",
    ),
    ("capacity ratio", lambda r: _ratio_cell(r) if r.get("capacity") else "", "capacity_ratio"),
)

# Tells the reader (and a browser test) on the page itself whether every image decoded.
_SCRIPT = """
window.addEventListener("load", function () {
  var images = document.images, decoded = 0;
  for (var i = 0; i < images.length; i++) {
    if (images[i].complete && images[i].naturalWidth > 0) { decoded++; }
  }
  var rows = document.querySelectorAll("#results tbody tr").length;
  var check = document.getElementById("page-check");
  check.setAttribute("data-images", String(images.length));
  check.setAttribute("data-decoded", String(decoded));
  check.setAttribute("data-rows", String(rows));
  // Whether the page reads without scrolling sideways: the page's width and the results table's, each
  // against the width it has.
  var wide = document.querySelector(".wide");
  check.setAttribute("data-page-overflow", String(document.documentElement.scrollWidth - document.documentElement.clientWidth));
  check.setAttribute("data-table-overflow", String(wide ? wide.scrollWidth - wide.clientWidth : 0));
  check.textContent = decoded + " of " + images.length + " images shown; " + rows + " result rows.";
});
"""

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1rem 1.25rem;
       color: #1f2328; background: #fff; line-height: 1.4; max-width: 1240px; }
h1 { font-size: 1.5rem; margin-bottom: 0.2rem; overflow-wrap: break-word; }
h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #d0d7de; padding-bottom: 0.2rem; }
h3 { font-size: 1rem; margin-bottom: 0.3rem; overflow-wrap: break-word; }
.meta, .empty, figcaption, #page-check { color: #59636e; font-size: 0.9rem; }
table { border-collapse: collapse; font-size: 0.75rem; width: 100%; box-sizing: border-box; }
th, td { border: 1px solid #d0d7de; padding: 0.2rem 0.3rem; text-align: left; vertical-align: top;
         overflow-wrap: break-word; }
th { background: #f6f8fa; }
tbody tr:nth-child(even) { background: #f9fafb; }
td.num { text-align: right; }
td.test { min-width: 8rem; max-width: 14rem; font-family: ui-monospace, monospace; }
td.config { min-width: 6rem; max-width: 11rem; }
td.traffic { max-width: 8rem; }
.wide { overflow-x: auto; }
td.na { color: #8c959f; font-style: italic; }
.outcome-passed { color: #1a7f37; font-weight: 600; }
.outcome-failed, .outcome-error, .bad { color: #cf222e; font-weight: 600; }
.outcome-skipped, .outcome-not-compared { color: #9a6700; font-weight: 600; }
a.flag { color: #9a6700; font-weight: 700; text-decoration: none; }
.failure { border-left: 3px solid #cf222e; padding-left: 0.75rem; margin-bottom: 1.5rem; }
pre.message { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 0.75rem; background: #f6f8fa;
              padding: 0.5rem; }
ul.comparison, ul.causes { font-size: 0.85rem; }
dl.reasons, dl.environment { margin: 0 0 1rem 0; font-size: 0.85rem; }
dl.reasons dt, dl.environment dt { font-family: ui-monospace, monospace; margin-top: 0.2rem; overflow-wrap: break-word; }
dl.reasons dd, dl.environment dd { margin-left: 1.5rem; overflow-wrap: break-word; }
figure { margin: 1rem 0 1.5rem 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #d0d7de; }
"""


def _digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


# Nothing may be fetched; only this page's own style and script run (an injected one would not).
_CSP = f"default-src 'none'; img-src data:; style-src {_digest(_STYLE)}; script-src {_digest(_SCRIPT)}"


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _table(rows: list[dict]) -> list[str]:
    out = ['<div class="wide"><table id="results">', "<thead><tr>"]
    out += [f"<th>{_e(header)}</th>" for header, _, _ in COLUMNS]
    out.append("</tr></thead>")
    out.append("<tbody>")
    for row in rows:
        reasons = row.get("unavailable") or {}
        cells = []
        for header, show, field in COLUMNS:
            text = show(row)
            text = NOTHING if text is None or text == "" else str(text)
            classes, flag = [], ""
            if header in ("test", "config"):
                classes.append(header)
            elif header.startswith("workload"):
                classes.append("traffic")
            elif header == "outcome":
                classes.append(
                    "outcome-not-compared" if text != str(row.get("outcome")) else f"outcome-{row.get('outcome')}"
                )
            elif field is not None:
                classes.append("num")
            if field is not None and text.endswith(" !"):  # a flagged speedup: the mark links to its reasons
                text = text[:-2]
                flag = ' <a class="flag" href="#flags" title="flagged: not SD alone (see Flags)">!</a>'
            tip = ""
            if field is not None and text.startswith(UNAVAILABLE):
                classes.append("na")
                tip = f' title="{_e(reasons.get(field))}"' if reasons.get(field) else ""
            shown = breakable(text) if field is None and header not in ("outcome", "baseline") else _e(text)
            cells.append(f'<td class="{_e(" ".join(classes))}"{tip}>{shown}{flag}</td>')
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return out


def _not_measured(rows: list[dict]) -> list[str]:
    """What could not be measured and why, each set of reasons once with every test it applies to."""
    listed = [row for row in rows if row.get("unavailable") or row.get("repeats") == 0]
    if not listed:
        return []
    out = ['<section id="not-measured">', "<h2>Not measured</h2>"]
    groups: dict[tuple, list[str]] = {}
    for row in listed:
        reasons = tuple((row.get("unavailable") or {}).items())
        if row.get("repeats") == 0:  # a row without figures: the test ended before it measured
            reasons = (("every figure", f"the test ended ({row.get('outcome')}) before measuring"),) + reasons
        groups.setdefault(reasons, []).append(str(row.get("test")))
    for reasons, tests in groups.items():
        out.append(f"<h3>{'<br>'.join(breakable(test) for test in tests)}</h3>")
        out.append(
            '<dl class="reasons">'
            + "".join(f"<dt>{_e(field)}</dt><dd>{_e(why)}</dd>" for field, why in reasons)
            + "</dl>"
        )
    out.append("</section>")
    return out


def _figure(title: str, png: bytes, caption: str | None = None) -> list[str]:
    out = ["<figure>", f"<h3>{_e(title)}</h3>", f'<img src="{_data_uri(png)}" alt="{_e(title)}">']
    if caption:
        out.append(f"<figcaption>{_e(caption)}</figcaption>")
    out.append("</figure>")
    return out


def render_html(
    rows: list[dict],
    *,
    title: str,
    generated_at: str,
    trends: Sequence[TrendFigure] = (),
    notes: Sequence[str] = (),
    plots: Sequence[PlotImage] | None = None,
    fingerprint: dict | None = None,
    regressions: Sequence[str] = (),
) -> str:
    """The whole page for `rows` (report rows, as results.json holds them), one string.

    `plots` are the report's figures already drawn (`plots.render_plots`); left out, they are
    drawn here from the rows.  `trends` are shown in a Trends section, right after the summary, which
    names `regressions` (the history's regressed series, in words) first; `notes` go under the title,
    `fingerprint` (the session's environment) into an Environment section.
    """
    rows = list(rows)
    plots = render_plots(rows) if plots is None else list(plots)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_e(_CSP)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="meta">Generated {_e(generated_at)}.</p>',
    ]
    if notes:
        out.append('<ul class="notes">' + "".join(f"<li>{_e(note)}</li>" for note in notes) + "</ul>")
    out += summary(rows, regressions=list(regressions))
    if trends:  # a history page leads with its series
        out += ['<section id="trends">', "<h2>Trends</h2>"]
        for trend in trends:
            out += _figure(trend.title, trend.png, trend.caption)
        out.append("</section>")
    out += failure_sections(rows)
    if rows or not trends:
        out.append('<section id="results-section">')
        out.append("<h2>Results</h2>")
        if rows:
            out += _table(rows)
        else:
            out.append('<p class="empty">No specdec test ran.</p>')
            out.append('<table id="results"><tbody></tbody></table>')
        out.append("</section>")
    out += (
        builds_section(rows)
        + not_compared_section(rows)
        + drift_section(rows)
        + false_alarm_section(rows)
        + flag_section(rows)
        + sd_cost_section(rows)
        + capacity_section(rows)
        + theory_section(rows)
        + forced_sweep_section(rows)
        + frontier_section(rows)
        + energy_section(rows)
        + constrained_section(rows)
        + series_section(rows)
        + sampling_section(rows)
        + _not_measured(rows)
    )
    if plots or rows:
        out += ['<section id="figures">', "<h2>Figures</h2>"]
        if not plots:
            out.append('<p class="empty">No figures: nothing was measured that a figure draws.</p>')
        for plot in plots:
            out += _figure(plot.title, plot.png)
        out.append("</section>")
    out += environment_section(fingerprint)
    out += ['<p id="page-check"></p>', f"<script>{_SCRIPT}</script>", "</body>", "</html>"]
    return "\n".join(out) + "\n"


def write_html(path: str | os.PathLike, html_text: str) -> Path:
    """Write the page whole or not at all (`atomic.write_atomic`); returns `path`."""
    return write_atomic(path, html_text)
