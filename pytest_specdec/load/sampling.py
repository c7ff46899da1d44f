"""How each request samples its tokens: temperature, top-p, top-k and the seed policy.

A `Sampling` is part of a `Workload` (``@pytest.mark.workload("code_edit", temperature=0.8, top_p=0.95)``),
so both sides of a comparison, the reference shared across tests and a baseline's fingerprint all see the
same settings.  Greedy (temperature 0) is the default and sends exactly the body it always did: no
``top_p``, ``top_k`` or ``seed`` field, so baselines recorded before sampling existed still match.

The seed policy: ``"per_request"`` (the default) gives request i of a run the seed derived from the run's
seed and i, the same on both sides, so a sampled run is reproducible; ``"none"`` sends no seed, and the
server draws its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

__all__ = ["GREEDY", "SEED_POLICIES", "Sampling", "SamplingError"]

SEED_POLICIES = ("per_request", "none")
_SEED_MODULUS = 2**31 - 1  # engines take a 32-bit signed seed


class SamplingError(ValueError):
    """A sampling setting out of range; the message names the field."""


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int | None = None  # None: the engine's default (no cut)
    seed: str = "per_request"

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, Real) or not 0 <= t < math.inf:
            raise SamplingError(f"temperature must be a number >= 0 (0: greedy), got {t!r}")
        object.__setattr__(self, "temperature", float(t))
        p = self.top_p
        if isinstance(p, bool) or not isinstance(p, Real) or not 0 < p <= 1:
            raise SamplingError(f"top_p must be a number in (0, 1], got {p!r}")
        object.__setattr__(self, "top_p", float(p))
        k = self.top_k
        if k is not None and (isinstance(k, bool) or not isinstance(k, Integral) or k < 1):
            raise SamplingError(f"top_k must be an integer >= 1 or None, got {k!r}")
        if self.seed not in SEED_POLICIES:
            raise SamplingError(f"seed must be one of {', '.join(SEED_POLICIES)}, got {self.seed!r}")
        if self.greedy and (self.top_p != 1.0 or self.top_k is not None):
            raise SamplingError(
                f"top_p and top_k apply only when sampling (temperature > 0); temperature 0 is greedy, "
                f"got top_p={self.top_p!r}, top_k={self.top_k!r}"
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def request_fields(self, run_seed: int, index: int) -> dict[str, Any]:
        """The OpenAI body fields for request `index` of a run seeded `run_seed` (temperature always)."""
        fields: dict[str, Any] = {"temperature": self.temperature}
        if self.greedy:
            return fields
        if self.top_p != 1.0:
            fields["top_p"] = self.top_p
        if self.top_k is not None:
            fields["top_k"] = int(self.top_k)
        if self.seed == "per_request":
            fields["seed"] = request_seed(run_seed, index)
        return fields

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"temperature": self.temperature}
        if not self.greedy:
            out.update(top_p=self.top_p, top_k=self.top_k, seed=self.seed)
        return out

    def label(self) -> str:
        if self.greedy:
            return "greedy"
        parts = [f"temperature {self.temperature:g}"]
        if self.top_p != 1.0:
            parts.append(f"top_p {self.top_p:g}")
        if self.top_k is not None:
            parts.append(f"top_k {self.top_k}")
        return ", ".join(parts)


GREEDY = Sampling()


def request_seed(run_seed: int, index: int) -> int:
    """Request `index`'s seed in a run seeded `run_seed`: distinct across a run's requests, and across runs
    whose seeds differ (a repeat's, another test's)."""
    return (int(run_seed) * 1_000_003 + int(index)) % _SEED_MODULUS
