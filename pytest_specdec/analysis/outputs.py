"""SD outputs against the reference's, request by request: token ids, or text when a server sends none.

SD is exact in theory, but batch shapes and kernel numerics make greedy
outputs diverge sometimes; a comparison says where, with both continuations.
A side with neither token ids nor text leaves the match rate unavailable,
never 100%.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

CONTEXT_TOKENS = 5  # tokens of context shown on each side of a divergence
CONTEXT_CHARS = 24  # the same when outputs are compared as text


@dataclass(frozen=True)
class RequestComparison:
    index: int
    identical: bool
    first_divergence: int | None  # position of the first difference (token, or character by text), None if identical
    reference_tokens: int
    speculative_tokens: int
    reference_context: list[int] = field(default_factory=list)  # token ids around the divergence
    speculative_context: list[int] = field(default_factory=list)
    reference_text: str = ""  # decoded continuation from the divergence, when a tokenizer was given
    speculative_text: str = ""


@dataclass(frozen=True)
class OutputComparison:
    """Request-by-request comparison of one SD run's outputs with the reference run's.

    `basis` says what was compared: ``"token ids"`` (exact), ``"text"`` when a
    server sent no token ids (older vLLM, other engines; positions are then
    characters), or None when neither side gave anything to compare, in which
    case `problem` says why and the match rate is unavailable, never 100%.
    """

    requests: list[RequestComparison]
    basis: str | None = "token ids"
    problem: str | None = None

    @property
    def match_rate(self) -> float:
        """Fraction of requests whose SD output equals the reference's; NaN when unavailable."""
        if self.problem or not self.requests:
            return math.nan
        return sum(r.identical for r in self.requests) / len(self.requests)

    @property
    def diverged(self) -> list[RequestComparison]:
        return [r for r in self.requests if not r.identical]


def _lacks_ids(records) -> bool:
    return any(record.output_tokens > 0 and not record.token_ids for record in records)


def compare_outputs(reference_records, speculative_records, decode=None, sampling=None) -> OutputComparison:
    """Compare outputs request by request (the same prompts, in order): token ids when both
    sides have them, else text; unavailable when a side has neither, or when the outputs were
    sampled (`sampling` at a temperature above 0: see `same_distribution`)."""
    if len(reference_records) != len(speculative_records):
        raise ValueError(
            f"runs differ in request count: reference {len(reference_records)}, SD {len(speculative_records)}"
        )
    if sampling is not None and not sampling.greedy:
        # Lossless SD promises the reference's distribution, not its tokens: with the same seed, rejection
        # sampling draws its random numbers in another order, so a token-by-token match rate would measure that.
        return OutputComparison(
            [],
            basis=None,
            problem=f"the outputs were sampled ({sampling.label()}), so they are not compared token by token: "
            "lossless SD keeps the reference's distribution, not its tokens; result.assert_same_distribution() "
            "tests that",
        )
    by_text = _lacks_ids(reference_records) or _lacks_ids(speculative_records)
    if by_text and any(
        record.output_tokens > 0 and not record.text for record in [*reference_records, *speculative_records]
    ):
        return OutputComparison(
            [],
            basis=None,
            problem="a server sent neither token ids nor text for its output, so outputs cannot be compared",
        )
    compared = []
    for ref, sd in zip(reference_records, speculative_records):
        a, b = (ref.text, sd.text) if by_text else (list(ref.token_ids), list(sd.token_ids))
        if a == b:
            compared.append(RequestComparison(ref.index, True, None, len(a), len(b)))
            continue
        position = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        span = CONTEXT_CHARS if by_text else CONTEXT_TOKENS
        lo, hi = max(0, position - span), position + span
        if by_text:
            compared.append(RequestComparison(ref.index, False, position, len(a), len(b), [], [], a[lo:hi], b[lo:hi]))
            continue
        compared.append(
            RequestComparison(
                ref.index,
                False,
                position,
                len(a),
                len(b),
                a[lo:hi],
                b[lo:hi],
                decode(a[lo:hi]) if decode else "",
                decode(b[lo:hi]) if decode else "",
            )
        )
    return OutputComparison(compared, basis="text" if by_text else "token ids")
