"""A report row and a parser of the HTML report's page, for the HTML report's tests."""

import io
from html.parser import HTMLParser


def row(test="tests/t.py::test_sd[ngram]", *, outcome="passed", speedup=1.25, per_position=(0.9, 0.6), **extra):
    return {
        "test": test,
        "outcome": outcome,
        "regression": "passed",
        "config": "ngram k=4",
        "engine": "vllm",
        "method": "ngram",
        "k": 4,
        "workload": "code_edit",
        "access_pattern": "throughput_low",
        "max_concurrency": 1,
        "request_rate": "inf",
        "repeats": 3,
        "speedup_output_throughput": speedup,
        "speedup_range": [1.2, 1.31],
        "expected_speedup": 1.6,
        "acceptance_rate": 0.6,
        "acceptance_length": 2.4,
        "match_rate": 1.0,
        "numerical_ties": 0,
        "per_position_acceptance": list(per_position),
        "unavailable": {},
        "reference": {"output_throughput": 100.0},
        "speculative": {"output_throughput": 125.0},
        **extra,
    }


class Page(HTMLParser):
    """The parsed page: every start tag with its attributes, the text of each body row of the results table."""

    def __init__(self, text):
        super().__init__()
        self.tags, self.body_rows, self._in_body, self._cells, self._in_results = [], [], False, None, False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "table":
            self._in_results = dict(attrs).get("id") == "results"
        elif tag == "tbody" and self._in_results:
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self._cells = []
        elif tag == "td" and self._cells is not None:
            self._cells.append("")

    def handle_endtag(self, tag):
        if tag == "tbody":
            self._in_body = False
        elif tag == "tr" and self._cells is not None:
            self.body_rows.append(self._cells)
            self._cells = None

    def handle_data(self, data):
        if self._cells:
            self._cells[-1] += data

    def attrs_of(self, tag):
        return [attrs for name, attrs in self.tags if name == tag]


def tiny_png(colour=(200, 30, 30)):
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (4, 3), colour).save(buffer, format="PNG")
    return buffer.getvalue()
