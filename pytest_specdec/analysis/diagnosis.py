"""Why SD did not pay: the causes the measured figures point at.

:func:`diagnose` runs one rule per cause over a run's figures.  A rule fires
only on the numbers it needs; a missing or NaN figure keeps it silent, so a
cause is never named without the number behind it.  The rules are Leviathan
et al.'s break-evens with the run's cost ratio ``c`` (measured from its step
times where it could be, see `theory`), and "measured falls short of
expected" is `theory.falls_short` everywhere (the report's tables use it too),
with the margin the run's own noise gives (`theory.shortfall_margin`).  The
caller decides when to ask (usually when the speedup fell short) and
:func:`describe` words the answer.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .theory import (
    MEASURED,
    break_even_length,
    expected_decode_speedup,
    falls_short,
    position_break_even,
    shortfall_margin,
    speedups_by_draft_length,
)

# Tukey's "far out" fence (Exploratory Data Analysis, 1977): a value beyond
# Q3 + 3 IQR of the others is one their ordinary spread does not explain.
FAR_OUT_IQRS = 3.0
# Quartiles of fewer than three values are the values themselves: no spread to judge an outlier by.
MIN_OTHERS = 3


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


def _cost(figures: Mapping[str, Any]) -> tuple[float, str, float] | None:
    """(c, how it was obtained in words, undrafted steps per drafted step u), or None without a usable c."""
    c = _number(figures, "cost_ratio")
    if c is None or c < 0:
        return None
    source = figures.get("cost_ratio_source") or "source unknown"
    u = _number(figures, "undrafted_per_drafted")
    return c, f"c {c:.3g} {source}", u if u is not None and u >= 0 else 0.0


def _margin(figures: Mapping[str, Any], key: str) -> float:
    """The noise margin the caller measured, or the one-repeat default (noise unknown)."""
    margin = _number(figures, key)
    return margin if margin is not None and margin >= 0 else shortfall_margin(())[0]


def low_acceptance(figures: Mapping[str, Any]) -> Cause | None:
    """Acceptance length not above Leviathan's break-even ``1 + k*c``: at this cost the drafts cannot pay.

    A drafted step emits ``L`` tokens for the cost of ``1 + k*c`` plain steps,
    so SD pays exactly when ``L > 1 + k*c`` (steps that drafted nothing cost
    and emit as plain steps, and do not move the break-even).
    """
    length, k, cost = _number(figures, "acceptance_length"), _number(figures, "k"), _cost(figures)
    if length is None or k is None or k < 1 or cost is None or length < 1:
        return None
    c, how, u = cost
    k = int(k)
    even = break_even_length(k, c)
    if length > even:
        return None
    rate = _number(figures, "acceptance_rate")
    share = f" ({rate:.0%} of drafts accepted)" if rate is not None else ""
    expected = expected_decode_speedup(length, k, c, u)
    return Cause(
        "low_acceptance",
        f"acceptance length {length:.2f} tokens per drafted step{share}, not above the "
        f"break-even 1 + k·c = {even:.3f} (k={k}, {how}): expected {expected:.3f}x",
    )


def acceptance_collapse(figures: Mapping[str, Any]) -> Cause | None:
    """Draft positions past some ``j < k`` accept less than they cost: drafting only ``j`` is expected faster.

    Position ``j`` is worth drafting when its rate ``p_j > c*E_{j-1} / (1 + (j-1)*c)``
    (`theory.position_break_even`, ``E_j = 1 + p_1 + ... + p_j``); the rule
    finds the ``j`` with the highest expected speedup and fires when it is
    under k, naming the positions dropped and both speedups.  The best k the
    step-time model predicts (:func:`~.predictions.predict_speedups`) is added
    when it is smaller than k.
    """
    k, rates, cost = _number(figures, "k"), figures.get("per_position_acceptance"), _cost(figures)
    if k is None or k < 1 or not rates or cost is None:
        return None
    k, (c, how, u) = int(k), cost
    rates = [_value(rate) for rate in list(rates)[:k]]
    if len(rates) < k or any(rate is None for rate in rates):
        return None
    speedups = speedups_by_draft_length(rates, c, u)
    best = min(speedups, key=lambda j: (-round(speedups[j], 12), j))  # near-ties to the smaller k
    if best == k or speedups[best] <= speedups[k]:
        return None
    # Figures from the streamed-chunk estimate (no per-step data from the server) say so.
    estimated = " (estimated from streamed chunks)" if figures.get("estimated") else ""
    dropped = range(best + 1, k + 1)
    shown = ", ".join(f"{rates[j - 1]:.0%}" for j in dropped)
    evens = ", ".join(f"{position_break_even(rates, j, c, u):.0%}" for j in dropped)
    where = f"position {k} accepts" if best + 1 == k else f"positions {best + 1}..{k} accept"
    their = "its break-even" if best + 1 == k else "their break-evens"
    figure = (
        f"{where} {shown}{estimated if figures.get('rates_estimated') else ''}, under {their} {evens} "
        f"(c·E_(j-1) / (1 + (j-1)·c), {how}): k={best} raises the expected speedup from "
        f"{speedups[k]:.3f}x to {speedups[best]:.3f}x"
    )
    step_best, step_speedup = _number(figures, "best_k"), _number(figures, "predicted_best_speedup")
    if step_best is not None and step_best < k:
        figure += (
            f"; the step times predict best k={int(step_best)}"
            + (f" ({step_speedup:.2f}x)" if step_speedup is not None else "")
            + estimated
        )
    return Cause("acceptance_collapse", figure)


def verification_cost(figures: Mapping[str, Any]) -> Cause | None:
    """The decode speedup falls short of decode theory at an a-priori c: a drafted step costs more than that c says.

    Decode against decode: the median-TPOT speedup against the decode-only
    expected speedup, never a throughput with prefill in it.  Silent when c
    was measured from this run's step times: the expected speedup then
    reproduces the decode measurement by construction (``t_k`` is solved from
    the SD decode time), and the cost shows in c itself (`low_acceptance`).
    """
    measured, expected = _number(figures, "decode_speedup"), _number(figures, "expected_speedup")
    cost = _cost(figures)
    if cost is None or figures.get("cost_ratio_source") == MEASURED:
        return None
    margin = _margin(figures, "shortfall_margin")
    if not falls_short(measured, expected, margin):
        return None
    return Cause(
        "verification_cost",
        f"decode speedup {measured:.2f}x (median TPOT) is {measured / expected:.0%} of "
        f"the {expected:.2f}x expected at this acceptance with {cost[1]}, short by more "
        f"than the {margin:.0%} noise margin: drafting or verifying costs more than "
        "that c",
    )


def client_bound(figures: Mapping[str, Any]) -> Cause | None:
    """The load client, not the server, set the pace; the caller's text carries its own figures."""
    text = figures.get("client_bound")
    return Cause("client_bound", text) if isinstance(text, str) and text.strip() else None


