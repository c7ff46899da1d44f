"""Energy per output token with and without SD, from the counters read around each run (serving.energy).

Per side, the median over repeats of a run's energy over its output tokens; the ratio is the median of the
repeats' SD / reference ratios (repeat i of both sides sent the same prompts).  A ratio above 1 is SD spending
more energy per token than the reference: possible while it is faster, since drafting and verifying are
compute the reference never does.  The counters measure whole devices (a GPU, a CPU package) over the run's
wall time: idle power is in it, and so is anything else the device ran.
"""

from __future__ import annotations

import statistics
from typing import Any


def _per_token(run) -> tuple[float | None, str | None]:
    reading = getattr(run, "energy", None)
    if reading is None:
        return None, "the run's energy was not read"
    if reading.joules is None:
        return None, reading.problem or "no energy counter"
    tokens = sum(r.output_tokens for r in run.records if r.success)
    if tokens <= 0:
        return None, "the run produced no output tokens"
    return reading.joules / tokens, None


def energy_figures(result) -> dict[str, Any]:
    """`{"source", "reference_j_per_token", "speculative_j_per_token", "ratio", "unavailable"}` for a result;
    the figures None and `unavailable` the reason where either side could not be read."""
    pairs = result.repeat_pairs()
    reference = [_per_token(ref) for ref, _ in pairs]
    speculative = [_per_token(sd) for _, sd in pairs]
    why = next((w for _, w in reference + speculative if w), None)
    source = next(
        (run.energy.source for pair in pairs for run in pair if getattr(run, "energy", None) and run.energy.source),
        None,
    )
    if why or not pairs:
        return {
            "source": source,
            "reference_j_per_token": None,
            "speculative_j_per_token": None,
            "ratio": None,
            "unavailable": why or "no measured run",
        }
    ratios = [sd / ref for (ref, _), (sd, _) in zip(reference, speculative) if ref > 0]
    return {
        "source": source,
        "reference_j_per_token": statistics.median(v for v, _ in reference),
        "speculative_j_per_token": statistics.median(v for v, _ in speculative),
        "ratio": statistics.median(ratios) if ratios else None,
        "unavailable": None if ratios else "the reference's runs used no energy to divide by",
    }


def describe_energy(figures: dict[str, Any]) -> str:
    if figures["unavailable"]:
        return f"unavailable: {figures['unavailable']}"
    return (
        f"{figures['reference_j_per_token']:.4g} J per output token without SD, "
        f"{figures['speculative_j_per_token']:.4g} J with ({figures['ratio']:.2f}x; {figures['source']})"
    )
