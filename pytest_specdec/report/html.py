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
import html
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..atomic import write_atomic
from .plots import PlotImage, render_plots
from .tables import UNAVAILABLE, _cell, _equivalence_text, _speedup_text

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
    ("workload", lambda r: r.get("workload"), None),
    ("access pattern", lambda r: r.get("access_pattern"), None),
    ("outcome", lambda r: r.get("outcome"), None),
    ("regression", lambda r: r.get("regression"), None),
    ("throughput speedup (repeat range)", _speedup_text, "speedup_output_throughput"),
    ("expected speedup", lambda r: _cell(r, "expected_speedup", ".2f", "x"), "expected_speedup"),
    ("acceptance rate", lambda r: _cell(r, "acceptance_rate", ".0%"), "acceptance_rate"),
    ("acceptance length", lambda r: _cell(r, "acceptance_length", ".2f"), "acceptance_length"),
    ("match rate", lambda r: _equivalence_text(r) if r.get("match_rate") is not None else _cell(r, "match_rate", ".0%"),
     "match_rate"),
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
  check.textContent = decoded + " of " + images.length + " images shown; " + rows + " result rows.";
});
"""

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1rem 1.25rem;
       color: #1f2328; background: #fff; line-height: 1.4; }
h1 { font-size: 1.5rem; margin-bottom: 0.2rem; }
h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #d0d7de; padding-bottom: 0.2rem; }
h3 { font-size: 1rem; margin-bottom: 0.3rem; }
.meta, .empty, figcaption, #page-check { color: #59636e; font-size: 0.9rem; }
table { border-collapse: collapse; font-size: 0.8rem; }
th, td { border: 1px solid #d0d7de; padding: 0.2rem 0.4rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
tbody tr:nth-child(even) { background: #f9fafb; }
td.num { text-align: right; white-space: nowrap; }
td.test { min-width: 9rem; max-width: 24rem; overflow-wrap: anywhere; font-family: ui-monospace, monospace; }
td.config { min-width: 9rem; max-width: 16rem; overflow-wrap: break-word; }
.wide { overflow-x: auto; }
td.na { color: #8c959f; font-style: italic; }
.outcome-passed { color: #1a7f37; font-weight: 600; }
.outcome-failed, .outcome-error { color: #cf222e; font-weight: 600; }
.outcome-skipped { color: #9a6700; font-weight: 600; }
dl.reasons { margin: 0 0 1rem 0; font-size: 0.85rem; }
dl.reasons dt { font-family: ui-monospace, monospace; margin-top: 0.2rem; }
dl.reasons dd { margin-left: 1.5rem; }
figure { margin: 1rem 0 1.5rem 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #d0d7de; }
"""


def _digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


# Nothing may be fetched; only this page's own style and script run (an injected one would not).
_CSP = f"default-src 'none'; img-src data:; style-src {_digest(_STYLE)}; script-src {_digest(_SCRIPT)}"


def _e(value: Any) -> str:
    """A value as HTML text: escaped, quotes included (it may land in an attribute)."""
    return html.escape("" if value is None else str(value), quote=True)


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
            text = "–" if text is None or text == "" else str(text)
            classes = []
            if header in ("test", "config"):
                classes.append(header)
            elif header == "outcome":
                classes.append(f"outcome-{row.get('outcome')}")
            elif field is not None:
                classes.append("num")
            tip = ""
            if field is not None and text.startswith(UNAVAILABLE):
                classes.append("na")
                tip = f' title="{_e(reasons.get(field))}"' if reasons.get(field) else ""
            cells.append(f'<td class="{_e(" ".join(classes))}"{tip}>{_e(text)}</td>')
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return out


def _not_measured(rows: list[dict]) -> list[str]:
    out = ['<section id="not-measured">', "<h2>Not measured</h2>"]
    listed = [row for row in rows if row.get("unavailable") or row.get("repeats") == 0]
    if not listed:
        out.append('<p class="empty">Every figure of every result was measured.</p>')
    for row in listed:
        out.append(f"<h3>{_e(row.get('test'))}</h3>")
        out.append('<dl class="reasons">')
        if row.get("repeats") == 0:  # a row without figures: the test ended before it measured
            out.append(f"<dt>every figure</dt><dd>the test ended ({_e(row.get('outcome'))}) before measuring</dd>")
        for field, why in (row.get("unavailable") or {}).items():
            out.append(f"<dt>{_e(field)}</dt><dd>{_e(why)}</dd>")
        out.append("</dl>")
    out.append("</section>")
    return out


def _figure(title: str, png: bytes, caption: str | None = None) -> list[str]:
    out = ["<figure>", f"<h3>{_e(title)}</h3>",
           f'<img src="{_data_uri(png)}" alt="{_e(title)}">']
    if caption:
        out.append(f"<figcaption>{_e(caption)}</figcaption>")
    out.append("</figure>")
    return out


def _outcomes(rows: list[dict]) -> str:
    counts = Counter(str(row.get("outcome")) for row in rows)
    parts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
    return f"{len(rows)} result{'s' if len(rows) != 1 else ''}" + (f": {parts}" if parts else "")


def render_html(rows: list[dict], *, title: str, generated_at: str, trends: Sequence[TrendFigure] = (),
                notes: Sequence[str] = (), plots: Sequence[PlotImage] | None = None) -> str:
    """The whole page for `rows` (report rows, as results.json holds them), one string.

    `plots` are the report's figures already drawn (`plots.render_plots`); left out, they are
    drawn here from the rows.  `trends` are shown in a Trends section, `notes` under the title.
    """
    rows = list(rows)
    plots = render_plots(rows) if plots is None else list(plots)
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           f'<meta http-equiv="Content-Security-Policy" content="{_e(_CSP)}">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{_e(title)}</title>", f"<style>{_STYLE}</style>", "</head>", "<body>",
           f"<h1>{_e(title)}</h1>",
           f'<p class="meta">Generated {_e(generated_at)}. {_e(_outcomes(rows))}.</p>']
    if notes:
        out.append('<ul class="notes">' + "".join(f"<li>{_e(note)}</li>" for note in notes) + "</ul>")
    out.append('<section id="results-section">')
    out.append("<h2>Results</h2>")
    if rows:
        out += _table(rows)
    else:
        out.append('<p class="empty">No specdec test ran.</p>')
        out.append('<table id="results"><tbody></tbody></table>')
    out.append("</section>")
    out += _not_measured(rows)
    out += ['<section id="figures">', "<h2>Figures</h2>"]
    if not plots:
        out.append('<p class="empty">No figures: nothing was measured that a figure draws.</p>')
    for plot in plots:
        out += _figure(plot.title, plot.png)
    out.append("</section>")
    if trends:
        out += ['<section id="trends">', "<h2>Trends</h2>"]
        for trend in trends:
            out += _figure(trend.title, trend.png, trend.caption)
        out.append("</section>")
    out += ['<p id="page-check"></p>', f"<script>{_SCRIPT}</script>", "</body>", "</html>"]
    return "\n".join(out) + "\n"


def write_html(path: str | os.PathLike, html_text: str) -> Path:
    """Write the page whole or not at all (`atomic.write_atomic`); returns `path`."""
    return write_atomic(path, html_text)
