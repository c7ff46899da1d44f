"""Speculative-decoding theory next to measurement.

Leviathan et al. (2023) model each drafted token as accepted independently with
probability ``alpha``; with ``k`` drafted tokens per step and a draft forward
costing ``c`` target forwards, a drafted step costs ``1 + k*c`` plain decode
steps and emits ``L = (1 - alpha**(k+1)) / (1 - alpha)`` tokens on average:
an expected decode speedup of ``L / (1 + k*c)``.  Two things it leaves out
are put back here:

- **Steps that drafted nothing.**  vLLM averages ``L`` over the steps that
  drafted; an n-gram or suffix drafter without a match runs a plain step
  emitting one token.  With ``D`` drafted and ``U`` undrafted steps the
  expected speedup is ``(D*L + U) / (D*(1 + k*c) + U)`` (:func:`expected_decode_speedup`).
- **c measured, not guessed.**  The run solves the reference decode step
  ``t_ref`` and the SD drafted step ``t_k`` (`acceptance.StepTiming`); the
  model says ``t_k = t_ref * (1 + k*c)``, so ``c = (t_k - t_ref) / (k*t_ref)``
  (:func:`measured_cost_ratio`): drafting plus any verification cost beyond a
  plain step, per drafted position.  The parameter-count guess is only a
  labelled fallback: it gives 0.0174 for Llama-3-70B with a 1B draft and
  0.0728 for Qwen3-8B with 0.6B, where "Speculative Decoding: Performance or
  Illusion?" (Sec. 3.2) measured about 0.125 and 0.375.  Every c carries its
  source (:class:`CostRatio`).

The theory is of decoding only: it is compared with the decode speedup
(median TPOT, reference / SD), never with a throughput that includes prefill
(:func:`falls_short`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from ..verdict.metric_names import _finite
from .cost_ratio import (  # re-exported: these lived here
    _check_k as _check_k,
    MODEL_FREE as MODEL_FREE,
    EAGLE_FAMILY as EAGLE_FAMILY,
    MEASURED as MEASURED,
    PARAMETER_RATIO as PARAMETER_RATIO,
    METHOD_DEFAULT as METHOD_DEFAULT,
    GIVEN as GIVEN,
    UNAVAILABLE as UNAVAILABLE,
    measured_cost_ratio as measured_cost_ratio,
    CostRatio as CostRatio,
    as_cost_ratio as as_cost_ratio,
    _positive as _positive,
    estimated_cost_ratio as estimated_cost_ratio,
    estimate_cost_ratio as estimate_cost_ratio,
    model_size_from_dir as model_size_from_dir,
    cost_ratio_for as cost_ratio_for,
)


# How many standard deviations of the run's own noise a shortfall must exceed:
# the gate's default tolerances sit at ~2.5 sd of the noise they guard against
# (verdict/tolerances.py), and "short of theory" is held to the same standard.
NOISE_SDS = 2.5


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Tokens per target forward, ``(1 - alpha**(k+1)) / (1 - alpha)``; ``k + 1`` at alpha 1."""
    if not (isinstance(alpha, (int, float)) and 0.0 <= alpha <= 1.0):
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    _check_k(k)
    # The geometric sum 1 + alpha + ... + alpha**k equals the closed form, is
    # exact at alpha == 1 and does not cancel catastrophically just below it.
    return math.fsum(alpha**i for i in range(k + 1))


def _check_c(c: float) -> None:
    if not (_finite(c) and c >= 0):
        raise ValueError(f"c must be a finite number >= 0, got {c!r}")


def expected_speedup(alpha: float, k: int, c: float) -> float:
    """Leviathan et al. expected walltime speedup over plain decoding (every step drafts).

    ``alpha``: per-token acceptance in [0, 1]; ``k``: draft length >= 1;
    ``c``: cost of one draft forward relative to one target forward (>= 0).

    >>> round(expected_speedup(0.8, 4, 0.05), 4)
    2.8013
    >>> expected_speedup(1.0, 3, 0.0)
    4.0
    """
    _check_c(c)
    # One step costs k draft forwards plus one target forward (verification).
    return expected_tokens_per_step(alpha, k) / (k * c + 1)


