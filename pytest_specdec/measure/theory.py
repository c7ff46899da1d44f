"""Speculative-decoding theory next to measurement.

Leviathan et al. (2023) model each drafted token as accepted independently with
probability ``alpha``; with ``k`` drafted tokens per step and a draft forward
costing ``c`` target forwards, the expected walltime speedup is
``(1 - alpha**(k+1)) / ((1 - alpha) * (k*c + 1))``.  Comparing that bound with
the measured speedup tells whether a run is limited by acceptance (theory is
low too) or by the implementation (theory is high, measurement is not).
"""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

MODEL_FREE = frozenset({"ngram", "suffix"})
EAGLE_FAMILY = frozenset({"eagle", "eagle3", "mtp", "medusa", "mlp_speculator"})


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Tokens per target forward, ``(1 - alpha**(k+1)) / (1 - alpha)``; ``k + 1`` at alpha 1."""
    if not (isinstance(alpha, (int, float)) and 0.0 <= alpha <= 1.0):
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    _check_k(k)
    # The geometric sum 1 + alpha + ... + alpha**k equals the closed form, is
    # exact at alpha == 1 and does not cancel catastrophically just below it.
    return math.fsum(alpha**i for i in range(k + 1))


def expected_speedup(alpha: float, k: int, c: float) -> float:
    """Leviathan et al. expected walltime speedup over plain decoding.

    ``alpha``: per-token acceptance in [0, 1]; ``k``: draft length >= 1;
    ``c``: cost of one draft forward relative to one target forward (>= 0).

    >>> round(expected_speedup(0.8, 4, 0.05), 4)
    2.8013
    >>> expected_speedup(1.0, 3, 0.0)
    4.0
    """
    if not (isinstance(c, (int, float)) and math.isfinite(c) and c >= 0):
        raise ValueError(f"c must be a finite number >= 0, got {c!r}")
    # One step costs k draft forwards plus one target forward (verification).
    return expected_tokens_per_step(alpha, k) / (k * c + 1)


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


def _positive(x: float | None) -> float | None:
    return x if x is not None and x > 0 else None  # 0 or negative sizes mean "unknown"


def estimate_cost_ratio(method: str, draft_layers: int | None = None, target_layers: int | None = None,
                        draft_params: float | None = None, target_params: float | None = None) -> float | None:
    """Estimate ``c`` (draft forward / target forward cost), or None if unknown."""
    method = (method or "").lower()
    if method in MODEL_FREE:
        # N-gram / suffix lookups run on the host; next to a GPU forward pass
        # they cost nothing.
        return 0.0
    dp, tp = _positive(draft_params), _positive(target_params)
    dl, tl = _positive(draft_layers), _positive(target_layers)
    if dp and tp:
        # Decode is memory bound: a forward pass costs about the time to read
        # the weights, i.e. scales with parameter count.
        return dp / tp
    if dl and tl:
        # A same-width truncated draft costs its share of the target's layers.
        return dl / tl
    if method in EAGLE_FAMILY and tl:
        # EAGLE/MTP/Medusa heads are about one decoder layer on top of the
        # target's hidden states.
        return 1 / tl
    return None


def model_size_from_dir(path: str | Path) -> tuple[int | None, int]:
    """Return ``(num_hidden_layers, weight bytes)`` for a local HF model dir.

    Weight bytes (``*.safetensors``, else ``*.bin``) stand in for parameter
    count: only the ratio between draft and target matters, and both are
    normally stored in the same dtype.
    """
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"model directory not found: {root}")
    layers = None
    config = root / "config.json"
    if config.is_file():
        data = json.loads(config.read_text(encoding="utf-8"))
        # Multimodal configs keep the language model under text_config.
        layers = data.get("num_hidden_layers", (data.get("text_config") or {}).get("num_hidden_layers"))
    files = sorted(root.glob("*.safetensors")) or sorted(root.glob("*.bin"))
    return layers, sum(f.stat().st_size for f in files if f.is_file())


def cost_ratio_for(spec, resolve: Callable[[str], str] | None = None) -> float | None:
    """Estimated draft/target cost per forward pass for `spec` (None when unknown).

    Sizes are read from local model directories when `resolve` maps the names
    to them (the bundled model and its truncated drafts always are); hub names
    that are not on disk leave the estimate to the method alone.
    """
    config = spec.speculative_config or {}
    method = str(config.get("method", ""))

    def size(name):
        if not name or resolve is None:
            return None, None
        with contextlib.suppress(OSError, ValueError):
            path = resolve(name)
            if path:
                return model_size_from_dir(path)
        return None, None

    target_layers, target_bytes = size(spec.model)
    draft_layers, draft_bytes = size(config.get("model")) if config.get("model") else (None, None)
    return estimate_cost_ratio(method, draft_layers=draft_layers, target_layers=target_layers,
                               draft_params=draft_bytes or None, target_params=target_bytes or None)


def cost_per_million_tokens(output_tok_per_s: float, usd_per_hour: float) -> float:
    """USD per million output tokens at a given throughput and hourly price."""
    if not (math.isfinite(output_tok_per_s) and output_tok_per_s > 0):
        raise ValueError(f"output_tok_per_s must be > 0, got {output_tok_per_s!r}")
    if not (math.isfinite(usd_per_hour) and usd_per_hour >= 0):
        raise ValueError(f"usd_per_hour must be >= 0, got {usd_per_hour!r}")
    return 1e6 / output_tok_per_s * usd_per_hour / 3600


@dataclass(frozen=True)
class Theory:
    alpha: float
    k: int
    cost_ratio: float | None
    expected_speedup: float | None
    measured_speedup: float | None
    problem: str | None = None  # why there is no expected speedup

    @property
    def efficiency(self) -> float | None:
        """Measured / expected speedup; None when either is missing."""
        if self.expected_speedup is None or self.measured_speedup is None:
            return None
        return self.measured_speedup / self.expected_speedup


def _missing(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def theory_for(acceptance_length: float | None, k: int | None, cost_ratio: float | None,
               measured_speedup: float | None) -> Theory | None:
    """Build a :class:`Theory` from measured metrics; None without length or k.

    Never raises on measured input: an acceptance length outside [1, k+1]
    (counters from mixed configurations, drift) gives a Theory without an
    expected speedup whose `problem` says why.
    """
    if _missing(acceptance_length) or _missing(k):
        return None
    k = int(k)  # metrics may carry k as a float
    measured = None if _missing(measured_speedup) else measured_speedup
    cost = None if _missing(cost_ratio) else cost_ratio
    try:
        alpha = alpha_from_acceptance_length(acceptance_length, k)
    except ValueError:
        return Theory(math.nan, k, cost, None, measured,
                      problem=f"acceptance length {acceptance_length:.3g} is outside [1, k+1] = [1, {k + 1}], so no "
                              "per-token acceptance fits it (counters from another configuration?)")
    expected = None if cost is None else expected_speedup(alpha, k, cost)
    return Theory(alpha, k, cost, expected, measured,
                  problem=None if cost is not None else "the draft/target cost ratio of this method is unknown")
