"""Comments and docstrings say why, not what one box measured once: such figures age without notice and
read as facts about every machine.  They live in docs/benchmarks.md ("Figures the code once quoted") or in
the benchmark script that prints them."""

import io
import re
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "pytest_specdec"
FIGURE = re.compile(r"\d+(\.\d+)?\s?(ms|s\b|%|x\b|tok/s|minutes)")
ON_A_BOX = re.compile(
    r"measured here|here:|\bhere\b.*\d|on (one|a|this) (shared )?(2-core )?box|2-core box|two cores|in CI\b|"
    r"CI-like run|20\d\d-\d\d-\d\d|on the H100|one such host|(on|in) (vLLM's )?(the )?CPU build|came closest|"
    r"differed by|read a\b",
    re.I,
)


def _prose(path: Path):
    """(line number, text) of every comment and docstring line in `path`."""
    for token in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
        if token.type == tokenize.COMMENT or (token.type == tokenize.STRING and token.string.startswith('"""')):
            for offset, line in enumerate(token.string.splitlines()):
                yield token.start[0] + offset, line


def test_no_comment_quotes_a_figure_measured_on_one_box():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in _prose(path)
        if FIGURE.search(line) and ON_A_BOX.search(line)
    ]
    assert not found, "figures measured on one box belong in docs/benchmarks.md:\n" + "\n".join(found)
