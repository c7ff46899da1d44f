"""What each server was doing during a measured run: its Prometheus gauges and counters sampled over time.

SD's costs show on the server before they show in a latency: the draft's weights and KV take cache from the
target (the poor draft on this project's CPU box: a KV cache of 18,304 tokens against the reference's
23,296), so under load SD can queue or preempt where the reference does not.  inference-perf and AIPerf
record a server's metrics during a run for the same reason.  A background thread reads the server's
/metrics every `interval_s` while the run's requests are in flight and keeps, per read, the series each
engine names (`Engine.series_metrics`): KV cache usage, requests running and waiting, preemptions, and the
SD counters (drafted and accepted tokens).  What it costs is kept too: how long each read took, so a
report can say what the sampling itself took from the run.

Nothing here raises on a read: a read that fails is counted and skipped, and a run with no read at all has
its series unavailable, with the reason.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from ..engines.counters import parse_prometheus

# The series a run can have, in the plugin's words; each engine maps them to its own metric names.
SERIES = ("kv_cache_usage", "running", "waiting", "preemptions", "draft_tokens", "accepted_tokens")
FRACTIONS = frozenset({"kv_cache_usage"})  # 0-1 per engine replica: averaged over label sets, not summed
CUMULATIVE = frozenset({"preemptions", "draft_tokens", "accepted_tokens"})  # counters: the run's is a difference
DEFAULT_INTERVAL_S = 0.5


@dataclass
class ServerSeries:
    """One run's samples: `times` in seconds from the first read, `values[name]` one value per time."""

    interval_s: float
    times: list[float] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=dict)
    read_ms: list[float] = field(default_factory=list)  # how long each read took (fetch and parse)
    failed_reads: int = 0
    problem: str | None = None  # why there is no series at all
    missing: tuple[str, ...] = ()  # series its engine names that the server's page did not have

    @classmethod
    def unavailable(cls, problem: str) -> ServerSeries:
        return cls(0.0, problem=problem)

    @property
    def available(self) -> bool:
        return self.problem is None and bool(self.times)

    def summary(self) -> dict:
        """Per run: peak and mean KV usage, peak running and waiting, preemptions during the run, the reads and
        their cost; None for a series the server did not have."""
        if not self.available:
            return {"unavailable": self.problem or "no read of /metrics succeeded during the run"}

        def read(name: str) -> list[float]:
            return [v for v in self.values.get(name, ()) if not math.isnan(v)]

        def peak(name: str) -> float | None:
            return max(read(name)) if read(name) else None

        def mean(name: str) -> float | None:
            return statistics.fmean(read(name)) if read(name) else None

        def during(name: str) -> float | None:
            return read(name)[-1] - read(name)[0] if read(name) else None

        return {
            "samples": len(self.times),
            "interval_s": self.interval_s,
            "kv_cache_usage_peak": peak("kv_cache_usage"),
            "kv_cache_usage_mean": mean("kv_cache_usage"),
            "running_peak": peak("running"),
            "waiting_peak": peak("waiting"),
            "preemptions": during("preemptions"),
            "read_ms_median": statistics.median(self.read_ms),
            "failed_reads": self.failed_reads,
            "missing": list(self.missing),
        }

    def as_dict(self) -> dict:
        """The whole series, for the report's plots (times and values rounded: plots need no more)."""
        if not self.available:
            return {"unavailable": self.problem or "no read of /metrics succeeded during the run"}
        return {
            "times": [round(t, 3) for t in self.times],
            "values": {
                name: [None if math.isnan(v) else round(v, 4) for v in series] for name, series in self.values.items()
            },
        }


def read_series(text: str, names: Mapping[str, str]) -> dict[str, float]:
    """The values of `names` (series -> metric name) on one metrics page: a fraction averaged over its label
    sets (one per engine replica), anything else summed; a series the page lacks is left out."""
    found: dict[str, list[float]] = {}
    wanted = {metric: series for series, metric in names.items()}
    # Only the wanted lines are parsed: vLLM's page is mostly histogram buckets, and this thread shares the
    # interpreter with the load client, whose requests must not wait for a parse.
    prefixes = tuple(wanted)
    lines = [line for line in text.splitlines() if line.startswith(prefixes)]
    for sample in parse_prometheus("\n".join(lines)):
        if sample.name in wanted:
            found.setdefault(wanted[sample.name], []).append(sample.value)
    return {
        series: (statistics.fmean(values) if series in FRACTIONS else sum(values)) for series, values in found.items()
    }


class SeriesSampler:
    """Reads `fetch()` (a metrics page's text) every `interval_s` on a thread of its own, from `start` to `stop`."""

    def __init__(
        self,
        fetch: Callable[[], str],
        names: Mapping[str, str],
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.perf_counter,
    ):
        if interval_s <= 0:
            raise ValueError(f"the series interval must be > 0 s, got {interval_s}")
        self.fetch, self.names, self.interval_s, self.clock = fetch, dict(names), interval_s, clock
        self.series = ServerSeries(interval_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._began = 0.0
        self._seen: set[str] = set()

    def start(self) -> SeriesSampler:
        self._began = self.clock()
        self._read()  # the state before the first request: counters' run totals start from here
        self._thread = threading.Thread(target=self._loop, name="specdec-server-series", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> ServerSeries:
        """The last read (the state after the last reply), then the series."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        series = self.series
        if series.times or not series.failed_reads:  # a page that never answered is not waited on once more
            self._read()
        if not series.times:
            series.problem = f"none of {series.failed_reads} reads of /metrics succeeded during the run"
        series.missing = tuple(name for name in self.names if name not in self._seen)
        # A name its server never reported has nothing to plot or sum: only the list of them stays.
        series.values = {name: v for name, v in series.values.items() if name not in series.missing}
        return series

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read()

    def _read(self) -> None:
        began = self.clock()
        try:
            values = read_series(self.fetch(), self.names)
        except Exception:  # a slow or failing page must not fail the run: the read is counted, not kept
            self.series.failed_reads += 1
            return
        done = self.clock()
        series = self.series
        series.read_ms.append((done - began) * 1000.0)
        series.times.append(began - self._began)
        self._seen.update(values)
        for name in self.names:
            # A series missing from one read (a gauge not yet set) keeps the series aligned with the times.
            series.values.setdefault(name, []).append(values.get(name, float("nan")))
