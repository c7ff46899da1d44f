"""What a row says about the sequential checks (verdict.sequential): runs taken, why they stopped, spread."""

from __future__ import annotations

import math


def decision_cells(result) -> dict:
    """The row's `runs`, `spread` and `decisions` (results without timing checks say so)."""
    if not hasattr(result, "runs_note"):
        return {"runs": None, "spread": None, "decisions": {}}
    decisions = {
        name: {
            "outcome": d.outcome,
            "estimate": _finite(d.ratio),
            "interval": [_finite(v) for v in d.ratio_interval],
            "runs": d.runs,
            "draws": d.draws,
            "stopped": d.stopped,
            "basis": d.interval,
            "why": d.why or None,
            "false_fail": _finite(d.false_fail),  # None: decided on one run, no error rate
        }
        for name, d in result.decisions.items()
    }
    return {"runs": result.runs_note(), "spread": result.spread_note(), "decisions": decisions}


def outcome_with_decisions(outcome: str, result) -> str:
    """A passed test whose result left a timing check undecided is `undecided`: not a pass."""
    if outcome == "passed" and result is not None and hasattr(result, "undecided") and result.undecided():
        return "undecided"
    return outcome


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
