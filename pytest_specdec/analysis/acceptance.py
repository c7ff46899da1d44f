"""Per-step acceptance of SD requests, and what other draft lengths would have given.

An SD step drafts up to ``k`` tokens; the target accepts a prefix of ``a`` of
them and the step emits ``a + 1``.  vLLM reports ``a`` and the drafted count of
each step that drafted (:func:`steps_from_server`, source ``"server"``); a step
that drafted nothing (an n-gram without a match) is not listed and emits one
token, and the first output token is the prefill's.  Without those arrays each
streamed chunk after the first is taken for one step (:func:`steps_from_chunks`,
source ``"estimate"``, and labelled so).

Predictions for other draft lengths, best k and the oracle are in :mod:`.predictions`; this module
holds the per-step data they start from and :func:`why_no_prediction`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..verdict.metric_names import _finite

SOURCES = ("server", "estimate")
# Output lengths spread wider than max/min > LENGTH_SPREAD are binned per length class,
# at most MAX_LENGTH_CLASSES of them (by quartiles): where acceptance falls off along
# the output is only comparable between outputs of about the same length.
LENGTH_SPREAD = 1.5
MAX_LENGTH_CLASSES = 4
PERCENTILES = (5, 10, 25, 50, 75, 95)


@dataclass(frozen=True)
class RequestSteps:
    """One request's drafted steps in order; `source` ``"server"`` or ``"estimate"`` (drafted is then always k)."""

    accepted: tuple[int, ...]
    drafted: tuple[int, ...]
    output_tokens: int
    source: str

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {self.source!r}")
        if len(self.accepted) != len(self.drafted):
            raise ValueError(f"{len(self.accepted)} accepted counts but {len(self.drafted)} drafted counts")

    @property
    def acceptance_length(self) -> float:
        """``1 + mean(accepted)``, tokens per drafted step (vLLM's mean acceptance length); NaN without steps."""
        return 1.0 + sum(self.accepted) / len(self.accepted) if self.accepted else math.nan

    @property
    def tokens_per_step(self) -> list[int]:
        """``a + 1`` for each drafted step, in order."""
        return [a + 1 for a in self.accepted]

    @property
    def undrafted_steps(self) -> int:
        """Steps that drafted nothing: ``n - 1 - sum(a + 1)``, at least 0 (the last step can overrun max_tokens)."""
        return max(0, self.output_tokens - 1 - sum(self.tokens_per_step))

    def step_fractions(self) -> list[float]:
        """Where each drafted step starts, as a fraction of the output in [0, 1).

        Where the undrafted steps fell is not reported, so the drafted steps are
        laid end to end and stretched over the whole output: step ``s`` starts at
        (tokens of the drafted steps before it) / (tokens of all drafted steps).
        """
        total, before, starts = sum(self.tokens_per_step), 0, []
        for tokens in self.tokens_per_step:
            starts.append(before / total)
            before += tokens
        return starts

    def step_positions(self) -> list[float]:
        """:meth:`step_fractions` scaled to output positions (0-based index after the prefill's token)."""
        return [f * max(self.output_tokens - 1, 0) for f in self.step_fractions()]


def _positive_int(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def _counts(values: Any, name: str) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ValueError(f"{name} must be a list of ints, got {type(values).__name__}")
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}[{i}] must be an int >= 0, got {value!r}")
    return tuple(values)


def steps_from_server(spec_decoding: Mapping[str, Any] | None, output_tokens: int) -> RequestSteps | None:
    """A request's steps from vLLM's ``metrics.speculative_decoding``; None without per-step arrays.

    Raises ValueError naming the field when the arrays are malformed (one
    missing, lengths differ, a negative count, more accepted than drafted).
    """
    raw = {name: (spec_decoding or {}).get(name) for name in ("per_step_accepted", "per_step_drafted")}
    missing = [name for name, value in raw.items() if value is None]
    if missing:
        if len(missing) == 2:
            # vLLM leaves both arrays out when they would be empty: a request that never
            # reached a verify step (one output token, or nothing drafted) has zero steps.
            steps = (spec_decoding or {}).get("num_spec_steps")
            if steps == 0 and "num_draft_tokens" in (spec_decoding or {}):
                _counts([output_tokens], "output_tokens")
                return RequestSteps((), (), output_tokens, "server")
            return None
        raise ValueError(f"speculative_decoding has no {missing[0]} beside the other per-step array")
    accepted, drafted = (_counts(value, name) for name, value in raw.items())
    if len(accepted) != len(drafted):
        raise ValueError(f"per_step_accepted has {len(accepted)} steps but per_step_drafted has {len(drafted)}")
    for i, (a, d) in enumerate(zip(accepted, drafted)):
        if a > d:
            raise ValueError(f"per_step_accepted[{i}] = {a} exceeds per_step_drafted[{i}] = {d}")
    _counts([output_tokens], "output_tokens")
    return RequestSteps(accepted, drafted, output_tokens, "server")


