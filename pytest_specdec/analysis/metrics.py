"""Per-request records -> one run's summary, as `vllm bench serve` computes it."""

from __future__ import annotations

import math
from dataclasses import dataclass

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
    # How long the client held requests back (see client.RequestRecord.dispatch_lag): not
    # a server figure, but a run where it is large measured the client, not the server.
    dispatch_lag: Distribution = Distribution(math.nan, math.nan, math.nan, math.nan, 0)

    def client_bound(self, limit_ms: float) -> bool:
        """The client held requests back past `limit_ms` at p99: this run measured the client, not the server."""
        return math.isfinite(self.dispatch_lag.p99) and self.dispatch_lag.p99 > limit_ms

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
        flat["median_dispatch_lag_ms"] = self.dispatch_lag.median
        flat["p99_dispatch_lag_ms"] = self.dispatch_lag.p99
        return flat


def summarize(records, duration_s: float) -> RunMetrics:
    """Summarise request records (`client.RequestRecord`) of one run.

    As in `vllm bench serve`: throughputs divide by the whole run's duration;
    TPOT = (latency - TTFT) / (output_tokens - 1) for requests with more than
    one output token (none at all when every output came in one streamed
    event, where `vllm bench serve` prints 0); ITL pools every inter-chunk gap
    of every request.
    """
    done = [r for r in records if r.success]
    tpots = [(r.latency - r.ttft) / (r.output_tokens - 1) for r in done if r.output_tokens > 1]
    if not any(tpots):
        # Every output arrived in one event (TTFT = E2E): the time per token was not
        # observed.  vllm bench serve would print 0; a 0 ms TPOT would read as infinitely fast.
        tpots = []
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
        dispatch_lag=Distribution.of([getattr(r, "dispatch_lag", 0.0) for r in records]),
    )
