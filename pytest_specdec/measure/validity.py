"""Every constrained output checked against its constraint, on both sides, and the constrained-versus-free
figures of one row.

`check_output` is the one validator (``jsonschema`` for schemas and tool-call arguments, ``re.fullmatch`` for
a regex, equality for a choice); `side_validity` applies it to a side's runs; `ConstrainedFigures` is the
result's part (`result.constraints`) that fails a test on an invalid output (naming the request, the side, the output and the
validator's message) and puts both runs' figures in one row.  A reference-side invalid output is the engine's
constrained decoding (or a max_tokens too small for the answer), not SD: the message says so.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

# vLLM 0.32 subtracts grammar-invalidated drafts from its drafted count (v1/core/sched/scheduler.py,
# make_spec_decoding_stats: num_invalid_spec_tokens) and reports them nowhere, on its metrics page or per request.
GRAMMAR_REJECTED_UNAVAILABLE = (
    "unavailable: the engine reports no count of drafts its grammar rejected (vLLM 0.32 drops them from the "
    "drafted count before counting)"
)

if TYPE_CHECKING:  # the result holds this part; the part reads the result's fields
    from .result import SpecDecResult
_EXCERPT = 200


def check_output(constraint: Any, text: str) -> str | None:
    """Why `text` breaks `constraint` (a load.constraints.Constraint), or None when it meets it."""
    if constraint.kind in ("json_schema", "tool_call"):
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import best_match

        try:
            document = json.loads(text)
        except ValueError as exc:
            return f"not JSON: {exc}"
        error = best_match(Draft202012Validator(constraint.schema).iter_errors(document))
        if error is None:
            return None
        where = "/".join(str(part) for part in error.absolute_path) or "(the document)"
        return f"schema violation at {where}: {error.message}"
    if constraint.kind == "regex":
        return None if re.fullmatch(constraint.value, text) else f"does not match the regex {constraint.value!r}"
    if constraint.kind == "choice":
        return None if text in constraint.value else f"is none of the choices {constraint.value!r}"
    return f"unknown constraint kind {constraint.kind!r}"


@dataclass(frozen=True)
class InvalidOutput:
    side: str
    repeat: int
    index: int
    constraint: str  # the constraint's label
    output: str
    message: str
    at_max_tokens: bool = False  # the output stopped at max_tokens: the answer may simply have been cut off

    def describe(self) -> str:
        output = self.output if len(self.output) <= _EXCERPT else self.output[:_EXCERPT] + "..."
        cut = " (stopped at max_tokens: raise output_len if the answer was cut off)" if self.at_max_tokens else ""
        return (
            f"{self.side} repeat {self.repeat} request {self.index} [{self.constraint}]: {self.message}{cut}; "
            f"output {output!r}"
        )


@dataclass
class SideValidity:
    """What the validator found on one side: outputs checked, valid, and each invalid one."""

    side: str
    checked: int = 0
    valid: int = 0
    failed_requests: int = 0  # requests that returned no output to check (their error is the run's)
    invalid: list[InvalidOutput] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "checked": self.checked,
            "valid": self.valid,
            "invalid": len(self.invalid),
            "failed_requests": self.failed_requests,
        }


def side_validity(side: str, runs: list, max_tokens: int | None = None) -> SideValidity:
    """Check every constrained output of `runs` (measure.result.Run) on one side."""
    found = SideValidity(side)
    for run in runs:
        for record in run.records:
            constraint = getattr(record, "constraint", None)
            if constraint is None:
                continue
            if not record.success:
                found.failed_requests += 1
                continue
            found.checked += 1
            message = check_output(constraint, record.text)
            if message is None:
                found.valid += 1
                continue
            cut = max_tokens is not None and record.output_tokens >= max_tokens
            found.invalid.append(
                InvalidOutput(side, run.repeat, record.index, constraint.label(), record.text, message, cut)
            )
    return found


def validity_failure(reference: SideValidity, speculative: SideValidity, label: str) -> str | None:
    """The failure message for invalid outputs on either side, or None when every checked output is valid."""
    if not reference.invalid and not speculative.invalid:
        return None
    lines = [f"{label}: constrained outputs that break their constraint"]
    for side in (speculative, reference):
        if side.invalid:
            lines.append(f"  {side.side}: {len(side.invalid)} of {side.checked} invalid")
            lines.extend(f"    {bad.describe()}" for bad in side.invalid[:8])
    if reference.invalid:
        lines.append(
            "  the reference (no SD) produced invalid outputs too: that is the engine's constrained decoding "
            "(or max_tokens too small for the answer), not speculative decoding"
        )
    else:
        lines.append("  the reference's outputs are all valid: SD's drafted tokens bypassed the grammar")
    return "\n".join(lines)


def _max_tokens(workload: Any) -> int | None:
    return workload.get("output_len") if isinstance(workload, dict) else None


class ConstrainedFigures:
    """A result's constraint checks and figures: a part of `result.SpecDecResult`."""

    def __init__(self, result: SpecDecResult):
        self.result = result

    def validity(self, side: str = "speculative") -> SideValidity:
        runs = self.result.speculative_runs if side == "speculative" else self.result.reference_runs
        return side_validity(side, runs, _max_tokens(self.result.workload))

    @property
    def constrained(self) -> bool:
        # Records made before constraints existed (saved runs, callers' own records) carry none.
        return any(
            getattr(r, "constraint", None) is not None for run in self.result.reference_runs for r in run.records
        )

    def assert_outputs_valid(self):
        """Every constrained output, on both sides, meets its constraint; returns the result."""
        message = validity_failure(self.validity("reference"), self.validity("speculative"), self.result.spec.label())
        if message is not None:
            raise AssertionError(message)
        return self.result

    def constraint_figures(self) -> dict | None:
        """The row's constraint entry: the constraints, validity per side, and the same prompts' free figures
        beside the constrained ones (`unconstrained`, set by ``specdec.run(unconstrained=True)``)."""
        if not self.constrained:
            return None
        labels = sorted(
            {
                r.constraint.label()
                for run in self.result.reference_runs
                for r in run.records
                if getattr(r, "constraint", None)
            }
        )
        free = getattr(self.result, "unconstrained", None)
        figures = {
            "constraints": labels,
            "validity": {side: self.validity(side).as_dict() for side in ("reference", "speculative")},
            "constrained": _figures(self.result),
            "unconstrained": _figures(free) if free is not None else None,
            "grammar_rejected_drafts": GRAMMAR_REJECTED_UNAVAILABLE,
        }
        if free is not None:
            figures["unconstrained_validity"] = {
                side: free.validity(side).as_dict() for side in ("reference", "speculative")
            }
        return figures


