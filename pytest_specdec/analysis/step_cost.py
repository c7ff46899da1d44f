"""What one SD step costs, with a fixed part and a per-token part, and how that was fitted.

A step proposing ``j >= 1`` tokens costs ``t(j) = t_ref + fixed + per_token * j`` (ms), ``t_ref`` the
reference's plain decode step.  The split matters: an EAGLE-3 head on an H100 costs a near-fixed ~2.1 ms
per step whatever it proposes ("Speculative Decoding: Performance or Illusion?", its simulator's fit for
Llama-3.1-8B: 2.14 ms + 0.84 us per proposed token), while a draft model pays a forward per drafted token.
A model that grows from zero with ``j`` makes short drafts look nearly free: from a k=5 EAGLE-3 run it
predicted 1.79x at k=1 where the study's method gives 1.34x.

From one run at one k, where every drafted step proposes k, the two parts cannot be told apart: only their
sum at k, ``t_k - t_ref``, is measured.  `fit_step_cost` then takes the whole extra cost as per-token
(the plain step plus a share per drafted token) and labels it so; runs at two or more k (a sweep over
``num_speculative_tokens``, or a run at k=20 for the study's oracle) fit both parts.  The derived ratio of
Leviathan et al., ``c = (t_k - t_ref) / (k * t_ref)``, stays defined at the run's k (`cost_ratio_at`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

ONE_K = "one k"  # `StepCost.fitted_from`: a single run's t_k, the whole extra taken as per-token
TWO_K = "runs at several k"  # both parts fitted by least squares over the runs' t_k


@dataclass(frozen=True)
class StepCost:
    """``t(j) = reference_ms + fixed_ms + per_token_ms * j`` for ``j >= 1``; ``t(0) = reference_ms``.

    `drafter_always_runs`: a model drafter (EAGLE heads, MTP, draft models) pays its fixed part on a step
    that ends up proposing nothing too (it has to run to know); a host-side lookup (n-gram, suffix) does not.
    Only the oracle proposes nothing on a drafted step.
    """

    reference_ms: float
    fixed_ms: float
    per_token_ms: float
    fitted_from: str  # ONE_K or TWO_K
    label: str  # how it was fitted, in words, for reports
    drafter_always_runs: bool = False

    def ms(self, proposed: float) -> float:
        if proposed <= 0:
            return self.reference_ms + (self.fixed_ms if self.drafter_always_runs else 0.0)
        return self.reference_ms + self.fixed_ms + self.per_token_ms * proposed

    def cost_ratio_at(self, k: int) -> float:
        """Leviathan's c at draft length k: ``(t(k) - t_ref) / (k * t_ref)``."""
        return (self.ms(k) - self.reference_ms) / (k * self.reference_ms)


def fit_step_cost(
    reference_ms: float, drafted_ms: Mapping[int, float], *, drafter_always_runs: bool = False, note: str = ""
) -> StepCost | None:
    """The step cost from the reference's step and the drafted step's time at each measured k (``{k: t_k}``).

    None when no finite ``t_k`` at least as slow as the plain step is given (a drafted step contains one).
    With one k the extra is taken as per-token; with several, ``t_k - t_ref = fixed + per_token * k`` is fitted
    by least squares, each part held at zero or above (a negative part is noise: the fit is redone without it).
    """
    points = {
        int(k): float(t)
        for k, t in drafted_ms.items()
        if k >= 1 and math.isfinite(t) and reference_ms > 0 and t >= reference_ms * (1 - 1e-9)
    }
    if not points:
        return None
    extras = {k: max(t - reference_ms, 0.0) for k, t in points.items()}  # equal within float error: a free draft
    ks = sorted(extras)
    where = f" ({note})" if note else ""
    if len(ks) == 1:
        (k,) = ks
        return StepCost(
            reference_ms,
            0.0,
            extras[k] / k,
            ONE_K,
            f"one run at k={k}: the drafted step's extra {extras[k]:.3g} ms over the plain step taken as "
            f"{extras[k] / k:.3g} ms per proposed token, since one k cannot split it into a fixed and a per-token "
            f"part (a run at a second k fits both){where}",
            drafter_always_runs,
        )
    n = len(ks)
    mean_k = sum(ks) / n
    mean_e = sum(extras.values()) / n
    spread = sum((k - mean_k) ** 2 for k in ks)
    per_token = sum((k - mean_k) * (extras[k] - mean_e) for k in ks) / spread
    fixed = mean_e - per_token * mean_k
    if per_token < 0:
        per_token, fixed = 0.0, mean_e
    elif fixed < 0:
        fixed, per_token = 0.0, sum(k * extras[k] for k in ks) / sum(k * k for k in ks)
    return StepCost(
        reference_ms,
        fixed,
        per_token,
        TWO_K,
        f"fitted from runs at k={', '.join(map(str, ks))}: {fixed:.3g} ms per drafted step plus {per_token:.3g} ms "
        f"per proposed token over the plain step of {reference_ms:.3g} ms{where}",
        drafter_always_runs,
    )
