"""What each server was doing during a comparison, per side, from its series (serving.server_series).

Per side over its repeats: the peak and mean KV cache usage, the peak of requests running and waiting, the
preemptions during the runs, and what reading the series cost (reads, median milliseconds a read).  The
first repeat's whole series goes to the report's plot.  A comparison where one side preempted or queued
requests and the other did not is flagged (`load_flags`): SD's draft takes KV cache from the target, so at
the same load it can run out where the reference does not, and its latencies then include that wait.
"""

from __future__ import annotations

import statistics
from typing import Any

from ..formatting import NOTHING

SIDES = (("reference", "reference_runs"), ("speculative", "speculative_runs"))


def _series(runs) -> list:
    return [run.series for run in runs if getattr(run, "series", None) is not None]


def _side(runs) -> dict[str, Any]:
    series = _series(runs)
    if not series:
        return {"unavailable": "the runs' server series were not read"}
    missing = next((s for s in series if not s.available), None)
    if missing is not None:
        return {"unavailable": missing.summary()["unavailable"]}
    summaries = [s.summary() for s in series]

    def values(key: str) -> list[float]:
        return [s[key] for s in summaries if s[key] is not None]

    def peak(key: str) -> float | None:
        return max(values(key)) if values(key) else None

    return {
        "kv_cache_usage_peak": peak("kv_cache_usage_peak"),
        "kv_cache_usage_mean": statistics.median(values("kv_cache_usage_mean"))
        if values("kv_cache_usage_mean")
        else None,
        "running_peak": peak("running_peak"),
        "waiting_peak": peak("waiting_peak"),
        "preemptions": sum(values("preemptions")) if values("preemptions") else None,
        "samples": sum(s["samples"] for s in summaries),
        "interval_s": summaries[0]["interval_s"],
        "read_ms_median": statistics.median(ms for s in series for ms in s.read_ms),
        "failed_reads": sum(s["failed_reads"] for s in summaries),
        "missing": summaries[0]["missing"],
        "first_run": series[0].as_dict(),
    }


def series_figures(result) -> dict[str, Any]:
    """`{"reference": {...}, "speculative": {...}, "flags": [...]}` for a result's row; a side whose series
    could not be read has `unavailable` with the reason."""
    sides = {side: _side(getattr(result, attr, None) or []) for side, attr in SIDES}
    return {**sides, "flags": load_flags(sides)}


def load_flags(sides: dict[str, dict]) -> list[str]:
    """Where one side preempted or queued requests during its runs and the other did not, in words."""
    reference, speculative = sides["reference"], sides["speculative"]
    if "unavailable" in reference or "unavailable" in speculative:
        return []
    found = []
    for key, what in (("preemptions", "preempted {n:g} requests"), ("waiting_peak", "queued up to {n:g} requests")):
        ref, sd = reference.get(key), speculative.get(key)
        if ref is None or sd is None or (ref > 0) == (sd > 0):
            continue
        busy, idle = ("SD", "the reference") if sd > 0 else ("the reference", "SD")
        found.append(
            f"{busy} {what.format(n=max(ref, sd))} during its runs and {idle} none: its latencies include that wait "
            f"(KV cache usage peaked at {_share(speculative)} with SD, {_share(reference)} without)"
        )
    return found


def _share(side: dict) -> str:
    peak = side.get("kv_cache_usage_peak")
    return f"{peak:.0%}" if peak is not None else "an unreported share"


def describe_series(figures: dict[str, Any]) -> str:
    """One line for a test's terminal summary."""
    parts = []
    for side, label in (("reference", "reference"), ("speculative", "SD")):
        figures_of = figures.get(side) or {}
        if "unavailable" in figures_of:
            parts.append(f"{label}: unavailable ({figures_of['unavailable']})")
            continue
        kv = figures_of.get("kv_cache_usage_peak")
        parts.append(
            f"{label}: KV peak {NOTHING if kv is None else f'{kv:.0%}'}, waiting peak "
            f"{_count(figures_of.get('waiting_peak'))}, preemptions {_count(figures_of.get('preemptions'))}"
        )
    return "; ".join(parts)


def _count(value) -> str:
    return NOTHING if value is None else f"{value:g}"
