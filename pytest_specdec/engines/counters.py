"""Prometheus text from an engine's ``/metrics`` and the speculative-decoding counters.

SD metrics are counters: what a run did is the difference between a scrape
before and one after, for one model only (a server can serve several, and
other tests may share it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .per_request import ACCEPTED, DRAFTED, PER_STEP_ACCEPTED, PROBLEM, STEPS

_SAMPLE_RE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$")
_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _times(created: tuple[tuple[str, float], ...]) -> str:
    return ", ".join(f"{engine}: {when:.0f}" for engine, when in created) or "unknown"


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


class CounterError(RuntimeError):
    """Counter scrapes that cannot be subtracted: a reset, or another process answered."""


@dataclass(frozen=True)
class SpecDecodeCounters:
    """The four SD counters of one model at one moment (or a difference of two).

    `present` is False when the figures are unavailable, and `problem` then
    says why (no counters at that URL, /metrics did not answer, ...): an
    unavailable count is never read as zero.  A scrape also records which
    engines answered and when their counters were created, so a difference
    across a restart or a replica switch is refused (`delta`).
    """

    num_drafts: float = 0.0
    num_draft_tokens: float = 0.0
    num_accepted_tokens: float = 0.0
    accepted_per_position: dict[int, float] = field(default_factory=dict)
    present: bool = True
    problem: str | None = None  # why the counters are unavailable (present=False)
    engines: tuple[str, ...] = ()  # engine labels of the scrape
    created: tuple[tuple[str, float], ...] = ()  # (engine, creation time) where the server exposes it
    # The page did not answer at all (a read that timed out): a run does not wait on it again (measure.measurements).
    timed_out: bool = False

    @classmethod
    def unavailable(cls, problem: str, *, timed_out: bool = False) -> "SpecDecodeCounters":
        return cls(present=False, problem=problem, timed_out=timed_out)

    def _combine(self, other: "SpecDecodeCounters", sign: float) -> "SpecDecodeCounters":
        if not (self.present and other.present):
            return SpecDecodeCounters.unavailable(self.problem or other.problem or "SD counters unavailable")
        positions = set(self.accepted_per_position) | set(other.accepted_per_position)
        return SpecDecodeCounters(
            num_drafts=self.num_drafts + sign * other.num_drafts,
            num_draft_tokens=self.num_draft_tokens + sign * other.num_draft_tokens,
            num_accepted_tokens=self.num_accepted_tokens + sign * other.num_accepted_tokens,
            accepted_per_position={
                p: self.accepted_per_position.get(p, 0.0) + sign * other.accepted_per_position.get(p, 0.0)
                for p in sorted(positions)
            },
        )

    def __sub__(self, before: "SpecDecodeCounters") -> "SpecDecodeCounters":
        """What happened between two scrapes (unchecked; see `delta`)."""
        return self._combine(before, -1.0)

    def __add__(self, other: "SpecDecodeCounters") -> "SpecDecodeCounters":
        """Two runs' deltas together; unavailable if either is."""
        return self._combine(other, 1.0)

    def delta(self, before: "SpecDecodeCounters", where: str) -> "SpecDecodeCounters":
        """``self - before``, checked: both scrapes from the same process, and no counter went down.

        Raises CounterError naming `where` (the endpoint) when the server
        restarted or another replica answered in between; either would make
        the difference plausible garbage.
        """
        if not (self.present and before.present):
            return self - before
        if self.engines != before.engines or (self.created and before.created and self.created != before.created):
            raise CounterError(
                f"{where}: the SD counters before and after the run come from different processes (engines "
                f"{list(before.engines)} created {_times(before.created)}, then {list(self.engines)} created "
                f"{_times(self.created)}): the server restarted, or a load balancer answered from another replica; "
                "measure one replica directly"
            )
        difference = self - before
        fallen = {
            name: value
            for name, value in (
                ("num_drafts", difference.num_drafts),
                ("num_draft_tokens", difference.num_draft_tokens),
                ("num_accepted_tokens", difference.num_accepted_tokens),
                *((f"accepted at position {p}", v) for p, v in difference.accepted_per_position.items()),
            )
            if value < 0
        }
        if fallen:
            detail = ", ".join(f"{name} {value:+g}" for name, value in fallen.items())
            raise CounterError(
                f"{where}: SD counters went backwards during the run ({detail}): the server was "
                "restarted or its counters reset; acceptance from them would be garbage"
            )
        # One process never accepts more than it drafted; counters that say so are summed
        # over something else (several models under one name, a proxy's sums).
        over = (
            [f"{difference.num_accepted_tokens:g} tokens accepted of {difference.num_draft_tokens:g} drafted"]
            if difference.num_accepted_tokens > difference.num_draft_tokens
            else []
        )
        over += [
            f"position {p} accepted {v:g} times in {difference.num_drafts:g} drafts"
            for p, v in difference.accepted_per_position.items()
            if v > difference.num_drafts
        ]
        if over:
            raise CounterError(
                f"{where}: the SD counters are inconsistent ({'; '.join(over)}): they cannot come "
                "from one server drafting for one model; acceptance from them would be garbage"
            )
        return difference

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


