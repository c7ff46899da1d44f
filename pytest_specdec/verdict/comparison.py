"""What a baseline can be compared on: the machine decides, never the engine.

On the same machine (verdict.machine: hardware identity, probe within its
band) every gated figure is compared, across engine versions too, and for
each absolute figure the reference's own value beside SD's: an engine that
decodes everything 12% slower is a regression of the engine, and the gate
says the reference itself slowed down.  On another machine, or on this
hardware with a probe that moved, only what travels is compared: acceptance
and the per-request acceptance lengths.  Speedups do not travel: the same
n-gram config on the same prompts paid 1.04x, 1.28x and 1.42x on three
2-core boxes of one kind with acceptance unchanged (docs/writing-tests.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .metric_names import SD_RATIO_METRICS, SPEEDUP_PREFIX, is_machine_bound
from .fingerprint import reference_step_ms
from .machine import MachineMatch

# Fields whose change is the engine's (or its libraries'), named when the baseline's differ.
ENGINE_FIELDS = ("engine", "engine_version", "engine_build", "torch_version")


def is_ratio(metric: str) -> bool:
    """Speedups and SD's ratios (acceptance, capacity ratio): the rest is tok/s and ms of one side."""
    return metric.startswith(SPEEDUP_PREFIX) or metric in SD_RATIO_METRICS


def travels(metric: str) -> bool:
    """Figures a baseline from another machine may gate: acceptance-type ratios, not speedups or loads."""
    return is_ratio(metric) and not is_machine_bound(metric)


@dataclass(frozen=True)
class ComparisonPlan:
    """Which gated figures this baseline can be compared on, and why not where it cannot."""

    machine: MachineMatch
    engine_changes: dict  # field -> (recorded, now)
    recorded_step_ms: float | None  # the reference's decode step then and now (informational: an engine moves it)
    measured_step_ms: float | None

    @classmethod
    def of(
        cls,
        recorded_fp: dict[str, Any],
        current_fp: dict[str, Any],
        recorded_repeats: list[dict],
        current_repeats: list[dict],
    ) -> "ComparisonPlan":
        changes = {
            k: (recorded_fp.get(k), current_fp.get(k)) for k in ENGINE_FIELDS if recorded_fp.get(k) != current_fp.get(k)
        }
        return cls(
            MachineMatch.of(recorded_fp, current_fp),
            changes,
            reference_step_ms(recorded_repeats),
            reference_step_ms(current_repeats),
        )

    def skip_reason(self, metric: str) -> str | None:
        """Why `metric` is not compared with this baseline (None: it is)."""
        if self.machine.same or travels(metric):
            return None
        where = "another machine" if not self.machine.same_hardware else "this hardware with a machine probe that moved"
        what = "a speedup is the machine's as much as SD's" if is_ratio(metric) else "tok/s and ms are the machine's"
        return f"{where}: {what}"

    def compares_reference(self, metric: str) -> bool:
        """Whether the reference's own value of an absolute figure is compared beside SD's."""
        return self.machine.same and not is_ratio(metric)

    def describe(self, skipped: dict[str, str]) -> str:
        """The comparison the gate made, for the failure message, the terminal summary and the reports."""
        lines = []
        if self.machine.same:
            lines.append(
                "same machine: every gated figure compared, the reference's own tok/s and ms included"
                + (f"; not compared: {', '.join(skipped)} (still flagged after measuring again)" if skipped else "")
            )
        else:
            lines.append(
                f"{'another machine' if not self.machine.same_hardware else 'machine probe moved'}: only "
                f"acceptance-type figures compared; not compared: {', '.join(skipped) or '-'} (record a "
                "baseline on this machine with --specdec-update-baselines to gate them)"
            )
        lines.append(f"machine: {self.machine.describe()}")
        if self.machine.software_changes:  # a driver upgrade the GPU probe saw no change from: the same machine
            lines.append(
                "GPU software changed since the baseline: "
                + "; ".join(f"{k} {a} -> {b}" for k, (a, b) in self.machine.software_changes.items())
                + (" (the GPU probe decides whether the machine moved)")
            )
        if self.engine_changes:
            lines.append(
                "engine changed since the baseline: "
                + "; ".join(f"{k} {a} -> {b}" for k, (a, b) in self.engine_changes.items())
            )
        if self.recorded_step_ms is not None and self.measured_step_ms is not None:
            change = self.measured_step_ms / self.recorded_step_ms - 1
            lines.append(
                f"reference decode step: {self.measured_step_ms:.1f} ms per token here, "
                f"{self.recorded_step_ms:.1f} ms when recorded ({change:+.1%}; the engine's speed, "
                "not the machine's identity)"
            )
        return "\n".join(lines)


def reference_slowdowns(verdicts) -> str | None:
    """ "the reference itself is 12% slower (...)" when a reference-side figure regressed, else None."""
    worse = [
        v
        for v in verdicts
        if v is not None and v.regression and v.metric.endswith(" (reference)") and not math.isnan(v.change)
    ]
    if not worse:
        return None
    parts = ", ".join(f"{v.metric.removesuffix(' (reference)')} {v.change:+.1%}" for v in worse)
    size = max(-v.change for v in worse)
    return (
        f"the reference itself is {size:.0%} slower ({parts}): the engine's plain decoding regressed on this "
        "machine, not only SD"
    )
