"""What other draft lengths would have given, from one run's per-step data: best k and the oracle.

Predictions (:func:`predict_speedups`, :func:`oracle_speedup`)
---------------------------------------------------------------
Inputs (:class:`StepTiming`, ms): ``t_ref``, the reference run's decode time
per token ``sum(latency - ttft) / sum(n - 1)``; the SD run's decode time
``sum(latency - ttft)`` and prefill time ``sum(ttft)``; ``k``.  A drafted step
of the run costs ``t_k`` from ``sd_decode = D * t_k + U * t_ref`` (``D``
drafted, ``U`` undrafted steps); a step proposing ``j`` tokens costs
``t(j) = t_ref + fixed + per_token * j`` (:mod:`.step_cost`, which says how
the two parts were fitted: one k cannot split them, runs at two k can).

**Spans.**  A step that accepted all ``k`` it drafted was cut by ``k``, not
by the drafter: the tokens after it keep being accepted, and the next step
continues the span (in the recorded traces of "Speculative Decoding:
Performance or Illusion?" a position's accepted length falls by one per
position along a span).  A span of ``S`` tokens (joined steps, the last one
accepting fewer than ``k``) takes ``ceil(S / (k' + 1))`` steps at ``k' <= k``;
at ``k' = k`` that is the run's own step count.  Counting a cut span as a
fresh average step instead (``T / mean(min(a, k') + 1)``) predicted the
study's InstructCoder n-gram speedups at k=1..4 5-12% low from a k=5 run and
21-27% low from a k=20 run (benchmarks/study_predictions.py).
``time(k') = sd_prefill + U * t_ref + sum(ceil(S / (k' + 1))) * t(k')``, and
the prediction is ``measured * time(k) / time(k')``.  Longer ``k' > k`` is
not predicted: a span cut at ``k`` hides how far it would have gone.

**The oracle.**  Each drafted step proposes exactly what it accepted
(cost ``t(a)``; a model drafter pays its fixed part even when that is
nothing).  From a run at ``k = 20`` this is the oracle of the study (Sec.
8.1, Fig. 9: spans of up to 20 proposed tokens); from a run at a smaller k
it is the *oracle at k*, spans cut at k (:func:`oracle_label`).
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

import numpy as np

from ..verdict.metric_names import _finite
from .acceptance import RequestSteps, StepTiming, drafted_step_ms, why_no_prediction
from .step_cost import StepCost, fit_step_cost

# The study's traces draft up to 20 tokens per position: its oracle needs a run at that k.
STUDY_ORACLE_K = 20


def oracle_label(k: int | None) -> str:
    """What `oracle_speedup` is for a run at draft length k, wherever it is shown (the key keeps its name)."""
    if isinstance(k, int) and k >= STUDY_ORACLE_K:
        return (
            f"the oracle of \"Speculative Decoding: Performance or Illusion?\" (Sec. 8.1, Fig. 9), from a run at "
            f"k={k}: each step proposing exactly what it accepted"
        )
    return (
        f"oracle at k={k}: each step proposing exactly what it accepted, spans cut at k={k}; not the study's "
        f"oracle (Sec. 8.1, Fig. 9), which needs a run at k={STUDY_ORACLE_K}"
    )


def run_drafted_step_ms(requests: Iterable[RequestSteps], timing: StepTiming) -> float:
    """This run's ``t_k`` (:func:`drafted_step_ms` with the requests' own step counts)."""
    requests = list(requests)
    return drafted_step_ms(timing, sum(len(r.accepted) for r in requests), sum(r.undrafted_steps for r in requests))


def spans(request: RequestSteps, k: int) -> list[int]:
    """Tokens of each accepted span: steps joined while a step accepted all ``k`` (the module docstring)."""
    out, running = [], 0
    for accepted, drafted in zip(request.accepted, request.drafted):
        running += accepted + 1
        if not (accepted == drafted == k):
            out.append(running)
            running = 0
    if running:
        out.append(running)
    return out


def _usable_cost(
    requests: list[RequestSteps], timing: StepTiming, measured_speedup: float, cost: StepCost | None
) -> StepCost | None:
    """`cost`, or the one fitted from this run alone when none is given; None when nothing can be predicted
    (a cost given stands in for the run's own drafted step, so that step is not checked then)."""
    if why_no_prediction(requests, timing, measured_speedup, own_step=cost is None):
        return None
    return cost or fit_step_cost(timing.reference_step_ms, {timing.k: run_drafted_step_ms(requests, timing)})


def _outside_drafted_steps(requests: list[RequestSteps], timing: StepTiming) -> float:
    """Prefill plus the undrafted steps: the same at every k."""
    return timing.sd_prefill_ms + sum(r.undrafted_steps for r in requests) * timing.reference_step_ms


def predict_speedups(
    requests: Iterable[RequestSteps], timing: StepTiming, measured_speedup: float, cost: StepCost | None = None
) -> dict[int, float]:
    """Predicted speedup at each ``k' = 1..k`` (the module docstring's model); all NaN when unpredictable.

    `cost` is the step cost to use (:func:`.step_cost.fit_step_cost`, with runs at other k where a test has
    them); None fits it from this run alone.
    """
    requests = list(requests)
    if (cost := _usable_cost(requests, timing, measured_speedup, cost)) is None:
        return {k: math.nan for k in range(1, timing.k + 1)}
    all_spans = np.array([s for r in requests for s in spans(r, timing.k)], dtype=float)
    outside = _outside_drafted_steps(requests, timing)

    def time(k: int) -> float:
        return outside + float(np.sum(np.ceil(all_spans / (k + 1)))) * cost.ms(k)

    base = time(timing.k)
    return {k: measured_speedup * base / time(k) for k in range(1, timing.k + 1)}


def best_k(predictions: Mapping[int, float]) -> int | None:
    """The k with the highest predicted speedup (near-ties to the smaller k); None without a finite one."""
    finite = sorted((k, s) for k, s in predictions.items() if _finite(s))
    if not finite:
        return None
    top = max(s for _, s in finite)
    return next(k for k, s in finite if math.isclose(s, top, rel_tol=1e-12))


def oracle_speedup(
    requests: Iterable[RequestSteps], timing: StepTiming, measured_speedup: float, cost: StepCost | None = None
) -> float:
    """The oracle (:func:`oracle_label`): each drafted step proposing exactly what it accepted, costed by
    `cost` (None: fitted from this run alone); NaN when unpredictable."""
    requests = list(requests)
    if (cost := _usable_cost(requests, timing, measured_speedup, cost)) is None:
        return math.nan
    accepted = [a for r in requests for a in r.accepted]
    outside = _outside_drafted_steps(requests, timing)
    measured_time = outside + len(accepted) * cost.ms(timing.k)
    return measured_speedup * measured_time / (outside + math.fsum(cost.ms(a) for a in accepted))