def _figures(result: Any) -> dict:
    def finite(value: float) -> float | None:
        return value if isinstance(value, (int, float)) and math.isfinite(value) else None

    return {
        "speedup": finite(result.speedup()),
        "acceptance_rate": finite(result.acceptance_rate),
        "acceptance_length": finite(result.acceptance_length),
        "per_position_acceptance": [finite(v) for v in result.per_position_acceptance],
        "match_rate": finite(result.match_rate),
    }


def constraint_cells(figures: dict | None) -> dict[str, str]:
    """The row's short cells for the terminal table, summary.md and JUnit (empty for free traffic)."""
    if not figures:
        return {}
    valid = figures["validity"]

    def counts(side: dict) -> str:
        return f"{side['valid']}/{side['checked']}"

    def pair(name: str, fmt: str) -> str:
        value = figures["constrained"][name]
        free = (figures["unconstrained"] or {}).get(name) if figures["unconstrained"] else None
        shown = format(value, fmt) if value is not None else "unavailable"
        return shown + (f" (free {format(free, fmt)})" if free is not None else "")

    return {
        "constraint": ", ".join(figures["constraints"]),
        "valid (ref / SD)": f"{counts(valid['reference'])} / {counts(valid['speculative'])}",
        "constrained speedup": pair("speedup", ".2f"),
        "constrained acceptance": pair("acceptance_rate", ".0%"),
    }


def constraint_properties(figures: dict) -> dict[str, Any]:
    """Flat JUnit properties of a row's constraint entry: validity counts per side, constrained and free figures
    (a figure nobody measured says why, never 0)."""
    props: dict[str, Any] = {"constraints": ", ".join(figures["constraints"])}
    for side, counts in figures["validity"].items():
        props[f"{side}_valid_outputs"] = f"{counts['valid']}/{counts['checked']}"
    for which in ("constrained", "unconstrained"):
        values = figures.get(which)
        for name in ("speedup", "acceptance_rate", "acceptance_length", "match_rate"):
            value = (values or {}).get(name)
            why = "not measured: run(unconstrained=True) measures the free side" if values is None else "unavailable"
            props[f"{which}_{name}"] = round(value, 4) if value is not None else why
    props["grammar_rejected_drafts"] = figures["grammar_rejected_drafts"]
    return props


def free_reference(test: Any, seed: int, logprobs: int | None) -> None:
    """Measure the same prompts' free reference before SD's side of a constrained run: with one server at a
    time, the free run after SD's otherwise restarts the reference and then SD (two vLLM starts a test)."""
    free = replace(test.workload, unconstrained=True)
    prompts = test.measurements.prompts(test.spec.model, free, test.pattern, seed)
    test.measurements.reference(test.spec, free, test.pattern, prompts, seed=seed, logprobs=logprobs)


def finish_constrained(test: Any, result: Any, seed: int, logprobs: int | None, unconstrained: bool) -> None:
    """After `SpecDecTest.run`: the free run beside a constrained one on request, then every output checked."""
    if not hasattr(result, "constraint_figures"):  # a capacity search or a build comparison: not checked here
        if unconstrained:
            raise ValueError("run(unconstrained=True) applies to a run's result, not a capacity search or builds")
        return
    if unconstrained:
        if not result.constrained:
            raise ValueError(
                f"{test.spec.label()}: run(unconstrained=True) needs constrained traffic (a workload with a "
                "constraint, or the bundled 'structured' / 'tool_calls')"
            )
        free = replace(test.workload, unconstrained=True)
        result.unconstrained = test.measurements.run(
            test.spec, free, test.pattern, seed=seed, logprobs=logprobs, slo=test.slo
        )
        test.measurements.on_event(
            f"{test.spec.label()}: unconstrained speedup {result.unconstrained.speedup():.2f}x, "
            f"acceptance {result.unconstrained.acceptance_rate:.0%}"
        )
    if result.constrained:
        result.assert_outputs_valid()
