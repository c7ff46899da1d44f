"""Over-saturation: a probe whose queue kept growing measured a transient, not a load the server carries.

Above its capacity an open-loop run (requests at a rate, whatever the server
does) builds a queue: requests in flight and time to first token both keep
rising until the arrivals stop. The percentiles of such a run depend on how
long it lasted, not on the load, and a TPOT objective can even hold while
the queue grows (queued requests wait before their first token, not between
tokens). GuideLLM stops a benchmark on the same evidence (its
over-saturation detection: both slopes positive, with a margin of error
from a t-distribution); here the test runs after the probe, on its request
records, and a probe it flags fails with the reason ``over-saturated``.

Closed loops (a concurrency cap) cannot over-saturate: in-flight requests
never exceed the cap, so the concurrency slope stays flat.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Saturation", "over_saturation"]

# The first quarter of a run is the ramp-up from an empty server: in-flight
# requests rise there under any load, so it would make every run look saturated.
RAMP_FRACTION = 0.25
MIN_POINTS = 8
# How far each must rise over the judged part of the run, besides rising significantly:
# a slope that adds less than one queued request, or TTFT growth below half the median
# TTFT, is a stable server's wobble, not a queue.
MIN_QUEUE_RISE = 1.0
MIN_TTFT_RISE = 0.5


@dataclass(frozen=True)
class Saturation:
    """The verdict on one run: ``over_saturated`` and why, with the two fitted slopes.

    ``concurrency_per_s`` is the fitted growth of requests in flight per second
    of the run, ``ttft_ms_per_s`` that of TTFT; ``points`` the requests judged
    (after the ramp-up). NaN slopes: too few requests to judge.
    """

    over_saturated: bool
    reason: str
    concurrency_per_s: float = math.nan
    ttft_ms_per_s: float = math.nan
    points: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _t_975(dof: int) -> float:
    # Student's t, two-sided 95%: the normal quantile with the Cornish-Fisher correction
    # terms in 1/dof: within 0.1% of the exact value from 6 degrees of freedom (MIN_POINTS - 2) up.
    z = 1.959963984540054
    return (
        z
        + (z**3 + z) / (4 * dof)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * dof**3)
    )


def _rising(x: list[float], y: list[float]) -> tuple[float, bool]:
    """Least-squares slope of y on x, and whether its 95% confidence interval lies above 0."""
    n = len(x)
    mx, my = statistics.fmean(x), statistics.fmean(y)
    sxx = sum((a - mx) ** 2 for a in x)
    if sxx <= 0:
        return math.nan, False
    slope = sum((a - mx) * (b - my) for a, b in zip(x, y)) / sxx
    residual = sum((b - my - slope * (a - mx)) ** 2 for a, b in zip(x, y))
    error = math.sqrt(residual / (n - 2) / sxx)
    return slope, slope > 0 and slope - _t_975(n - 2) * error > 0


def over_saturation(records) -> Saturation:
    """Whether both the requests in flight and TTFT kept rising through the run (see the module docstring).

    Records need ``success``, ``start_time``, ``ttft`` and ``latency``
    (seconds; ``client.RequestRecord`` fits). In flight at a request's start
    counts every request sent and not yet finished, queued ones included (the
    client's view: it cannot see the server's queue).
    """
    done = sorted(
        (r for r in records if r.success and getattr(r, "start_time", None) is not None), key=lambda r: r.start_time
    )
    judged = done[int(len(done) * RAMP_FRACTION) :]
    if len(judged) < MIN_POINTS:
        return Saturation(False, f"not judged: {len(judged)} requests after the ramp-up, fewer than {MIN_POINTS}")
    first = done[0].start_time
    x = [r.start_time - first for r in judged]
    in_flight = [sum(1 for o in done if o.start_time <= r.start_time < o.start_time + o.latency) for r in judged]
    ttft_ms = [r.ttft * 1000.0 for r in judged]
    queue_slope, queue_up = _rising(x, in_flight)
    ttft_slope, ttft_up = _rising(x, ttft_ms)
    span = x[-1] - x[0]
    queue_rise, ttft_rise = queue_slope * span, ttft_slope * span
    median_ttft = statistics.median(ttft_ms)
    saturated = queue_up and ttft_up and queue_rise >= MIN_QUEUE_RISE and ttft_rise >= MIN_TTFT_RISE * median_ttft
    facts = (
        f"requests in flight rose by {queue_rise:.1f} and TTFT by {ttft_rise:.0f} ms over "
        f"{span:.1f} s of the run ({len(judged)} requests after the ramp-up)"
    )
    reason = (
        f"over-saturated: {facts}; the queue kept growing, so the percentiles measured how long "
        "the run lasted, not the load"
        if saturated
        else f"not over-saturated: {facts}"
    )
    return Saturation(saturated, reason, queue_slope, ttft_slope, len(judged))
