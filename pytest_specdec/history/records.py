"""What a history stores of a session: the session itself, and each figure of each report row.

A row becomes one `Figure` per metric it measured (a speedup, an acceptance
figure, each side's tok/s and ms), with the spread its repeats showed where
the row has one.  Figures are grouped into series by (test, fingerprint,
metric): the fingerprint is the environment's key fields (engine, version,
hardware, driver, torch), with the row's own engine where it is not vLLM,
so a series never mixes two engines or two kinds of hardware.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from ..verdict.metric_names import SD_RATIO_METRICS, SIDES, SPEEDUP_METRICS, higher_is_better, speedup_name
from ..verdict.fingerprint import comparable_fields
from ..engines.server_spec import DEFAULT_ENGINE

RATIO_FIGURES = (
    *(speedup_name(metric) for metric in SPEEDUP_METRICS),
    "expected_speedup",
    *SD_RATIO_METRICS,
    "cost_ratio",
)
# The figure a row's repeat range (`speedup_range`) is the spread of.
RANGED = {"speedup_output_throughput": "speedup_range"}
# The figure whose own log variance from its session's runs a row carries (`speedup_own_variance`): what a
# learned drift takes off each session's value (verdict.learned_drift).
OWN_VARIANCE = {"speedup_output_throughput": "speedup_own_variance"}


@dataclass(frozen=True)
class SessionRecord:
    """One pytest session: where in the code's history it ran, and how it ended."""

    session_uid: str
    commit: str | None
    branch: str | None
    started_at: str  # ISO 8601, UTC
    finished_at: str
    outcome: str  # "passed", "failed" or "interrupted"
    fingerprint: Mapping[str, Any]
    plugin_version: str | None = None


@dataclass(frozen=True)
class Figure:
    """One measured value of one row, with its series key and the spread over the row's repeats."""

    test: str
    config: str
    engine: str
    engine_version: str | None
    fingerprint_key: str
    workload: str | None
    access_pattern: str | None
    outcome: str
    regression: str
    metric: str
    value: float
    low: float | None = None
    high: float | None = None
    repeats: int | None = None
    own_variance: float | None = None  # the value's log variance from its own session's runs (OWN_VARIANCE)

    @property
    def higher_is_better(self) -> bool:
        return higher_is_better(run_metric(self.metric))


def run_metric(metric: str) -> str:
    """``speculative_median_tpot_ms`` -> ``median_tpot_ms``: a side's figure reads like the run metric."""
    for side in SIDES:
        if metric.startswith(side + "_"):
            return metric[len(side) + 1 :]
    return metric


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_session_uid() -> str:
    return uuid.uuid4().hex


def fingerprint_key(fingerprint: Mapping[str, Any], row: Mapping[str, Any] | None = None) -> str:
    """A short, stable key of the fingerprint's comparable fields (and the row's engine where it is not vLLM).

    Hook-added fields (a runner type, an image) are part of it: two runner types are two series.  A
    fingerprint without any keeps the key it always had."""
    fields = comparable_fields(dict(fingerprint))
    if row is not None and row.get("engine") not in (None, DEFAULT_ENGINE):
        fields.update(engine=row.get("engine"), engine_version=row.get("engine_version"))
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _finite(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def figures_of(rows: Iterable[Mapping[str, Any]], fingerprint: Mapping[str, Any]) -> Iterator[Figure]:
    """Every figure of every row, in row order; nulls (unavailable figures) are left out, never stored as 0."""
    for row in rows:
        common = dict(
            test=str(row.get("test")),
            config=str(row.get("config") or ""),
            engine=str(row.get("engine") or DEFAULT_ENGINE),
            engine_version=row.get("engine_version"),
            fingerprint_key=fingerprint_key(fingerprint, row),
            workload=row.get("workload"),
            access_pattern=row.get("access_pattern"),
            outcome=str(row.get("outcome")),
            regression=str(row.get("regression") or "not checked"),
            repeats=row.get("repeats") or None,
        )
        for metric in RATIO_FIGURES:
            value = _finite(row.get(metric))
            if value is None:
                continue
            low = high = None
            spread = row.get(RANGED.get(metric, ""))
            if isinstance(spread, (list, tuple)) and len(spread) == 2:
                low, high = _finite(spread[0]), _finite(spread[1])
            own = _finite(row.get(OWN_VARIANCE.get(metric, "")))
            own = own if own is not None and own >= 0 else None
            yield Figure(metric=metric, value=value, low=low, high=high, own_variance=own, **common)
        for side in SIDES:
            for metric, raw in sorted((row.get(side) or {}).items()):
                value = _finite(raw)
                if value is not None:
                    yield Figure(metric=f"{side}_{metric}", value=value, **common)


def git_revision(root: Path) -> tuple[str | None, str | None]:
    """(commit sha, branch) of the repository at `root`; (None, None) outside one or without git."""

    def run(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() or None if done.returncode == 0 else None

    sha = run("rev-parse", "HEAD")
    branch = run("rev-parse", "--abbrev-ref", "HEAD")
    return sha, (None if branch == "HEAD" else branch)  # "HEAD": a detached checkout has no branch