# The counters a run's responses add up to, from the one per-request vocabulary (engines.base).
_PER_REQUEST = {STEPS: "num_drafts", DRAFTED: "num_draft_tokens", ACCEPTED: "num_accepted_tokens"}


def counters_from_requests(records, where: str) -> SpecDecodeCounters:
    """A run's SD counters as the sum of its completed requests' own figures (``record.spec_decoding``).

    For an engine whose metrics page holds no run totals (SGLang: windowed
    gauges only), each response's figures are the engine's own count.  One
    completed request without them makes the whole run's counters unavailable,
    naming it: a partial sum would read as a lower acceptance.  Per position
    only where every request gave its per-step acceptances.  An engine that
    counts no steps per request (llama.cpp's timings: drafted and accepted
    only) gives acceptance rates but no acceptance length: the step count is
    NaN, unavailable, never a guess.
    """
    done = [record for record in records if record.success]
    if not done:
        return SpecDecodeCounters.unavailable(f"no request completed at {where}, so none carried SD figures")
    unreadable = [record for record in done if PROBLEM in (record.spec_decoding or {})]
    if unreadable:
        return SpecDecodeCounters.unavailable(
            f"{len(unreadable)} of {len(done)} responses from {where} carried SD figures that cannot be read, "
            f"request {unreadable[0].index} first: {unreadable[0].spec_decoding[PROBLEM]}"
        )
    names = dict(_PER_REQUEST)
    if not any(STEPS in (record.spec_decoding or {}) for record in done):
        del names[STEPS]
    lacking = [
        record.index
        for record in done
        if not all(isinstance((record.spec_decoding or {}).get(name), (int, float)) for name in names)
    ]
    if lacking:
        return SpecDecodeCounters.unavailable(
            f"{len(lacking)} of {len(done)} responses from {where} carried no per-request SD figures "
            f"({', '.join(_PER_REQUEST)}), request {lacking[0]} first: the engine ran without SD, or an older "
            "build names them otherwise"
        )
    totals = {counter: float(sum(record.spec_decoding[name] for record in done)) for name, counter in names.items()}
    totals.setdefault("num_drafts", math.nan)  # no step counts: acceptance length unavailable
    per_position: dict[int, float] = {}
    if all(isinstance(record.spec_decoding.get(PER_STEP_ACCEPTED), list) for record in done):
        for record in done:
            for accepted in record.spec_decoding[PER_STEP_ACCEPTED]:
                for position in range(int(accepted)):
                    per_position[position] = per_position.get(position, 0.0) + 1.0
    counters = SpecDecodeCounters(accepted_per_position=dict(sorted(per_position.items())), **totals)
    if counters.num_accepted_tokens > counters.num_draft_tokens:
        raise CounterError(
            f"{where}: the responses accept {counters.num_accepted_tokens:g} of "
            f"{counters.num_draft_tokens:g} drafted tokens: these figures cannot be one run's"
        )
    return counters
