"""Did the reference move during the session?  Its first run, measured again at the end.

Every SD run of a session is compared with reference runs measured once, at
the start (the reference server is shared and, one server at a time, stopped
when SD servers start).  A reference measured cold, or a machine whose speed
drifts (thermal limits, a neighbour's job, a GPU clock), then biases every
speedup measured against it, and nothing in the runs shows it.  So the
session measures each reference traffic once more at its end, on a freshly
warmed reference server, and compares.  Why not interleave the sides instead:
with one server at a time, interleaving costs a server start per switch,
where one closing run costs one start per target.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

# The figures compared: what every speedup is a ratio of.
FIGURES = ("output_throughput", "median_tpot_ms")
# A move smaller than this is within the noise of two runs of a warm server measured here (CPU
# build, 2 cores: repeats of one traffic within 3%), unless the session's own repeats spread wider.
MIN_NOISE = 0.05


@dataclass(frozen=True)
class DriftCheck:
    """One reference traffic, measured first and again at the session's end."""

    target: str
    traffic: str  # workload/pattern (seed)
    first: dict
    again: dict
    change: dict  # again / first - 1 per figure
    noise: float
    drifted: bool

    def describe(self) -> str:
        moves = ", ".join(
            f"{name} {self.first[name]:.4g} -> {self.again[name]:.4g} ({self.change[name]:+.1%})"
            for name in FIGURES
            if math.isfinite(self.change.get(name, math.nan))
        )
        verdict = f"MOVED beyond the {self.noise:.0%} noise" if self.drifted else f"within the {self.noise:.0%} noise"
        return f"reference {self.target} on {self.traffic}: {moves or 'no figure to compare'}; {verdict}"

    def as_dict(self) -> dict:
        return {**asdict(self), "describe": self.describe()}


def _figures(run) -> dict:
    flat = run.metrics.as_dict()
    return {name: float(flat.get(name, math.nan)) for name in FIGURES}


def spread(runs, figure: str) -> float:
    """(max - min) / min of one figure over runs; 0 with fewer than two finite values."""
    values = [run.metrics.as_dict().get(figure) for run in runs]
    values = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    return (max(values) - min(values)) / min(values) if len(values) > 1 else 0.0


def compare(target: str, traffic: str, first_runs, again) -> DriftCheck:
    """The first reference run against the same traffic measured again (`again`, one run)."""
    first, later = _figures(first_runs[0]), _figures(again)
    change = {
        name: (later[name] / first[name] - 1) if first[name] > 0 and math.isfinite(later[name]) else math.nan
        for name in FIGURES
    }
    noise = max([MIN_NOISE] + [spread(first_runs, name) for name in FIGURES])
    drifted = any(math.isfinite(c) and abs(c) > noise for c in change.values())
    return DriftCheck(target, traffic, first, later, change, noise, drifted)


def flag_drifted_rows(rows: list[dict], checks: list[DriftCheck]) -> None:
    """Add a ``drift`` fairness flag to each result row measured against a reference that moved.

    A row names its target's model and server flags in ``target``; every row of that target is
    flagged, since all its SD runs were compared with the reference measured at the start.
    """
    moved = {check.target: check for check in checks if check.drifted}
    for row in rows:
        check = moved.get(row.get("target"))
        if check is not None:
            row.setdefault("fairness_flags", []).append(
                {
                    "kind": "drift",
                    "message": check.describe(),
                    "fix": "run again on a quiet machine; on a GPU, check clocks and other jobs",
                    "describe": f"drift: {check.describe()}",
                }
            )


def drift_sections(checks: list[DriftCheck], skipped: str | None = None) -> list[tuple[str, list[str]]]:
    """The terminal summary's section for the drift check (none when it was not asked for; why, where it was
    asked for and did not run)."""
    if skipped:
        return [("specdec drift check", [skipped])]
    if not checks:
        return []
    return [("specdec drift check", [("DRIFT: " if c.drifted else "") + c.describe() for c in checks])]