def expected_decode_speedup(length: float, k: int, c: float, undrafted_per_drafted: float = 0.0) -> float:
    """``(L + u) / (1 + k*c + u)``: the module docstring's ``(D*L + U) / (D*(1 + k*c) + U)`` with ``u = U/D``.

    ``length``: tokens per drafted step (vLLM's mean acceptance length);
    ``undrafted_per_drafted``: steps that drafted nothing (one token at the
    cost of one plain step) per drafted step.  Half the steps undrafted
    (``u = 1``) at ``L = 3``, ``c = 0``: 2.0 tokens per forward, not 3.0.

    >>> expected_decode_speedup(3.0, 3, 0.0, 1.0)
    2.0
    """
    _check_k(k)
    _check_c(c)
    if not (_finite(length) and length >= 1):
        raise ValueError(f"length must be a number >= 1, got {length!r}")
    if not (_finite(undrafted_per_drafted) and undrafted_per_drafted >= 0):
        raise ValueError(f"undrafted_per_drafted must be a finite number >= 0, got {undrafted_per_drafted!r}")
    return (length + undrafted_per_drafted) / (1 + k * c + undrafted_per_drafted)


def break_even_length(k: int, c: float) -> float:
    """``1 + k*c``: SD pays exactly when the acceptance length exceeds it (Leviathan et al.; ``u`` cancels)."""
    _check_c(c)
    return 1 + k * c


def speedups_by_draft_length(rates: Sequence[float], c: float, undrafted_per_drafted: float = 0.0) -> dict[int, float]:
    """Expected decode speedup drafting only the first ``j`` positions, for ``j = 1..len(rates)``.

    ``rates[i]`` is the share of drafted steps accepting position ``i + 1``
    (vLLM's per-position counter over drafts), so ``E_j = 1 + sum(rates[:j])``
    tokens per drafted step, each costing ``1 + j*c``.
    """
    _check_c(c)
    u, total, out = undrafted_per_drafted, 1.0, {}
    for j, rate in enumerate(rates, start=1):
        total += rate
        out[j] = (total + u) / (1 + j * c + u)
    return out


def position_break_even(rates: Sequence[float], position: int, c: float, undrafted_per_drafted: float = 0.0) -> float:
    """The rate above which draft position `position` (1-based) raises the expected speedup.

    Drafting position ``j`` as well adds ``p_j`` tokens and ``c`` cost per
    drafted step; ``(E_j + u) / (1 + j*c + u) > (E_{j-1} + u) / (1 + (j-1)*c + u)``
    simplifies to ``p_j > c * (E_{j-1} + u) / (1 + (j-1)*c + u)``, Leviathan's
    ``c * E_{j-1} / (1 + (j-1)*c)`` when every step drafts (``u = 0``).
    """
    _check_c(c)
    before = 1.0 + math.fsum(rates[: position - 1])
    u = undrafted_per_drafted
    return c * (before + u) / (1 + (position - 1) * c + u)


def alpha_from_acceptance_length(length: float, k: int) -> float:
    """Solve Leviathan's ``alpha`` from vLLM's mean acceptance length.

    vLLM's ``acceptance_rate`` (accepted / drafted tokens) is *not* ``alpha``:
    drafting stops at the first rejection, so later positions are rarely
    reached and the rate is biased.  The acceptance length
    ``1 + accepted / drafts`` is exactly ``E[tokens per step]`` under the
    i.i.d. assumption, so ``alpha`` is found by inverting
    :func:`expected_tokens_per_step` (monotone increasing in ``alpha``) by
    bisection.  ``length`` must lie in ``[1, k + 1]``; float noise just outside
    is clamped.
    """
    _check_k(k)
    tol = 1e-6 * (k + 1)
    if not (isinstance(length, (int, float)) and 1 - tol <= length <= k + 1 + tol):
        raise ValueError(f"length must be in [1, k + 1] = [1, {k + 1}], got {length!r}")
    if length <= 1:
        return 0.0
    if length >= k + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(200):  # interval halves each time; stop once it no longer shrinks
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if expected_tokens_per_step(mid, k) < length:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def cost_per_million_tokens(output_tok_per_s: float, usd_per_hour: float) -> float:
    """USD per million output tokens at a given throughput and hourly price."""
    if not (math.isfinite(output_tok_per_s) and output_tok_per_s > 0):
        raise ValueError(f"output_tok_per_s must be > 0, got {output_tok_per_s!r}")
    if not (math.isfinite(usd_per_hour) and usd_per_hour >= 0):
        raise ValueError(f"usd_per_hour must be >= 0, got {usd_per_hour!r}")
    return 1e6 / output_tok_per_s * usd_per_hour / 3600


