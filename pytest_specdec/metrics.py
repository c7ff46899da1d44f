"""Prometheus text from vLLM's ``/metrics`` and the speculative-decoding counters.

SD metrics are counters: what a run did is the difference between a scrape
before and one after, for one model only (a server can serve several, and
other tests may share it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_SAMPLE_RE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$"
)
_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}

SD_PREFIX = "vllm:spec_decode_"


class MetricsParseError(ValueError):
    """A line of Prometheus text that is not a sample."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


def _unescape(value: str) -> str:
    return re.sub(r'\\[\\"n]', lambda m: _ESCAPES[m.group(0)], value)


def parse_prometheus(text: str) -> list[Sample]:
    """Parse the Prometheus text exposition format (comments skipped)."""
    samples = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE_RE.match(line)
        if match is None:
            raise MetricsParseError(f"line {number}: not a Prometheus sample: {raw!r}")
        labels = []
        label_text = match.group("labels") or ""
        pos = 0
        while pos < len(label_text):
            label = _LABEL_RE.match(label_text, pos)
            if label is None:
                raise MetricsParseError(f"line {number}: bad labels in {raw!r}")
            labels.append((label.group(1), _unescape(label.group(2))))
            pos = label.end()
        try:
            value = float(match.group("value"))
        except ValueError:
            raise MetricsParseError(f"line {number}: bad value in {raw!r}") from None
        samples.append(Sample(match.group("name"), tuple(sorted(labels)), value))
    return samples


@dataclass(frozen=True)
class SpecDecodeCounters:
    """The four SD counters of one model at one moment (or a difference of two)."""

    num_drafts: float = 0.0
    num_draft_tokens: float = 0.0
    num_accepted_tokens: float = 0.0
    accepted_per_position: dict[int, float] = field(default_factory=dict)
    present: bool = True  # False when the server exposes no SD counters at all

    def __sub__(self, before: "SpecDecodeCounters") -> "SpecDecodeCounters":
        positions = set(self.accepted_per_position) | set(before.accepted_per_position)
        return SpecDecodeCounters(
            num_drafts=self.num_drafts - before.num_drafts,
            num_draft_tokens=self.num_draft_tokens - before.num_draft_tokens,
            num_accepted_tokens=self.num_accepted_tokens - before.num_accepted_tokens,
            accepted_per_position={
                p: self.accepted_per_position.get(p, 0.0) - before.accepted_per_position.get(p, 0.0)
                for p in sorted(positions)
            },
            present=self.present and before.present,
        )

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted tokens, a fraction; NaN when nothing was drafted."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else math.nan

    @property
    def acceptance_length(self) -> float:
        """1 + accepted / drafts: tokens produced per target forward pass."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else math.nan

    @property
    def per_position_rate(self) -> list[float]:
        if not self.num_drafts:
            return [math.nan for _ in self.accepted_per_position]
        return [self.accepted_per_position[p] / self.num_drafts for p in sorted(self.accepted_per_position)]


_COUNTERS = {
    SD_PREFIX + "num_drafts_total": "num_drafts",
    SD_PREFIX + "num_draft_tokens_total": "num_draft_tokens",
    SD_PREFIX + "num_accepted_tokens_total": "num_accepted_tokens",
}
_PER_POSITION = SD_PREFIX + "num_accepted_tokens_per_pos_total"


def spec_decode_counters(samples: list[Sample], model_name: str) -> SpecDecodeCounters:
    """Sum the SD counters of `model_name` over engines; `present=False` if none exist."""
    totals = {attr: 0.0 for attr in _COUNTERS.values()}
    per_position: dict[int, float] = {}
    seen = False
    for sample in samples:
        if sample.label("model_name") != model_name:
            continue
        if sample.name in _COUNTERS:
            totals[_COUNTERS[sample.name]] += sample.value
            seen = True
        elif sample.name == _PER_POSITION:
            position = int(sample.label("position") or 0)
            per_position[position] = per_position.get(position, 0.0) + sample.value
            seen = True
    return SpecDecodeCounters(accepted_per_position=dict(sorted(per_position.items())), present=seen, **totals)
