"""One report row: what a test measured, as the terminal table, summary.md, report.html and results.json show it.

`rows` builds a test's rows from its result, `parts` holds the parts a row is made of (labels, the operating
point, capacity and cost, groups, JSON-safe values), `cells` renders a row's cells, `decisions` what it says
about the sequential checks, `sampling` its sampling cells and `constraints` its constrained-traffic figures.
"""
