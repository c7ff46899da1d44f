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

    def _combine(self, other: "SpecDecodeCounters", sign: float, present: bool) -> "SpecDecodeCounters":
        positions = set(self.accepted_per_position) | set(other.accepted_per_position)
        return SpecDecodeCounters(
            num_drafts=self.num_drafts + sign * other.num_drafts,
            num_draft_tokens=self.num_draft_tokens + sign * other.num_draft_tokens,
            num_accepted_tokens=self.num_accepted_tokens + sign * other.num_accepted_tokens,
            accepted_per_position={
                p: self.accepted_per_position.get(p, 0.0) + sign * other.accepted_per_position.get(p, 0.0)
                for p in sorted(positions)
            },
            present=present,
        )

    def __sub__(self, before: "SpecDecodeCounters") -> "SpecDecodeCounters":
        """What happened between two scrapes."""
        return self._combine(before, -1.0, self.present and before.present)

    def __add__(self, other: "SpecDecodeCounters") -> "SpecDecodeCounters":
        """Two runs' deltas together (present if either saw counters)."""
        return self._combine(other, 1.0, self.present or other.present)

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


# --- per-request samples -> run summaries, as `vllm bench serve` computes them ---

PERCENTILES = (50, 95, 99)
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
THROUGHPUT_METRICS = ("request_throughput", "output_throughput", "total_token_throughput")


@dataclass(frozen=True)
class Distribution:
    """Summary of one latency metric over a run, in milliseconds."""

    mean: float
    median: float
    p95: float
    p99: float
    count: int

    @classmethod
    def of(cls, seconds) -> "Distribution":
        if len(seconds) == 0:
            return cls(math.nan, math.nan, math.nan, math.nan, 0)
        import numpy as np

        values = np.asarray(seconds, dtype=float) * 1000.0
        return cls(
            mean=float(values.mean()),
            median=float(np.median(values)),
            p95=float(np.percentile(values, 95)),
            p99=float(np.percentile(values, 99)),
            count=int(values.size),
        )


@dataclass(frozen=True)
class RunMetrics:
    """One load run's summary; names follow `vllm bench serve`'s result keys."""

    completed: int
    failed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    e2el: Distribution

    def as_dict(self) -> dict[str, float]:
        """Flat ``{"output_throughput": ..., "median_tpot_ms": ..., "p99_ttft_ms": ...}``."""
        flat: dict[str, float] = {
            "completed": self.completed,
            "failed": self.failed,
            "duration_s": self.duration_s,
            "total_input_tokens": self.total_input_tokens,
            "total_output_tokens": self.total_output_tokens,
        }
        for name in THROUGHPUT_METRICS:
            flat[name] = getattr(self, name)
        for name in LATENCY_METRICS:
            dist = getattr(self, name)
            flat[f"mean_{name}_ms"] = dist.mean
            flat[f"median_{name}_ms"] = dist.median
            flat[f"p95_{name}_ms"] = dist.p95
            flat[f"p99_{name}_ms"] = dist.p99
        return flat


def summarize(records, duration_s: float) -> RunMetrics:
    """Summarise request records (`client.RequestRecord`) of one run.

    As in `vllm bench serve`: throughputs divide by the whole run's duration;
    TPOT = (latency - TTFT) / (output_tokens - 1) for requests with more than
    one output token; ITL pools every inter-chunk gap of every request.
    """
    done = [r for r in records if r.success]
    tpots = [(r.latency - r.ttft) / (r.output_tokens - 1) for r in done if r.output_tokens > 1]
    output_tokens = sum(r.output_tokens for r in done)
    input_tokens = sum(r.prompt_len for r in done)
    per_second = (lambda n: n / duration_s) if duration_s > 0 else (lambda n: math.nan)
    return RunMetrics(
        completed=len(done),
        failed=len(records) - len(done),
        duration_s=duration_s,
        total_input_tokens=input_tokens,
        total_output_tokens=output_tokens,
        request_throughput=per_second(len(done)),
        output_throughput=per_second(output_tokens),
        total_token_throughput=per_second(input_tokens + output_tokens),
        ttft=Distribution.of([r.ttft for r in done]),
        tpot=Distribution.of(tpots),
        itl=Distribution.of([gap for r in done for gap in r.itl]),
        e2el=Distribution.of([r.latency for r in done]),
    )


def higher_is_better(metric: str) -> bool:
    """Throughputs (and speedup, acceptance) go up when things improve; latencies (``*_ms``) go down."""
    if metric.endswith("_ms") or metric in ("duration_s", "failed"):
        return False
    return True
