"""Forced acceptance: SD's machinery measured apart from the draft and the prompts.

An engine can be told to accept draft tokens at a set rate whether or not they match the target
(benchmarking only).  What is left to measure is what speculation costs the engine per step: drafting,
verifying k+1 positions, rejection sampling, scheduling.  The test declares it in the speculative config,
in vLLM's words as the rest of the config (`rejection_sample_method: "synthetic"` with exactly one of
`synthetic_acceptance_length` or `synthetic_acceptance_rates`), and each engine module translates it into
its own keys, flags or environment, or refuses it by name where it has none.

Two limits follow from what forcing is.  Only a drafter that proposes k tokens every step can be forced: an
n-gram or suffix lookup that finds no match proposes nothing, and no setting accepts what was never
drafted.  And the outputs are no longer the target's, so output equivalence does not apply, and both sides
must decode the same number of tokens (no natural stops), or they decode different amounts of work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .server_spec import KNOWN_METHODS, METHODS_WITH_DRAFT_MODEL, MarkerError

FORCING_KEY = "rejection_sample_method"
FORCED = "synthetic"
LENGTH_KEY = "synthetic_acceptance_length"
RATES_KEY = "synthetic_acceptance_rates"
KEYS = frozenset({FORCING_KEY, LENGTH_KEY, RATES_KEY})

# Drafters that propose k tokens at every step: a model of their own (a draft model, EAGLE, Medusa, an MLP
# speculator) or the target's own extra heads (MTP).  Forcing acceptance is meaningful only for these.
ALWAYS_PROPOSING = METHODS_WITH_DRAFT_MODEL | frozenset(m for m in KNOWN_METHODS if m == "mtp" or m.endswith("_mtp"))
LOOKUPS = frozenset({"ngram", "ngram_gpu", "suffix"})


def forced_keys(config: Mapping[str, Any]) -> frozenset[str]:
    """The forcing keys an engine other than vLLM takes in `config`: all of them when it forces acceptance
    (`rejection_sample_method: "synthetic"`), none otherwise (another rejection sampler is vLLM's alone)."""
    return KEYS if config.get(FORCING_KEY) == FORCED else frozenset()


@dataclass(frozen=True)
class ForcedAcceptance:
    """The acceptance a test forces: per-position rates, and the mean length if that is how it was given.

    `rates[i]` is the unconditional probability that the first i+1 drafted tokens are all accepted (vLLM's
    definition), so the expected acceptance length, counting the token the target adds at every step, is
    1 + sum(rates).
    """

    rates: tuple[float, ...]
    declared_length: float | None = None

    @property
    def length(self) -> float:
        """The expected acceptance length, the target's own token included."""
        return 1.0 + sum(self.rates)

    def label(self) -> str:
        """How a row, summary or report names the figure measured under it."""
        return f"at forced acceptance {self.length:.2f}"


def rates_for_length(length: float, k: int) -> tuple[float, ...]:
    """Per-position rates that give a mean acceptance length of `length` with the least variance.

    Every step accepts the same whole number of drafts, and one more with the fractional remainder's
    probability: length 2.5 at k=4 is (1, 0.5, 0, 0).  vLLM resolves a length the same way.
    """
    accepted = length - 1.0
    whole = int(accepted)
    rates = [1.0] * whole + [accepted - whole] + [0.0] * k
    return tuple(rates[:k])


def forced_acceptance(config: Mapping[str, Any] | None) -> ForcedAcceptance | None:
    """The acceptance `config` forces, validated, or None when it forces none.

    Raises MarkerError naming the field at fault, as vLLM's own `SpeculativeConfig` refuses it (exactly one
    of the length and the rates; a length in [1, k+1]; k rates in [0, 1], non-increasing), and for a
    drafter that cannot be forced.
    """
    if config is None or not (KEYS & set(config)):
        return None
    method_value = config.get(FORCING_KEY, "standard")
    if method_value != FORCED:
        if LENGTH_KEY in config or RATES_KEY in config:
            raise MarkerError(
                f"speculative_config.{LENGTH_KEY if LENGTH_KEY in config else RATES_KEY}",
                f"forces acceptance only with {FORCING_KEY}={FORCED!r}, got {FORCING_KEY}={method_value!r}",
            )
        return None  # another rejection sampler ("standard", "block"): nothing forced
    method = config.get("method")
    if method in LOOKUPS:
        raise MarkerError(
            f"speculative_config.{FORCING_KEY}",
            f"cannot force acceptance for method {method!r}: a lookup that finds no match proposes nothing, and "
            f"forcing cannot accept what was never drafted; force a drafter that always proposes "
            f"({', '.join(sorted(ALWAYS_PROPOSING))})",
        )
    if method not in ALWAYS_PROPOSING:
        raise MarkerError(
            f"speculative_config.{FORCING_KEY}",
            f"cannot force acceptance for method {method!r}: the plugin knows it proposes k tokens every step "
            f"only for {', '.join(sorted(ALWAYS_PROPOSING))}",
        )
    k = config.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise MarkerError("speculative_config.num_speculative_tokens", f"must be an integer >= 1, got {k!r}")
    has_length, has_rates = LENGTH_KEY in config, RATES_KEY in config
    if has_length == has_rates:
        raise MarkerError(
            f"speculative_config.{FORCING_KEY}",
            f"{FORCED!r} needs exactly one of {LENGTH_KEY} (a mean acceptance length in [1, {k + 1}]) or "
            f"{RATES_KEY} ({k} per-position rates), got {'both' if has_length else 'neither'}",
        )
    if has_length:
        length = config[LENGTH_KEY]
        if isinstance(length, bool) or not isinstance(length, (int, float)) or not 1.0 <= length <= k + 1:
            raise MarkerError(
                f"speculative_config.{LENGTH_KEY}",
                f"must be a mean acceptance length in [1, {k + 1}] (1: nothing accepted; k+1={k + 1}: every "
                f"draft accepted), got {length!r}",
            )
        return ForcedAcceptance(rates_for_length(float(length), k), float(length))
    rates = config[RATES_KEY]
    name = f"speculative_config.{RATES_KEY}"
    if isinstance(rates, (str, bytes)) or not isinstance(rates, (list, tuple)) or len(rates) != k:
        raise MarkerError(name, f"must be a list of {k} per-position rates (one per drafted token), got {rates!r}")
    for index, rate in enumerate(rates):
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
            raise MarkerError(f"{name}[{index}]", f"must be a probability in [0, 1], got {rate!r}")
        if index and rate > rates[index - 1]:
            raise MarkerError(
                f"{name}[{index}]",
                f"must not exceed the rate before it ({rates[index - 1]!r}): rate i is the probability that the "
                f"first i+1 drafts are all accepted, got {rate!r}",
            )
    return ForcedAcceptance(tuple(float(rate) for rate in rates))


def forced_at(config: Mapping[str, Any], length: float) -> dict[str, Any]:
    """`config` forced at mean acceptance length `length` instead of what it forced (a sweep's point),
    validated as `forced_acceptance` validates a marker's."""
    if forced_acceptance(config) is None:
        raise MarkerError(
            f"speculative_config.{FORCING_KEY}",
            f"a forced-acceptance sweep needs a config that forces acceptance ({FORCING_KEY}={FORCED!r} with "
            f"{LENGTH_KEY} or {RATES_KEY}), so the engine's support is checked at collection",
        )
    swept = {key: value for key, value in config.items() if key != RATES_KEY}
    swept[LENGTH_KEY] = length
    forced_acceptance(swept)
    return swept


# How far a measured mean acceptance length may sit from the forced one and still count as honoured: vLLM's
# own test of its synthetic sampler allows 0.15 tokens; over few drafting steps the schedule's own sampling
# spread can be wider, and then four of its standard errors.
HONOURED_TOKENS = 0.15
HONOURED_STANDARD_ERRORS = 4.0


def honoured_band(forced: ForcedAcceptance, steps: int, schedule_known: bool = True) -> float:
    """The largest |measured - forced| mean acceptance length that counts as the engine honouring `forced`,
    over `steps` drafting steps: 0.15 tokens, or four standard errors of the forced schedule's mean.

    A length given as rates is the engine's schedule; a length given as a mean is resolved by the engine,
    the least-variance way where `schedule_known` (vLLM, SGLang's match-expected, TensorRT-LLM's whole
    counts), else in a way the plugin cannot read, and then the widest spread a schedule of that mean can
    have is assumed: all k drafts accepted or none.
    """
    mean = sum(forced.rates)
    if schedule_known or forced.declared_length is None:
        # X, the drafts a step accepts, has P(X >= i) = rates[i-1]: E[X] = sum(r), E[X^2] = sum((2i - 1) r_i).
        second = sum((2 * i - 1) * rate for i, rate in enumerate(forced.rates, start=1))
    else:
        k = len(forced.rates)
        second = k * mean  # X = k with probability mean / k, else 0
    spread = max(second - mean * mean, 0.0) ** 0.5
    return max(HONOURED_TOKENS, HONOURED_STANDARD_ERRORS * spread / max(steps, 1) ** 0.5)


def honoured_range(
    forced: ForcedAcceptance, steps: int, requests: int, schedule_known: bool = True
) -> tuple[float, float]:
    """The mean acceptance lengths that count as honouring `forced` over `steps` drafting steps of `requests`
    requests: `honoured_band` either side, and below it room for each request's last step, which the
    request's fixed length can cut short (up to every forced draft of that step not accepted)."""
    band = honoured_band(forced, steps, schedule_known)
    cut = requests * sum(forced.rates) / max(steps, 1)
    return forced.length - band - cut, forced.length + band
