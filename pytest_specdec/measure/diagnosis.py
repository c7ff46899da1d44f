"""Why SD did not pay: the causes the measured figures point at.

:func:`diagnose` runs one rule per cause over a run's figures.  A rule fires
only on the numbers it needs; a missing or NaN figure keeps it silent, so a
cause is never named without the number behind it.  Each threshold is a module
constant beside its rule.  The caller decides when to ask (usually when the
speedup fell short) and :func:`describe` words the answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

# Fewer tokens per step than this and the drafts barely pay for their own cost.
LOW_ACCEPTANCE_LENGTH = 1.5
# A draft position accepted less often than this is drafted (and verified) for nothing.
COLLAPSE_RATE = 0.10
# Measured / expected (Leviathan) speedup below this: the implementation, not acceptance, falls short.
VERIFICATION_EFFICIENCY = 0.6
# The first request's time per output token over the others' median above this: warm-up was measured.
WARM_UP_RATIO = 1.5
# Speedup at the highest concurrency this much (a fraction) below the lowest's: batching eats the gain.
CONCURRENCY_DROP = 0.10


@dataclass(frozen=True)
class Cause:
    """One reason SD did not pay; `figure` gives the measured number(s) in words."""

    name: str
    figure: str


def _value(value: Any) -> float | None:
    """`value` as a finite float, or None when it is missing, NaN or not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _number(figures: Mapping[str, Any], key: str) -> float | None:
    return _value(figures.get(key))


def low_acceptance(figures: Mapping[str, Any]) -> Cause | None:
    """Acceptance length under LOW_ACCEPTANCE_LENGTH: nearly every step emits only the target's own token."""
    length = _number(figures, "acceptance_length")
    if length is None or length >= LOW_ACCEPTANCE_LENGTH:
        return None
    rate = _number(figures, "acceptance_rate")
    share = f" ({rate:.0%} of drafts accepted)" if rate is not None else ""
    return Cause("low_acceptance", f"acceptance length {length:.2f} tokens per step, under "
                                   f"{LOW_ACCEPTANCE_LENGTH:g}{share}")


def acceptance_collapse(figures: Mapping[str, Any]) -> Cause | None:
    """Draft positions j..k-1 (0-based) accepted under COLLAPSE_RATE: k drafts more than is ever kept.

    Rates per position fall with the position, so the first one under the
    threshold marks where drafting stops paying; the predicted best k (from
    :func:`~.acceptance.predict_speedups`) is added when it is smaller than k.
    """
    k, rates = _number(figures, "k"), figures.get("per_position_acceptance")
    if k is None or not rates:
        return None
    # Figures from the streamed-chunk estimate (no per-step data from the server) say so.
    estimated = " (estimated from streamed chunks)" if figures.get("estimated") else ""
    k = int(k)
    rates = [_value(rate) for rate in list(rates)[:k]]
    low = [j for j, rate in enumerate(rates) if rate is not None and rate < COLLAPSE_RATE]
    if not low:
        return None
    j = low[0]
    shown = ", ".join("n/a" if rate is None else f"{rate:.0%}" for rate in rates[j:])
    where = f"position {k} accepts" if j + 1 == k else f"positions {j + 1}..{k} accept"
    figure = f"{where} under {COLLAPSE_RATE:.0%} ({shown}){estimated if figures.get('rates_estimated') else ''}: " \
             f"k={k} is too high"
    best, best_speedup = _number(figures, "best_k"), _number(figures, "predicted_best_speedup")
    if best is not None and best < k:
        figure += f"; predicted best k={int(best)}" + (f" ({best_speedup:.2f}x)" if best_speedup is not None else "") \
            + estimated
    return Cause("acceptance_collapse", figure)


def verification_cost(figures: Mapping[str, Any]) -> Cause | None:
    """Speedup under VERIFICATION_EFFICIENCY of the expected one: drafting or verifying costs more than modelled."""
    measured, expected = _number(figures, "speedup"), _number(figures, "expected_speedup")
    if measured is None or expected is None or expected <= 0 or measured / expected >= VERIFICATION_EFFICIENCY:
        return None
    return Cause("verification_cost", f"measured speedup {measured:.2f}x is {measured / expected:.0%} of the "
                                      f"{expected:.2f}x expected at this acceptance")


def client_bound(figures: Mapping[str, Any]) -> Cause | None:
    """The load client, not the server, set the pace; the caller's text carries its own figures."""
    text = figures.get("client_bound")
    return Cause("client_bound", text) if isinstance(text, str) and text.strip() else None


def warm_up(figures: Mapping[str, Any]) -> Cause | None:
    """The SD run's first request decoded WARM_UP_RATIO times slower than the others' median: warm-up was measured."""
    first, others = _number(figures, "first_request_tpot_ms"), _number(figures, "median_tpot_ms_others")
    if first is None or others is None or others <= 0 or first <= WARM_UP_RATIO * others:
        return None
    return Cause("warm_up", f"first request {first:.1f} ms per output token, {first / others:.1f}x the others' "
                            f"median {others:.1f} ms")


def high_concurrency(figures: Mapping[str, Any]) -> Cause | None:
    """Across a concurrency sweep the speedup at the highest concurrency is CONCURRENCY_DROP below the lowest's.

    Larger batches make the target compute bound, and verifying k drafted
    tokens per request then costs what it saves.
    """
    points = []
    for point in figures.get("sweep") or ():
        concurrency, value = (list(point) + [None, None])[:2]
        if _value(concurrency) is not None and _value(value) is not None:
            points.append((float(concurrency), float(value)))
    if len({c for c, _ in points}) < 2:
        return None
    (low_c, low_s), (high_c, high_s) = min(points), max(points)
    if high_s > low_s * (1 - CONCURRENCY_DROP):
        return None
    return Cause("high_concurrency", f"speedup {low_s:.2f}x at concurrency {low_c:g} falls to {high_s:.2f}x at "
                                     f"concurrency {high_c:g}")


RULES: tuple[Callable[[Mapping[str, Any]], Cause | None], ...] = (
    low_acceptance, acceptance_collapse, verification_cost, client_bound, warm_up, high_concurrency)


def diagnose(figures: Mapping[str, Any]) -> list[Cause]:
    """The causes `figures` support, in RULES order.

    Keys read: speedup, expected_speedup, acceptance_rate, acceptance_length,
    k, per_position_acceptance, best_k, predicted_best_speedup, client_bound,
    first_request_tpot_ms, median_tpot_ms_others, sweep ((concurrency,
    speedup) pairs of one configuration and workload).
    """
    return [cause for rule in RULES if (cause := rule(figures)) is not None]


def describe(causes: list[Cause]) -> str:
    """One line ``- name: figure`` per cause, or a sentence saying none was found."""
    if not causes:
        return "no cause found among the measured figures"
    return "\n".join(f"- {cause.name}: {cause.figure}" for cause in causes)