def warm_up(figures: Mapping[str, Any]) -> Cause | None:
    """The SD run's first request decoded beyond the far-out fence of the others' TPOTs: warm-up was measured."""
    first = _number(figures, "first_request_tpot_ms")
    others = [v for v in (figures.get("tpot_ms_others") or ()) if _value(v) is not None]
    if first is None or len(others) < MIN_OTHERS:
        return None
    q1, median, q3 = statistics.quantiles(others, n=4, method="inclusive")
    fence = q3 + FAR_OUT_IQRS * (q3 - q1)
    if first <= fence or median <= 0:
        return None
    return Cause(
        "warm_up",
        f"first request {first:.1f} ms per output token, {first / median:.1f}x the others' "
        f"median {median:.1f} ms, beyond their far-out fence {fence:.1f} ms (Q3 + 3 IQR)",
    )


def high_concurrency(figures: Mapping[str, Any]) -> Cause | None:
    """Across a concurrency sweep the speedup at the highest concurrency falls short of the lowest's.

    Larger batches make the target compute bound, and verifying k drafted
    tokens per request then costs what it saves.  "Falls short" is
    `theory.falls_short` with the sweep's noise margin (`sweep_margin`).
    """
    points = []
    for point in figures.get("sweep") or ():
        concurrency, value = (list(point) + [None, None])[:2]
        if _value(concurrency) is not None and _value(value) is not None:
            points.append((float(concurrency), float(value)))
    if len({c for c, _ in points}) < 2:
        return None
    (low_c, low_s), (high_c, high_s) = min(points), max(points)
    if not falls_short(high_s, low_s, _margin(figures, "sweep_margin")):
        return None
    return Cause(
        "high_concurrency",
        f"speedup {low_s:.2f}x at concurrency {low_c:g} falls to {high_s:.2f}x at concurrency {high_c:g}",
    )


RULES: tuple[Callable[[Mapping[str, Any]], Cause | None], ...] = (
    low_acceptance,
    acceptance_collapse,
    verification_cost,
    client_bound,
    warm_up,
    high_concurrency,
)


def diagnose(figures: Mapping[str, Any]) -> list[Cause]:
    """The causes `figures` support, in RULES order.

    Keys read: acceptance_length, acceptance_rate, k, cost_ratio,
    cost_ratio_source, undrafted_per_drafted, per_position_acceptance,
    best_k, predicted_best_speedup, decode_speedup (median TPOT, reference /
    SD), expected_speedup (decode-only), shortfall_margin, client_bound,
    first_request_tpot_ms, tpot_ms_others, sweep ((concurrency, speedup)
    pairs of one configuration and workload), sweep_margin, estimated,
    rates_estimated.
    """
    return [cause for rule in RULES if (cause := rule(figures)) is not None]


def describe(causes: list[Cause]) -> str:
    """One line ``- name: figure`` per cause, or a sentence saying none was found."""
    if not causes:
        return "no cause found among the measured figures"
    return "\n".join(f"- {cause.name}: {cause.figure}" for cause in causes)