def steps_from_chunks(chunk_token_counts: Sequence[int], k: int) -> RequestSteps:
    """Estimated steps from the tokens each streamed chunk carried (source ``"estimate"``).

    The first chunk is the prefill's token (extra tokens in it are one step);
    a later chunk of ``c`` tokens is a step accepting ``min(c - 1, k)`` of ``k``;
    empty chunks are no step.  Biases: an undrafted step reads as a rejected
    one; coalesced chunks read as one step (tokens past ``k + 1`` as undrafted).
    """
    _positive_int(k, "k")
    counts = [c for c in _counts(list(chunk_token_counts), "chunk_token_counts") if c]
    steps = ([counts[0] - 1] if counts and counts[0] > 1 else []) + counts[1:]
    accepted = tuple(min(c - 1, k) for c in steps)
    return RequestSteps(accepted, (k,) * len(accepted), sum(counts), "estimate")


@dataclass(frozen=True)
class Percentiles:
    """Percentiles (numpy, linear), mean and population std of some values; NaN and count 0 when empty."""

    p5: float
    p10: float
    p25: float
    p50: float
    p75: float
    p95: float
    mean: float
    std: float
    count: int

    @classmethod
    def of(cls, values: Iterable[float]) -> "Percentiles":
        data = np.asarray(list(values), dtype=float)
        if data.size == 0:
            return cls(*[math.nan] * 8, count=0)
        quantiles = np.percentile(data, PERCENTILES, method="linear")
        return cls(*(float(q) for q in quantiles), float(data.mean()), float(data.std()), int(data.size))


def request_length_distribution(requests: Iterable[RequestSteps]) -> tuple[Percentiles, int]:
    """Distribution of per-request acceptance lengths, and how many requests had no drafted step (left out)."""
    requests = list(requests)
    lengths = [r.acceptance_length for r in requests if r.accepted]
    return Percentiles.of(lengths), len(requests) - len(lengths)


def _length_classes(requests: list[RequestSteps], classes: int | None) -> dict[str, list[RequestSteps]]:
    lengths = np.array([r.output_tokens for r in requests], dtype=float)
    if classes is None:
        classes = MAX_LENGTH_CLASSES if lengths.max() > LENGTH_SPREAD * lengths.min() else 1
    _positive_int(classes, "classes")
    if classes == 1:
        return {"all": requests}
    edges = np.percentile(lengths, np.linspace(0, 100, classes + 1)[1:-1])
    index = np.searchsorted(edges, lengths, side="right")
    groups: dict[str, list[RequestSteps]] = {}
    for i in range(classes):
        members = [r for r, j in zip(requests, index) if j == i]
        if members:  # equal quartiles leave some classes empty
            lo, hi = min(r.output_tokens for r in members), max(r.output_tokens for r in members)
            groups[f"{lo}-{hi} tokens" if lo != hi else f"{lo} tokens"] = members
    return groups


def acceptance_by_position(
    requests: Iterable[RequestSteps], bins: int = 10, classes: int | None = None
) -> dict[str, list[float]]:
    """Mean tokens per drafted step (``a + 1``) in each of `bins` stretches of the output, pooled over requests.

    Keyed by length class: one class ``"all"`` when output lengths stay within
    ``LENGTH_SPREAD`` of each other, else up to four (``"64-128 tokens"``) by
    quartiles of output length; `classes` forces the number.  Steps are placed
    by :meth:`RequestSteps.step_fractions`.  A bin without steps is NaN.
    """
    _positive_int(bins, "bins")
    drafted = [r for r in requests if r.accepted]
    if not drafted:
        return {"all": [math.nan] * bins}
    table = {}
    for label, members in _length_classes(drafted, classes).items():
        starts = np.array([f for r in members for f in r.step_fractions()])
        where = np.minimum((starts * bins).astype(int), bins - 1)
        tokens = np.array([t for r in members for t in r.tokens_per_step], dtype=float)
        sums, counts = np.bincount(where, tokens, bins), np.bincount(where, minlength=bins)
        table[label] = [float(s / c) if c else math.nan for s, c in zip(sums, counts)]
    return table


