"""The mechanism figure, on request: SD's speedup against a reference on the SD side's engine path.

The headline comparison is against the reference as teams deploy it: what the
engine turned off because of the speculative method (vLLM's async scheduling
for `ngram`) is SD's cost and stays in it (measure.fairness, `engine_costs`).
Whether the method's drafting itself pays, on equal engine paths, is a second
question: with ``@pytest.mark.specdec_mechanism`` the reference is measured
once more with the settings the engine forced on the SD side (each engine's
`Engine.same_path`), which costs one more reference start, and the row shows
that speedup beside the deployed one, labelled.  Never the default: it
answers a question about the method, not about a deployment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from ..engines import engine_named
from .fairness import engine_costs, flags

LABEL = "mechanism (reference on SD's engine path)"


@dataclass
class Mechanism:
    """The mechanism comparison of one result: the reference settings it ran with and its own result."""

    settings: tuple[str, ...] = ()  # the reference's extra flags and environment, as a person would type them
    result: Any = field(default=None, repr=False)  # a SpecDecResult on equal paths; None when not measured
    note: str = ""  # why it was not measured, or what it found beside the figure

    def speedup(self, metric: str = "output_throughput") -> float:
        return self.result.speedup(metric) if self.result is not None else math.nan


def measure_mechanism(measurements, result, workload, pattern, prompts: list, *, seed: int = 0, logprobs=None):
    """`result`'s mechanism comparison: SD's runs against a reference started with the settings the engine
    forced on the SD side (one more reference start); nothing to measure when the engine forced none."""
    costs = engine_costs(result)
    if not costs:
        return Mechanism(note="the engine changed nothing for SD: the deployed speedup is the mechanism's")
    engine = engine_named(result.spec.engine)
    args, env = engine.same_path([cost.fact for cost in costs])
    settings = (*args, *(f"{name}={value}" for name, value in sorted(env.items())))
    if not settings:
        return Mechanism(note=f"{engine.title} names no settings that put a reference on SD's engine path")
    spec = result.spec.reference()
    spec = replace(spec, server_args=(*spec.server_args, *args), env=(*spec.env, *sorted(env.items())))
    runs = measurements.measure(spec, workload, pattern, prompts, seed=seed, logprobs=logprobs, what=LABEL)
    equal = replace(result, reference_runs=runs, remeasured=[], earlier_runs=(), mechanism=None)
    left = engine_costs(equal)  # a build that ignores a setting leaves the paths apart: said, never hidden
    note = "; ".join(f"still on another path: {cost.describe()}" for cost in left)
    return Mechanism(settings=settings, result=equal, note=note)


def mechanism_row(result) -> dict[str, Any] | None:
    """The mechanism figure for result rows and results.json (None when the test did not ask for it)."""
    found = getattr(result, "mechanism", None)
    if found is None:
        return None
    row: dict[str, Any] = {"label": LABEL, "reference_settings": list(found.settings), "note": found.note}
    if found.result is not None:
        row["speedup_output_throughput"] = _finite(found.speedup("output_throughput"))
        row["speedup_tpot"] = _finite(found.speedup("median_tpot_ms"))
        row["reference_output_throughput"] = _finite(
            found.result.reference_runs[0].metrics.as_dict().get("output_throughput", math.nan)
        )
        row["fairness_flags"] = [flag.as_dict() for flag in flags(found.result)]
    return row


def describe_mechanism(row: dict[str, Any], deployed: float | None) -> str:
    """One line for the reports: the deployed speedup and the mechanism's, labelled."""
    shown = row.get("speedup_output_throughput")
    text = f"deployed {deployed:.2f}x" if isinstance(deployed, (int, float)) and math.isfinite(deployed) else ""
    if shown is not None:
        text += ("; " if text else "") + f"{LABEL} {shown:.2f}x"
        if row.get("reference_settings"):
            text += f" (reference with {' '.join(row['reference_settings'])})"
    if row.get("note"):
        text += ("; " if text else "") + row["note"]
    return text


def _finite(value: float) -> float | None:
    return round(value, 4) if isinstance(value, (int, float)) and math.isfinite(value) else None