def shortfall_margin(repeat_values: Iterable[float]) -> tuple[float, str]:
    """How far (a fraction) a measurement may sit below what it is compared with before it falls short.

    With two or more repeats: ``NOISE_SDS`` sample standard deviations of the
    repeats' values, relative to their median (the run's own noise).  With
    one: the gate's default speedup tolerance (15%, ~2.5 sd of the ~4% drift
    per server instance measured by benchmarks/gate_calibration.py; see
    verdict/tolerances.py).
    """
    values = [v for v in repeat_values if _finite(v) and v > 0]
    if len(values) >= 2:
        spread = statistics.stdev(values) / statistics.median(values)
        return NOISE_SDS * spread, f"{NOISE_SDS:g} sd of {len(values)} repeats ({spread:.1%} each)"
    from ..verdict.tolerances import default_tolerance

    return default_tolerance("speedup_median_tpot"), "the default speedup tolerance (one repeat: noise unknown)"


def falls_short(measured: float | None, expected: float | None, margin: float | None) -> bool | None:
    """The one test of "measured falls short of expected": below ``expected * (1 - margin)``.

    `margin` comes from :func:`shortfall_margin`.  None (not False) when a
    figure is missing: an unknown is not a pass.
    """
    if not (_finite(measured) and _finite(expected) and expected > 0 and _finite(margin)):
        return None
    return measured < expected * (1 - margin)


@dataclass(frozen=True)
class Theory:
    alpha: float
    k: int
    cost_ratio: float | None
    expected_speedup: float | None  # of decoding, undrafted steps included
    measured_speedup: float | None  # what it predicts: the decode speedup (median TPOT, reference / SD)
    problem: str | None = None  # why there is no expected speedup
    cost_ratio_source: str | None = None  # CostRatio.source
    undrafted_per_drafted: float | None = None  # u = U / D; None: unknown, counted as 0
    note: str | None = None  # what the figure rests on (a fallback c, undrafted steps unknown)

    @property
    def efficiency(self) -> float | None:
        """Measured / expected speedup; None when either is missing."""
        if self.expected_speedup is None or self.measured_speedup is None:
            return None
        return self.measured_speedup / self.expected_speedup

    @property
    def break_even(self) -> float | None:
        """``1 + k*c``, the acceptance length above which SD pays; None without c."""
        return None if self.cost_ratio is None else break_even_length(self.k, self.cost_ratio)


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def theory_for(
    acceptance_length: float | None,
    k: int | None,
    cost_ratio,
    measured_speedup: float | None,
    *,
    undrafted_per_drafted: float | None = None,
) -> Theory | None:
    """Build a :class:`Theory` from measured figures; None without length or k.

    `cost_ratio` is a :class:`CostRatio` or a bare number (labelled "given");
    `undrafted_per_drafted` is ``U / D`` (None: unknown, counted as 0, which
    puts the expected speedup further from 1x than the truth, and the note
    says so).  Never raises on measured input: an acceptance length outside
    [1, k+1] (counters from mixed configurations, drift) or a negative c gives
    a Theory without an expected speedup whose `problem` says why.
    """
    if _missing(acceptance_length) or _missing(k):
        return None
    k = int(k)  # metrics may carry k as a float
    cost = as_cost_ratio(None if _missing(cost_ratio) else cost_ratio)
    u = undrafted_per_drafted if _finite(undrafted_per_drafted) and undrafted_per_drafted >= 0 else None
    base = Theory(
        math.nan,
        k,
        cost.value,
        None,
        None if _missing(measured_speedup) else measured_speedup,
        cost_ratio_source=cost.source,
        undrafted_per_drafted=u,
    )
    try:
        alpha = alpha_from_acceptance_length(acceptance_length, k)
    except ValueError:
        return replace(
            base,
            problem=f"acceptance length {acceptance_length:.3g} is outside [1, k+1] = [1, {k + 1}], "
            "so no per-token acceptance fits it (counters from another configuration?)",
        )
    if cost.value is None:
        return replace(
            base,
            alpha=alpha,
            problem="the draft/target cost ratio of this method is unknown" + (f" ({cost.note})" if cost.note else ""),
        )
    notes = [f"c {cost.source}" + (f": {cost.note}" if cost.note else "")]
    notes += ["undrafted steps unknown, counted as none"] if u is None else []
    expected = expected_decode_speedup(min(max(acceptance_length, 1.0), k + 1.0), k, cost.value, u or 0.0)
    return replace(base, alpha=alpha, expected_speedup=expected, note="; ".join(notes))