def per_position_rates(requests: Iterable[RequestSteps], k: int) -> list[float]:
    """Rate at draft position ``i`` (0-based): steps with ``a > i`` / steps with ``drafted > i``; NaN if none drafted i.

    vLLM's Prometheus per-position counter over all drafts gives the same when
    every step drafts ``k``; where steps draft fewer (short n-gram matches) its
    late positions are diluted by steps that never drafted them, this is not.
    """
    _positive_int(k, "k")
    pairs = [(a, d) for r in requests for a, d in zip(r.accepted, r.drafted)]
    reached = [[a for a, d in pairs if d > i] for i in range(k)]
    return [sum(a > i for a in kept) / len(kept) if kept else math.nan for i, kept in enumerate(reached)]


@dataclass(frozen=True)
class StepTiming:
    """The step-cost model's measured times in milliseconds (see the module docstring)."""

    reference_step_ms: float  # reference decode time per token: sum(latency - ttft) / sum(n - 1)
    sd_decode_ms: float  # SD run: sum(latency - ttft)
    sd_prefill_ms: float  # SD run: sum(ttft)
    k: int

    def __post_init__(self):
        _positive_int(self.k, "k")


def why_no_prediction(
    requests: Iterable[RequestSteps], timing: StepTiming, measured_speedup: float, *, own_step: bool = True
) -> str | None:
    """Why :func:`.predictions.predict_speedups` and :func:`.predictions.oracle_speedup` give NaN without a step
    cost given to them; None when they can predict.  `own_step` False leaves out the check that needs the run's
    own drafted step (a caller that costs the steps another way, as the analyses do when it is rejected)."""
    requests = list(requests)
    accepted = [a for r in requests for a in r.accepted]
    if not accepted:
        return "no request had a drafted step, so there is no acceptance to re-draft"
    checks = (
        ("reference decode time per token", timing.reference_step_ms, True),
        ("SD decode time", timing.sd_decode_ms, True),
        ("SD prefill time", timing.sd_prefill_ms, False),
        ("measured speedup", measured_speedup, True),
    )
    for name, value, positive in checks:
        if not (_finite(value) and (value > 0 if positive else value >= 0)):
            return f"the {name} is {value!r}, not a finite number {'> 0' if positive else '>= 0'}"
    if max(accepted) > timing.k:
        return f"a step accepted {max(accepted)} tokens, more than k={timing.k}: the steps are from another k"
    undrafted = sum(r.undrafted_steps for r in requests)
    if timing.sd_decode_ms <= undrafted * timing.reference_step_ms:
        return (
            f"the {undrafted} undrafted steps at {timing.reference_step_ms:.3g} ms take the whole SD decode time "
            f"({timing.sd_decode_ms:.3g} ms), leaving nothing for the drafted steps"
        )
    t_k = drafted_step_ms(timing, len(accepted), undrafted)
    if own_step and t_k < timing.reference_step_ms * (1 - 1e-9):  # equal within float error: a free draft
        # The same reason c is rejected for (step_figures.cost_ratio_of): a step model below the plain step
        # predicts an oracle under the speedup measured.
        return (
            f"the drafted step timed {t_k:.3g} ms, faster than the reference's plain decode step "
            f"({timing.reference_step_ms:.3g} ms) which it contains: the two servers' speeds differ by more than "
            "drafting costs, so there is no step cost to predict with"
        )
    return None


def drafted_step_ms(timing: StepTiming, drafted_steps: float, undrafted_steps: float) -> float:
    """``t_k`` from ``sd_decode = D * t_k + U * t_ref``; NaN when ``D`` is 0 or the undrafted steps take it all."""
    rest = timing.sd_decode_ms - undrafted_steps * timing.reference_step_ms
    return rest / drafted_steps if drafted_steps > 0 and rest > 0 else math.nan


def compare_estimate(server: RequestSteps, estimate: RequestSteps) -> dict[str, float | int]:
    """How close the chunk estimate comes to the server's steps for one request.

    Steps are aligned in order over the shorter list (``zip``): the first
    undrafted step (which the estimate reads as a rejected step) or coalesced
    chunk shifts every later pair, so a low `step_agreement` may be
    misalignment rather than misread steps.
    """
    pairs = list(zip(server.accepted, estimate.accepted))
    return {
        "server_acceptance_length": server.acceptance_length,
        "estimate_acceptance_length": estimate.acceptance_length,
        "acceptance_length_difference": abs(server.acceptance_length - estimate.acceptance_length),
        "steps_compared": len(pairs),
        "step_agreement": sum(s == e for s, e in pairs) / len(pairs) if pairs else math.nan,
    }
