"""Warming a fresh server until it is steady, not for a fixed count.

A server's first requests pay for lazy initialisation (kernel selection,
allocator growth, CUDA graph capture, page faults), and on a GPU this lasted
well past two requests: the first H100 run's reference server ran its first
measured runs a third slower than a later server did, and every speedup
measured against it was inflated (docs/benchmarks.md, "Figures the code once quoted").  So a fresh server is sent rounds of
short requests until it has stopped getting faster: two consecutive rounds
that are neither faster than the best earlier round by more than the noise
(still warming) nor far slower than it (a server that keeps slowing down is
not steady either), bounded in rounds and seconds.  Plain agreement of two
neighbouring rounds is not enough on a CPU: n-gram rounds of the same two
prompts on the CPU build moved far from round to round with no trend
(docs/benchmarks.md, "Figures the code once quoted"), so a close agreement
never came, while no round after the fourth beat the best by more than noise.  One round far slower between two
settled ones is a burst of other work on the machine, not a server that keeps slowing down: it does not restart
the count (`spike`).  A server that never settles is recorded as such and its comparisons are flagged
(`SteadyState.steady`).

The figure compared is each round's time per output token including the first
token (``sum(latency) / sum(output tokens)``): warm-up slows prefill and decode
alike, and this one number sees both.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

REQUESTS_PER_ROUND = 2
MIN_ROUNDS = 3  # a first round, and two after it that no longer improve on the best
MAX_ROUNDS = 8
MAX_SECONDS = 180.0
# A round still warms when it beats the best earlier round by more than this fraction (or the
# spread inside the rounds, when larger): far below what a cold start did on the H100, above the
# reference's round-to-round spread once warm on the CPU build (docs/benchmarks.md, "Figures the code once quoted").
MIN_TOLERANCE = 0.05
# A round this much slower than the best is a server slowing down, not noise: above the 32% the
# CPU build's n-gram rounds spread with no trend, below a server that keeps getting slower.
MAX_SLOWER = 0.5


@dataclass(frozen=True)
class SteadyState:
    """What warming one server took: each round's ms per output token, and whether it settled."""

    rounds_ms_per_token: tuple[float, ...]
    steady: bool
    tolerance: float
    seconds: float
    reason: str = ""

    def describe(self) -> str:
        figures = ", ".join(f"{x:.1f}" for x in self.rounds_ms_per_token)
        state = (
            f"steady after {len(self.rounds_ms_per_token)} rounds"
            if self.steady
            else f"NOT steady after {len(self.rounds_ms_per_token)} rounds ({self.reason})"
        )
        return f"{state} in {self.seconds:.1f} s; ms per output token by round: {figures}"

    def as_dict(self) -> dict:
        """JSON-safe: a round that could not be timed is null, never NaN."""
        rounds = [x if math.isfinite(x) else None for x in self.rounds_ms_per_token]
        return {**asdict(self), "rounds_ms_per_token": rounds, "describe": self.describe()}


def round_figure(records, requested_tokens: int | None = None) -> tuple[float, float]:
    """(ms per output token over the round, relative spread between its requests); NaN when unusable.

    A server that streams neither usage nor token ids leaves `output_tokens` at 0 until the text is
    tokenized; warm-up requests ignore EOS, so `requested_tokens` is what each one produced.
    """

    def tokens_of(record) -> int:
        return record.output_tokens or (requested_tokens or 0)

    done = [r for r in records if getattr(r, "success", False) and tokens_of(r) > 0]
    tokens = sum(tokens_of(r) for r in done)
    if not done or tokens <= 0:
        return math.nan, math.nan
    figure = 1000.0 * sum(r.latency for r in done) / tokens
    per_request = [1000.0 * r.latency / tokens_of(r) for r in done]
    spread = (max(per_request) - min(per_request)) / figure if len(per_request) > 1 and figure > 0 else 0.0
    return figure, spread


def agree(
    previous: tuple[float, float], latest: tuple[float, float], floor: float = MIN_TOLERANCE
) -> tuple[bool, float]:
    """Whether two rounds' figures agree, and the tolerance used (the larger spread, at least `floor`)."""
    (a, spread_a), (b, spread_b) = previous, latest
    tolerance = max(floor, spread_a if math.isfinite(spread_a) else 0.0, spread_b if math.isfinite(spread_b) else 0.0)
    if not (math.isfinite(a) and math.isfinite(b) and a > 0 and b > 0):
        return False, tolerance
    return abs(b - a) / min(a, b) <= tolerance, tolerance


def settled(figures: Sequence[tuple[float, float]], index: int, floor: float = MIN_TOLERANCE) -> tuple[bool, float]:
    """Whether round `index` no longer improves on the best round before it, nor is far slower.

    Returns the verdict and the tolerance used (the larger spread of the two rounds, at least `floor`).
    """
    figure, spread = figures[index]
    earlier = [(f, s) for f, s in figures[:index] if math.isfinite(f) and f > 0]
    if not earlier or not (math.isfinite(figure) and figure > 0):
        return False, floor
    best, best_spread = min(earlier)
    tolerance = max(floor, *(x for x in (spread, best_spread) if math.isfinite(x)))
    return best * (1 - tolerance) <= figure <= best * (1 + MAX_SLOWER), tolerance


def spike(figures: Sequence[tuple[float, float]], index: int) -> bool:
    """Whether round `index` is one burst: far slower than the best round before it (more than MAX_SLOWER) just
    after a round that had settled.  A server that keeps slowing down shows no settled round before its slow
    one, or a second slow round after it; one burst between two settled rounds is the machine's, not the
    server's, and the caller still needs the round after it settled."""
    figure, _ = figures[index]
    earlier = [f for f, _ in figures[:index] if math.isfinite(f) and f > 0]
    if not earlier or not math.isfinite(figure):
        return False
    return figure > min(earlier) * (1 + MAX_SLOWER) and settled(figures, index - 1)[0]


def warm_until_steady(
    send_round: Callable[[int], Sequence],
    *,
    max_rounds: int = MAX_ROUNDS,
    max_seconds: float = MAX_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    requested_tokens: int | None = None,
) -> SteadyState:
    """Call ``send_round(index)`` (it returns the round's request records) until the server is steady:
    two consecutive rounds `settled`, or two settled with one `spike` between them (at least MIN_ROUNDS rounds
    in all).

    Stops after `max_rounds` rounds or once `max_seconds` have passed, whichever comes first.
    """
    began = clock()
    figures: list[tuple[float, float]] = []
    tolerance = MIN_TOLERANCE
    while True:
        figures.append(round_figure(send_round(len(figures)), requested_tokens))
        if len(figures) >= MIN_ROUNDS:
            last, tolerance = settled(figures, len(figures) - 1)
            before = len(figures) - 2
            if last and (settled(figures, before)[0] or spike(figures, before)):
                return _state(figures, True, tolerance, clock() - began)
        elapsed = clock() - began
        if len(figures) >= max_rounds:
            return _state(
                figures,
                False,
                tolerance,
                elapsed,
                f"still improving by more than {tolerance:.0%} on the best round, or slowing down, "
                f"after {max_rounds} rounds",
            )
        if elapsed >= max_seconds and len(figures) >= MIN_ROUNDS:
            return _state(
                figures, False, tolerance, elapsed, f"still changing after {elapsed:.0f} s (limit {max_seconds:g} s)"
            )


def _state(figures, steady: bool, tolerance: float, seconds: float, reason: str = "") -> SteadyState:
    return SteadyState(tuple(round(f, 3) for f, _ in figures), steady, tolerance, round(seconds, 3), reason)
